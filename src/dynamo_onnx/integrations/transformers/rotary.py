"""Rotary embeddings of transformers made traceable: one whose forward branches on a size
read from a tensor is traced with the same computation as a tensor operation, and LongRoPE's
long frequencies are made before the capture rather than during it.

PhiMoE's rotary embedding chooses its scale with ``if ... and seq_len`` and ``long_mscale if
seq_len > original_max_position_embeddings else short_mscale`` on ``seq_len =
torch.max(position_ids) + 1``: Python branches on a tensor's value, which torch.export
cannot follow (DO104), and which would fix one scale for every length if it could. While
capturing, such a module's forward is the same computation with the choice made by
``torch.where`` (a DO525 note at the line replaced), so the ONNX model takes the long scale
past the original context and the short one below, as eager does; the module's own forward
is put back afterwards.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location

__all__ = ["long_frequencies_as_buffers", "traceable_rotary"]

#: The keys of ``rope_parameters`` that make a rotary embedding PhiMoE's scaled LongRoPE.
_SCALED = ("long_mscale", "short_mscale", "original_max_position_embeddings")


def _scaled_longrope(module: torch.nn.Module) -> dict[str, Any] | None:
    """The ``rope_parameters`` of a rotary embedding that picks its scale by a Python branch
    on the positions (PhiMoE's), or None."""
    config = getattr(module, "config", None)
    parameters = getattr(config, "rope_parameters", None)
    if (
        not isinstance(parameters, dict)
        or parameters.get("rope_type") != "longrope"
        or any(parameters.get(key) is None for key in _SCALED)
        or not callable(getattr(module, "rope_init_fn", None))
    ):
        return None
    source = inspect.getsource(inspect.unwrap(type(module).forward))
    return parameters if "mscale" in source and "seq_len >" in source else None


def _branch_line(module: torch.nn.Module) -> Location:
    """The line of the forward's branch on ``seq_len`` (the one replaced)."""
    forward = inspect.unwrap(type(module).forward)
    lines, first = inspect.getsourcelines(forward)
    found = next((i for i, text in enumerate(lines) if "seq_len >" in text), 0)
    return Location(inspect.getsourcefile(forward) or "<unknown>", first + found, "forward")


def _traced_forward(module: torch.nn.Module, parameters: dict[str, Any]) -> Any:
    """The module's forward with the scale chosen by ``torch.where``."""

    def forward(x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq_len = torch.max(position_ids) + 1
        longer = seq_len > parameters["original_max_position_embeddings"]
        mscale = torch.where(
            longer,
            torch.tensor(float(parameters["long_mscale"])),
            torch.tensor(float(parameters["short_mscale"])),
        )
        inv_freq, _ = module.rope_init_fn(module.config)
        freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * mscale).to(x.dtype), (emb.sin() * mscale).to(x.dtype)

    return forward


def _needs_long_frequencies(module: torch.nn.Module) -> bool:
    """A LongRoPE rotary embedding with real frequencies that has not made its long ones."""
    inv_freq = getattr(module, "inv_freq", None)
    return (
        getattr(module, "rope_type", None) == "longrope"
        and "long_inv_freq" not in vars(module)
        and isinstance(inv_freq, torch.Tensor)
        and inv_freq.device.type != "meta"
    )


def _make_long_frequencies(module: torch.nn.Module) -> None:
    """One call of the module (a one-token position, on its device) makes LongRoPE's
    ``long_inv_freq``; the frequencies buffer the call rewrites is put back."""
    inv_freq = module.inv_freq
    kept = inv_freq.clone()
    with torch.no_grad():
        x = torch.zeros(1, 1, dtype=inv_freq.dtype, device=inv_freq.device)
        module(x, torch.zeros(1, 1, dtype=torch.long, device=inv_freq.device))
        inv_freq.copy_(kept)


def long_frequencies_as_buffers(model: torch.nn.Module) -> None:
    """LongRoPE's long frequencies made now and kept as a non-persistent buffer, for a
    model whose buffers are about to go to the meta device and be streamed (export-llm's
    streamed load): the update then finds ``long_inv_freq`` on the capture's device and
    sets the buffer to itself, so the capture reads a buffer whose value was computed here
    instead of a tensor assigned during export (lifted without a value, and torch's
    warning on the caller's terminal)."""
    for module in model.modules():
        if _needs_long_frequencies(module):
            _make_long_frequencies(module)
            long_inv_freq = vars(module).pop("long_inv_freq")
            module.register_buffer("long_inv_freq", long_inv_freq, persistent=False)


@contextlib.contextmanager
def _long_frequencies_made(module: torch.nn.Module) -> Iterator[None]:
    """transformers' LongRoPE update (``dynamic_rope_update``) makes the long frequencies on
    its first call and keeps them as a plain attribute, ``long_inv_freq``: made while
    capturing, torch.export warns on the caller's terminal that a tensor attribute was
    assigned. One call of the module before the capture makes them
    (:func:`_make_long_frequencies`); the attribute is removed afterwards, so the model is
    left as it was given."""
    if not _needs_long_frequencies(module):
        yield
        return
    _make_long_frequencies(module)
    try:
        yield
    finally:
        vars(module).pop("long_inv_freq", None)


@contextlib.contextmanager
def traceable_rotary(ctx: DiagnosticContext, model: torch.nn.Module) -> Iterator[None]:
    """While the block runs, PhiMoE's rotary embeddings choose their scale by
    ``torch.where`` (a DO525 note at the branch), their forwards put back afterwards; and
    LongRoPE's long frequencies exist before the capture (:func:`_long_frequencies_made`)."""
    with contextlib.ExitStack() as stack:
        for module in model.modules():
            stack.enter_context(_long_frequencies_made(module))
        with _scaled_forwards(ctx, model):
            yield


@contextlib.contextmanager
def _scaled_forwards(ctx: DiagnosticContext, model: torch.nn.Module) -> Iterator[None]:
    replaced = []
    for name, module in model.named_modules():
        parameters = _scaled_longrope(module)
        if parameters is None:
            continue
        module.forward = _traced_forward(module, parameters)  # type: ignore[method-assign]
        replaced.append(module)
        ctx.record(
            "rotary-scale-traced",
            locations=[_branch_line(module)],
            module=name,
            cls=type(module).__name__,
        )
    try:
        yield
    finally:
        for module in replaced:
            del module.forward
