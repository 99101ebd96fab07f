"""The semantics pass: what the captured model does that an ONNX model cannot keep.

An export can succeed and still differ from eager PyTorch: an input changed in place, a
buffer updated across calls, training-mode modules, random numbers. Each is a warning at the
user's line that says what the ONNX model does instead and how to get eager's behavior.
The pass runs after decomposition: the program is functional there, so its signature names
every input and buffer forward writes, through any view; the captured program (in-place
operators as the user wrote them) gives the lines. It changes nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.fx
from torch.export import graph_signature as gs

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.fx import draws_random
from dynamo_onnx.passes.metadata import node_source
from dynamo_onnx.passes.semantics.mutations import mutation_sites, scratch_buffers
from dynamo_onnx.registry import target_name

__all__ = ["TRAINING_BEHAVIOR", "SemanticsPass"]

#: The outputs of a functional program that carry a write to one of its inputs.
_WRITTEN = (
    gs.OutputKind.BUFFER_MUTATION,
    gs.OutputKind.PARAMETER_MUTATION,
    gs.OutputKind.USER_INPUT_MUTATION,
)

#: Module types whose forward differs between training and evaluation, and how.
TRAINING_BEHAVIOR: tuple[tuple[tuple[type[torch.nn.Module], ...], str], ...] = (
    (
        (
            torch.nn.Dropout,
            torch.nn.Dropout1d,
            torch.nn.Dropout2d,
            torch.nn.Dropout3d,
            torch.nn.AlphaDropout,
            torch.nn.FeatureAlphaDropout,
        ),
        "drops values at random",
    ),
    (
        (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm),
        "normalizes with the batch's statistics",
    ),
    ((torch.nn.RReLU,), "draws random slopes"),
)


class SemanticsPass:
    """Warnings for input and buffer mutation, training mode and random operators."""

    name: ClassVar[str] = PassName.SEMANTICS
    error_type: ClassVar[type[OnnxExporterError]] = OnnxExporterError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        program = state.exported_program
        assert program is not None
        model = state.checked.model
        # Training mode first: it is the cause of the buffer updates and random draws of
        # the modules it names, which are not reported again (one cause, one finding,
        # and the first fix a gate shows is ``model.eval()``).
        training: frozenset[str] = frozenset()
        if isinstance(model, torch.nn.Module):
            training = _training_mode(ctx, program, model)
        _mutations(ctx, state, training)
        _random_operators(ctx, program, training)
        return state


def _where(ctx: DiagnosticContext, node: torch.fx.Node) -> tuple[Any, str]:
    source = node_source(ctx, node)
    return source, ctx.display(source.primary)


def _in_modules(path: str, modules: frozenset[str]) -> bool:
    """Whether a module path (``encoder.0.norm``) is one of ``modules`` or inside one."""
    return any(path == m or path.startswith(m + ".") for m in modules)


def _called_in(node: torch.fx.Node, modules: frozenset[str]) -> bool:
    stack = node.meta.get("nn_module_stack") or {}
    return any(_in_modules(path, modules) for path, _ in stack.values())


def _mutations(ctx: DiagnosticContext, state: ExportState, training: frozenset[str]) -> None:
    """DO120/DO121 for every input, buffer or parameter that forward writes.

    Decided from the decomposed program's signature: functionalization records every
    write there (``buffers_to_mutate``, ``user_inputs_to_mutate``), through any view
    (``self.cache[:, :n] = x``, ``x[0].add_(1)``, ``buf.narrow(...).copy_(y)``). Each is
    located at the user's lines that write it (``mutation_sites``).
    """
    program = state.exported_program
    assert program is not None
    sites = mutation_sites(state.captured_program or program, program)
    scratch = scratch_buffers(state.captured_program or program, program)
    for spec in program.graph_signature.output_specs:
        if spec.kind not in _WRITTEN or spec.target is None:
            continue
        target = spec.target
        if spec.kind != gs.OutputKind.USER_INPUT_MUTATION:
            owner = target.rpartition(".")[0]
            if owner and _in_modules(owner, training):
                continue  # a training-mode module's statistics: DO122 says it
            if target in scratch:
                continue  # rewritten whole, then read: every run computes it again
        writes = sites.get(target, [])
        sources = [node_source(ctx, node) for node, _ in writes]
        located = [s.primary for s in sources if s.primary is not None]
        primary = located[0] if located else state.checked.model_location
        frames = next((s.frames for s in sources if s.primary is not None), ())
        related = list(dict.fromkeys(loc for loc in located[1:] if loc != primary))
        common: dict[str, Any] = {
            "locations": [primary],
            "stack": frames,
            "related": related,
            "properties": {"writes": len(writes)},
            "source": ctx.display(primary) if primary is not None else "an unknown line",
            "op": writes[0][1] if writes else "an in-place write",
        }
        if spec.kind == gs.OutputKind.USER_INPUT_MUTATION:
            ctx.record("input-mutated", input=state.checked.label(target), **common)
        else:
            ctx.record("buffer-mutated", buffer=target, **common)


def _random_operators(
    ctx: DiagnosticContext, program: torch.export.ExportedProgram, training: frozenset[str]
) -> None:
    for node in program.graph.nodes:
        if draws_random(node) and not _called_in(node, training):
            source, where = _where(ctx, node)
            ctx.record(
                "nondeterministic-operator",
                locations=[source.primary],
                stack=source.frames,
                properties={"fx_node": node.name},
                op=target_name(node.target),
                source=where,
            )


def _training_mode(
    ctx: DiagnosticContext, program: torch.export.ExportedProgram, model: torch.nn.Module
) -> frozenset[str]:
    """A warning for each module in training mode whose behavior depends on it, at the line
    that calls it (the first FX node made inside it). Returns the paths reported."""
    reported: set[str] = set()
    if not model.training:
        return frozenset()
    first_node: dict[str, torch.fx.Node] = {}
    for node in program.graph.nodes:
        for path, _ in (node.meta.get("nn_module_stack") or {}).values():
            first_node.setdefault(path, node)
    for path, module in model.named_modules():
        behavior = next((b for t, b in TRAINING_BEHAVIOR if isinstance(module, t)), None)
        if behavior is None or not module.training or path not in first_node:
            continue
        source, where = _where(ctx, first_node[path])
        ctx.record(
            "training-mode",
            locations=[source.primary],
            stack=source.frames,
            properties={"module_path": path},
            module=path,
            kind=f"{type(module).__name__}: {behavior}",
            source=where,
        )
        reported.add(path)
    return frozenset(reported)
