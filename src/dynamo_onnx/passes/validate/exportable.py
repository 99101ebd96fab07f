"""``torch.onnx.ExportableModule``: a module that carries its own example arguments, input
and output names and dynamic shapes, so ``export(module)`` needs nothing else.

The contract is torch.onnx's (torch 2.13, ``torch.onnx.export``): when the caller gives
neither ``args`` nor ``kwargs``, the example arguments come from
``module.example_arguments()`` (a tuple of positional inputs and a dict of keyword inputs or
None), and each of ``input_names``, ``output_names`` and ``dynamic_shapes`` the caller left
out from the module's method of that name. When the caller gives example inputs, the
module is an ordinary ``nn.Module`` and nothing is read from it. A torch without
``ExportableModule`` (before 2.13) has no such module to read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidExportOptionsError
from dynamo_onnx.passes.base import ExportRequest

__all__ = ["exportable_module_class", "with_module_arguments"]


def exportable_module_class() -> type | None:
    """``torch.onnx.ExportableModule``, or None in a torch that has none."""
    return getattr(torch.onnx, "ExportableModule", None)


def with_module_arguments(ctx: DiagnosticContext, request: ExportRequest) -> ExportRequest:
    """``request`` with what an ``ExportableModule`` says about itself filled in, where the
    caller gave no example inputs; ``request`` itself otherwise."""
    kind = exportable_module_class()
    if kind is None or not isinstance(request.model, kind):
        return request
    no_args = isinstance(request.args, (tuple, list)) and not request.args
    if not no_args or request.kwargs:
        return request  # the caller's inputs win, as in torch.onnx.export
    model = request.model
    example = model.example_arguments()
    if not (isinstance(example, tuple) and len(example) == 2):
        ctx.fail(
            "invalid-arguments",
            InvalidExportOptionsError,
            problem=f"`{type(model).__name__}.example_arguments()` must return (args, kwargs), "
            f"a tuple of positional inputs and a dict of keyword inputs or None, got "
            f"{type(example).__name__}",
        )
    args, kwargs = example
    return dataclasses.replace(
        request,
        args=args,
        kwargs=kwargs if kwargs is not None else {},
        input_names=_own(request.input_names, model.input_names),
        output_names=_own(request.output_names, model.output_names),
        dynamic_shapes=_own(request.dynamic_shapes, model.dynamic_shapes),
    )


def _own(given: Any, method: Any) -> Any:
    """The caller's value when given, else the module's (its method's result)."""
    return given if given is not None else method()
