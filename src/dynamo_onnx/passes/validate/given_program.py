"""A dynamic-shape argument beside a given ``torch.export.ExportedProgram``: its dims
were fixed when it was captured, so ``dynamic_shapes``, ``dynamic_axes`` or
``ExportOptions(dynamic_shapes=True)`` change nothing. Each is an ``argument-ignored``
finding (a warning where it asks for a dim the program has static), never dropped in
silence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.validate import torch_onnx
from dynamo_onnx.passes.validate.shapes import every_dim_option
from dynamo_onnx.specs import Spelling

__all__ = ["report_spec_of_program"]


def report_spec_of_program(ctx: DiagnosticContext, request: Any) -> None:
    """``dynamic_shapes``/``dynamic_axes`` (or ``ExportOptions(dynamic_shapes=True)``)
    beside an ExportedProgram: its dims were fixed when it was captured, so the argument
    changes nothing. A warning where it asks for a dim the program has static (the ONNX
    model will not take other sizes there), else a note: never dropped in silence."""
    for argument in (Spelling.DYNAMIC_SHAPES, Spelling.DYNAMIC_AXES):
        value = getattr(request, argument)
        if value is None:
            continue
        static = _static_in_program(
            request.model, value, request.input_names, axes=argument == Spelling.DYNAMIC_AXES
        )
        reason = (
            "the ExportedProgram's dims were fixed when torch.export.export captured it"
            + (f", and it has {', '.join(static)} static" if static else "")
            + "; to change them, pass dynamic_shapes to torch.export.export when capturing "
            "it, or pass the model itself to dynamo_onnx.export"
        )
        torch_onnx.ignored(ctx, argument, _short_repr(value), reason, warning=bool(static))
    if every_dim_option(request):
        # dynamo_export's spelling of "every dimension dynamic": a warning when the program
        # has no dynamic dimension at all (features a Linear fixes are static in any case)
        dims = _tensor_dims(request.model)
        static = all(isinstance(size, int) for size in dims)
        reason = (
            "the ExportedProgram's dims were fixed when torch.export.export captured it"
            + (", and it has every dimension static" if static else "")
            + "; to change them, pass dynamic_shapes to torch.export.export when capturing "
            "it, or pass the model itself to dynamo_onnx.dynamo_export"
        )
        torch_onnx.ignored(
            ctx, Spelling.EXPORT_OPTIONS, "True", reason, warning=static and bool(dims)
        )


def _tensor_dims(program: Any) -> list[Any]:
    """The sizes of every dimension of ``program``'s top-level tensor inputs."""
    user_inputs = set(program.graph_signature.user_inputs)
    return [
        size
        for node in program.graph.nodes
        if node.op == "placeholder"
        and node.name in user_inputs
        and isinstance(val := node.meta.get("val"), torch.Tensor)
        for size in val.shape
    ]


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _asked_axes(dims: Any, axes: bool) -> list[int]:
    """The dims one entry asks to be dynamic: ``dynamic_axes``' axes (dict keys or a list),
    or a ``dynamic_shapes`` entry's non-static dims (dict or list by index)."""
    if isinstance(dims, Mapping):
        return [int(k) for k, v in dims.items() if isinstance(k, int) and v is not None]
    if isinstance(dims, (list, tuple)):
        if axes:
            return [int(a) for a in dims if isinstance(a, int)]
        return [i for i, d in enumerate(dims) if d is not None and not isinstance(d, int)]
    return []


def _static_in_program(program: Any, spec: Any, input_names: Any, axes: bool) -> list[str]:
    """```x` dim N`` for each dim ``spec`` asks to be dynamic that ``program`` has static,
    among its top-level tensor inputs (by name, ``input_names`` or position)."""
    user_inputs = list(program.graph_signature.user_inputs)
    values = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    if isinstance(spec, (list, tuple)):
        spec = dict(zip(user_inputs, spec))
    if not isinstance(spec, Mapping):
        return []
    names = [str(n) for n in input_names or ()]
    static: list[str] = []
    for key, dims in spec.items():
        name = user_inputs[names.index(key)] if key in names[: len(user_inputs)] else key
        val = values.get(name)
        if not isinstance(val, torch.Tensor):
            continue  # not a top-level tensor: nothing to compare here
        for axis in _asked_axes(dims, axes):
            if axis < val.dim() and isinstance(val.shape[axis], int):
                static.append(f"`{key}` dim {axis}")
    return static
