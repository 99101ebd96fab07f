"""The verification pass: ONNX Runtime against eager PyTorch, output by output, with explicit
tolerances.

torch.onnx's verify uses fixed, silent thresholds (5e-3 absolute, 1e-1 relative). Here the
tolerances are arguments and every comparison is a finding: a mismatch is a warning with the
figures of each output, and ``find_divergence`` names the first FX node whose ONNX value
differs, with its source line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import onnx_ir as ir
import torch
import torch.fx
from torch.export import graph_signature as gs

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import OnnxExporterError, VerificationError
from dynamo_onnx.foreign_text import fx_node_target, read_ort_error
from dynamo_onnx.integrations import copy_family_values, family_of, output_leaves
from dynamo_onnx.io.inputs import user_input_leaves
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.fx import random_outputs, range_bounds
from dynamo_onnx.passes.metadata import FX_NODE, STACK_TRACE, stack_frames
from dynamo_onnx.passes.model import buffers_restored
from dynamo_onnx.passes.verify.comparison import Comparison, compare
from dynamo_onnx.passes.verify.divergence import first_divergence
from dynamo_onnx.passes.verify.request import VerifyRequest
from dynamo_onnx.tensors import is_wrapper_subclass

__all__ = ["Comparison", "VerifyPass", "VerifyRequest", "compare"]


def _leaves(value: Any) -> list[Any]:
    if is_wrapper_subclass(value):  # its plain tensors, as torch.export flattens it
        names, _ = value.__tensor_flatten__()
        return [leaf for name in names for leaf in _leaves(getattr(value, name))]
    if isinstance(value, torch.Tensor):
        return [value]
    family_value = output_leaves(value)  # a cache's tensors, an output class's tuple...
    if family_value is not None:
        return _leaves(family_value)
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


class VerifyPass:
    """Compare every output with eager PyTorch; a finding for each mismatch or the match."""

    name: ClassVar[str] = PassName.VERIFICATION
    error_type: ClassVar[type[OnnxExporterError]] = VerificationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, request: VerifyRequest) -> VerifyRequest:
        comparisons = _verify(ctx, request)
        return dataclasses.replace(request, comparisons=tuple(comparisons))


def _buffers_of(reference: Callable[..., Any]) -> list[torch.Tensor]:
    """The buffers of the module behind ``reference`` (a module or its bound method)."""
    module = reference if isinstance(reference, torch.nn.Module) else None
    owner = getattr(reference, "__self__", None)
    if module is None and isinstance(owner, torch.nn.Module):
        module = owner
    return list(module.buffers()) if module is not None else []


def _eager(
    reference: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[Any]:
    with buffers_restored(_buffers_of(reference)), torch.no_grad():
        # a family value among the inputs (a KV cache) may grow in place when the model
        # runs: the caller's stays
        args, kwargs = copy_family_values(tuple(args)), copy_family_values(dict(kwargs))
        return _leaves(reference(*args, **kwargs))


def _verify(ctx: DiagnosticContext, request: VerifyRequest) -> list[Comparison]:
    args, atol, rtol = request.args, request.atol, request.rtol
    kwargs = dict(request.kwargs or {})
    reference = request.reference
    if reference is None:
        assert request.exported_program is not None
        reference = request.exported_program.module()
    expected = _eager(reference, args, kwargs)
    actual = _run(ctx, request, args, kwargs)
    names = [v.name or f"output_{i}" for i, v in enumerate(request.model.graph.outputs)]
    if actual is None:  # DO604 says why; nothing to compare
        return [Comparison(i, n, float("inf"), float("inf"), False) for i, n in enumerate(names)]
    random = (
        random_outputs(request.exported_program) if request.exported_program is not None else []
    )
    untraced = (
        _other_sizes(request.exported_program, args, kwargs)
        if request.exported_program is not None
        else None
    )
    where = (
        f" (with {untraced[0]}, while the program was traced with {untraced[1]}: a dimension "
        "declared dynamic is traced at size 2 when the example has size 1, and a line that "
        "treats size 1 apart, a squeeze or a broadcast of it, computes otherwise there)"
        if untraced is not None
        else ""
    )
    longer = request.longer_output
    results = _compare_all(ctx, names, actual, expected, atol, rtol, random, where, longer)
    second = None
    if request.second_shape and request.exported_program is not None and all(r.ok for r in results):
        second = _second_inputs(request.exported_program, args, kwargs)
    if second is not None:
        args2, kwargs2, sizes = second
        expected2 = _eager(reference, args2, kwargs2)
        actual2 = _run(ctx, request, args2, kwargs2)
        where = f" (at a second size of the dynamic dimensions: {sizes})"
        at_second = (
            _compare_all(ctx, names, actual2, expected2, atol, rtol, random, where, longer)
            if actual2 is not None
            else [Comparison(0, names[0], float("inf"), float("inf"), False, where)]
        )
    else:
        at_second = []
    if all(r.ok for r in results + at_second):
        shape_only = [r.name for r in results if not r.on_values]
        ctx.record(
            "outputs-match",
            count=len(results),
            on_values=len(results) - len(shape_only),
            on_shape=len(shape_only),
            random_outputs=(
                f" ({', '.join(f'`{n}`' for n in shape_only)}: computed from random numbers, "
                "whose values ONNX Runtime draws itself)"
                if shape_only
                else ""
            ),
            atol=atol,
            rtol=rtol,
            max_abs=max((r.max_abs for r in results + at_second if r.on_values), default=0.0),
        )
    elif request.find_divergence:
        first_divergence(ctx, request, kwargs)
    return results


def _run(
    ctx: DiagnosticContext, request: VerifyRequest, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[torch.Tensor] | None:
    """The ONNX model's outputs on these inputs; None, with DO604, when ONNX Runtime fails
    on inputs whose dynamic dimensions have other sizes than the program was traced at.

    Any other failure is the session's or the model's (DO600), raised as it is.
    """
    try:
        return request.run(*args, **kwargs)
    except Exception as exc:
        if not type(exc).__module__.startswith("onnxruntime") or request.exported_program is None:
            raise
        other = _other_sizes(request.exported_program, args, kwargs)
        if other is None:
            raise
        shapes, traced = other
        error = read_ort_error(str(exc))
        primary, frames, node = _failing_node(ctx, request.model, error.failed_node)
        ctx.record(
            "fails-at-another-size",
            locations=[primary],
            stack=frames,
            properties={"onnx_error": str(exc)},
            shapes=shapes,
            traced=traced,
            node=node,
            reason=error.reason,
        )
        return None


def _other_sizes(
    ep: torch.export.ExportedProgram, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[str, str] | None:
    """(the inputs' shapes, the shapes traced) when some dynamic dimension of the inputs
    has another size than the program's example had; None otherwise."""
    examples = ep.example_inputs
    if examples is None:
        return None
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    specs = [s for s in ep.graph_signature.input_specs if s.kind == gs.InputKind.USER_INPUT]
    try:
        given = user_input_leaves(ep, args, kwargs)
        traced = user_input_leaves(ep, examples[0], examples[1] or {})
    except Exception:  # inputs the program cannot take apart: not this case
        return None
    shapes, traced_shapes, differs = [], [], False
    for spec, now, then in zip(specs, given, traced):
        if not isinstance(now, torch.Tensor) or not isinstance(then, torch.Tensor):
            continue
        val = placeholders[spec.arg.name].meta.get("val")
        dims = val.shape if isinstance(val, torch.Tensor) else ()
        differs |= any(
            not isinstance(d, int) and a != b for d, a, b in zip(dims, now.shape, then.shape)
        )
        shapes.append(f"`{spec.arg.name}` {list(now.shape)}")
        traced_shapes.append(f"`{spec.arg.name}` {list(then.shape)}")
    if not differs:
        return None
    return "inputs " + ", ".join(shapes), ", ".join(traced_shapes)


def _failing_node(
    ctx: DiagnosticContext, model: ir.Model, name: str | None
) -> tuple[Location | None, list[Location], str]:
    """The user's line, the stack and a description of the ONNX node ONNX Runtime named
    (``Name:'squeeze_n1'``), from the origin translation kept in its metadata."""
    node = next(
        (n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.name == name), None
    )
    if node is None:
        return None, [], "ONNX Runtime" if name is None else f"the ONNX node `{name}`"
    props = node.metadata_props
    frames = list(stack_frames(ctx, props.get(STACK_TRACE, "")))
    primary = ctx.user_frame(frames)
    target = fx_node_target(props.get(FX_NODE, ""))
    origin = f"`{target}`" if target else "an operator"
    where = f" at {ctx.display(primary)}" if primary is not None else ""
    return primary, frames, f"its `{node.op_type}` node `{name}` (from {origin}{where})"


def _compare_all(
    ctx: DiagnosticContext,
    names: list[str],
    actual: list[torch.Tensor],
    expected: list[torch.Tensor],
    atol: float,
    rtol: float,
    random: Sequence[bool],
    where: str,
    longer: Callable[[str], int | None] | None = None,
) -> list[Comparison]:
    """Compare output by output; a DO601 warning for each that differs.

    An output computed from random numbers (DO123) is compared on shape only: its values
    can never equal eager's. An output that holds more than eager's along an axis
    (``longer``) is compared on its last positions, eager's. Every other output is
    compared on values.
    """
    if len(actual) != len(expected):
        raise ValueError(
            f"the ONNX model has {len(actual)} outputs, eager PyTorch returned {len(expected)}"
        )
    results = []
    for i, (a, e) in enumerate(zip(actual, expected)):
        if i < len(random) and random[i]:
            same = tuple(a.shape) == tuple(e.shape)
            detail = "; compared on shape only: it is computed from random numbers" + (
                "" if same else f"; shapes differ: {list(a.shape)} vs {list(e.shape)}"
            )
            result = Comparison(
                i, names[i], 0.0 if same else float("inf"), 0.0, same, detail, on_values=False
            )
        else:
            result = _compare_end(i, names[i], a, e, atol, rtol, longer and longer(names[i]))
        results.append(result)
        if not result.ok:
            ctx.record(
                "output-mismatch",
                properties={"output": result.name, "on_values": result.on_values},
                index=result.index,
                name=result.name,
                max_abs=result.max_abs,
                max_rel=result.max_rel,
                atol=atol,
                rtol=rtol,
                detail=result.detail + where,
            )
    return results


def _compare_end(
    index: int,
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    atol: float,
    rtol: float,
    axis: int | None,
) -> Comparison:
    """:func:`compare`, on the last positions of ``actual`` along ``axis`` when it holds
    more there than ``expected`` and has its shape elsewhere."""
    if (
        axis is None
        or actual.dim() != expected.dim()
        or actual.shape[axis] <= expected.shape[axis]
        or any(a != e for j, (a, e) in enumerate(zip(actual.shape, expected.shape)) if j != axis)
    ):
        return compare(index, name, actual, expected, atol, rtol)
    count = expected.shape[axis]
    end = actual.narrow(axis, actual.shape[axis] - count, count)
    result = compare(index, name, end, expected, atol, rtol)
    detail = (
        f"; compared on its last {count} of {actual.shape[axis]} positions along axis {axis}, "
        "those eager returns"
    )
    return dataclasses.replace(result, detail=result.detail + detail)


def _another(tensor: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """A tensor like ``tensor`` at ``shape``: random values in the example's range."""
    if tensor.dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if tensor.is_floating_point() or tensor.is_complex():
        return torch.randn(shape, dtype=tensor.dtype)
    low = int(tensor.min()) if tensor.numel() else 0
    high = int(tensor.max()) + 1 if tensor.numel() else 2
    return torch.randint(low, max(high, low + 1), shape, dtype=tensor.dtype)


def _second_inputs(
    ep: torch.export.ExportedProgram, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], str] | None:
    """The inputs at another size of every dynamic dimension (the same size for a symbol
    shared by several inputs, within its range), or None when the program has none or the
    inputs are nested."""
    flat = [*args, *kwargs.values()]
    if any(isinstance(a, (list, tuple, dict)) or family_of(a) is not None for a in flat):
        return None
    specs = [s for s in ep.graph_signature.input_specs if s.kind == gs.InputKind.USER_INPUT]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    ranges = {str(symbol): vr for symbol, vr in ep.range_constraints.items()}
    sizes: dict[str, int] = {}
    changed = []
    #: each tensor input (by identity) -> its placeholder's value at trace time
    traced = {
        id(leaf): placeholders[spec.arg.name].meta.get("val")
        for leaf, spec in zip(user_input_leaves(ep, args, kwargs), specs)
        if isinstance(leaf, torch.Tensor)
    }
    for leaf in flat:
        if not isinstance(leaf, torch.Tensor):
            continue
        val = traced[id(leaf)]
        for dim, example in zip(val.shape, leaf.shape):
            symbol = str(dim)
            if isinstance(dim, int) or symbol in sizes:
                continue
            if symbol not in ranges:
                return None  # an expression of sizes: no consistent second size to pick
            low, high = range_bounds(ranges[symbol])
            low = max(low or 2, 2)
            size = example + 1 if high is None or example + 1 <= high else example - 1
            if size < low or size == example:
                return None
            sizes[symbol] = size
    if not sizes:
        return None

    def resize(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        val = traced[id(value)]
        shape = [
            sizes.get(str(d), e) if not isinstance(d, int) else e
            for d, e in zip(val.shape, value.shape)
        ]
        changed.append(tuple(shape))
        return _another(value, shape)

    new_args = tuple(resize(a) for a in args)
    new_kwargs = {k: resize(v) for k, v in kwargs.items()}
    return new_args, new_kwargs, ", ".join(f"input shapes {list(s)}" for s in changed)
