"""Whether a narrowed dynamic range is the export's or the model's own: the captured program
run at sizes outside the range, against the eager model at the same sizes.

torch.export narrows a range for two kinds of reasons. Some narrowings change the program:
a branch on the size (``if n > 4``) keeps the example's side, so below the range the program
computes something else than eager PyTorch. Others leave the program valid at every size:
torch keeps a derived size off 0 and 1 (``x[:, :-1]`` has ``n - 1`` rows, so ``n >= 3``;
``x[:, 1:3]`` gets ``n >= 3``), or eager PyTorch itself rejects the sizes outside
(a ``Conv1d`` with kernel 3 needs 3 steps, a 32-row mask sliced by ``n`` needs ``n <= 32``).
Running both answers which kind a narrowing is, without reading torch's log.

Capture asks the same question of a dimension torch fixed to its example size although the
caller asked it dynamic (``Dim.AUTO``, a named axis, ``dynamic_shapes=True``): captured again
with torch's guards deferred, the program keeps the size symbolic, and the dimension stays
dynamic if that program runs and matches eager at other sizes (``must_run``: a Linear's
features, where eager itself refuses another size, stay fixed).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from dynamo_onnx.defaults import PROBE_ATOL, PROBE_RTOL
from dynamo_onnx.fake import is_fake
from dynamo_onnx.foreign_text import symbols_in

__all__ = ["agrees_outside"]


def agrees_outside(
    program: torch.export.ExportedProgram,
    model: Any,
    inputs: tuple[tuple[Any, ...], dict[str, Any]],
    symbol: str,
    sizes: Iterable[int],
    must_run: bool = False,
) -> bool:
    """True if, at each of ``sizes`` for the dimensions of size ``symbol``, the program's
    graph computes what ``model`` does on ``inputs`` (the example's args and kwargs) so
    resized, or both raise. False when it differs, when only one raises, or when it cannot
    be tried (a callable or an ``ExportedProgram`` as the model, an input that is not a
    tensor at the top level, a size derived from ``symbol``, a program that mutates state,
    weights or inputs without data: fake mode, where both would raise and so "agree").
    With ``must_run``, a size where eager raises is a disagreement: the question is then
    whether the model works at that size, not whether the program is as strict as eager."""
    if not isinstance(model, torch.nn.Module) or program.graph_signature.buffers_to_mutate:
        return False
    leaves = [*model.parameters(), *model.buffers(), *inputs[0], *inputs[1].values()]
    if any(is_fake(leaf) for leaf in leaves):
        return False
    try:
        bound = inspect.signature(model.forward).bind(*inputs[0], **inputs[1])
    except (TypeError, ValueError):
        return False
    user = set(program.graph_signature.user_inputs)
    vals = {n.name: n.meta.get("val") for n in program.graph.nodes if n.name in user}
    graph = program.module(check_guards=False)
    graph._forward_pre_hooks.clear()  # the range checks: the point is to go outside them
    for size in sizes:
        for name, value in inputs_of(bound).items():
            resized = _resized(value, vals.get(name), symbol, size)
            if resized is _UNSUPPORTED:
                return False
            bound.arguments[name] = resized
        args, kwargs = bound.args, bound.kwargs
        expected = _run(_stateless(model), args, kwargs)
        if must_run and isinstance(expected, _Raised):
            return False
        if not _same(_run(graph, args, kwargs), expected):
            return False
    return True


def inputs_of(bound: inspect.BoundArguments) -> dict[str, Any]:
    """The bound example inputs by parameter name (a copy: each size starts from them)."""
    return dict(bound.arguments)


_UNSUPPORTED = object()


def _resized(leaf: Any, val: Any, symbol: str, size: int) -> Any:
    """``leaf`` with every dimension that is exactly ``symbol`` made ``size`` long (rows
    repeated cyclically, so ids stay valid ids)."""
    if not isinstance(leaf, torch.Tensor):
        return leaf if _no_tensors(leaf) else _UNSUPPORTED
    if not isinstance(val, torch.Tensor):
        return _UNSUPPORTED
    for dim, expression in enumerate(val.shape):
        text = str(expression)
        if text == symbol:
            index = torch.arange(size) % leaf.shape[dim]
            leaf = leaf.index_select(dim, index)
        elif symbol in symbols_in(text):
            return _UNSUPPORTED  # 2*s: which size it takes is not this dimension's
    return leaf


def _no_tensors(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_no_tensors(v) for v in value)
    if isinstance(value, dict):
        return all(_no_tensors(v) for v in value.values())
    return not isinstance(value, torch.Tensor)


class _Raised:
    """A run that raised: equal to another run that raised."""


def _run(function: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    try:
        with torch.no_grad():
            return function(*args, **kwargs)
    except Exception:  # raising is one of the outcomes compared
        return _Raised()


def _stateless(model: torch.nn.Module) -> Any:
    """``model`` called with copies of its buffers, so running it changes nothing of the
    caller's (a BatchNorm's statistics)."""
    state = {**dict(model.named_parameters()), **{k: b.clone() for k, b in model.named_buffers()}}

    def call(*args: Any, **kwargs: Any) -> Any:
        return torch.func.functional_call(model, state, args, kwargs)

    return call


def _same(got: Any, expected: Any) -> bool:
    """Equal outputs (tensors to float tolerance, in the same nesting), or both raised."""
    if isinstance(got, _Raised) or isinstance(expected, _Raised):
        return isinstance(got, _Raised) and isinstance(expected, _Raised)
    if isinstance(got, torch.Tensor) or isinstance(expected, torch.Tensor):
        if not (isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)):
            return False
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return False
        if not got.is_floating_point() and not got.is_complex():
            return bool(torch.equal(got, expected))
        return bool(torch.allclose(got, expected, atol=PROBE_ATOL, rtol=PROBE_RTOL, equal_nan=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_same(got[k], expected[k]) for k in got)
    if isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(
            _same(a, b) for a, b in zip(got, expected, strict=True)
        )
    return bool(got == expected)
