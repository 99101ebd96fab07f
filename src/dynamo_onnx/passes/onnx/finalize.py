"""The finalize pass: the translated model made valid and readable.

onnx_ir passes where onnx_ir has them: unused nodes removed (constants a function did not
use), graph inputs used as outputs and repeated outputs given an ``Identity``
(``OutputFixPass``), unique names (``NameFixPass``); and two of our own, each an onnx_ir
pass too: torch's dimension symbols renamed to the user's names, and the opset imports of
every domain the nodes and functions use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

import onnx_ir as ir

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError, SerializationError
from dynamo_onnx.passes.base import ExportState, PassName

__all__ = ["AddOpsetImportsPass", "FinalizePass", "RenameDimsPass"]


class RenameDimsPass(ir.passes.InPlacePass):
    """Replace torch's symbols in symbolic dims (``s17``), also inside expressions
    (``s17*2``), with the names the user gave (or ``<input>_dim_<i>``)."""

    def __init__(self, names: Mapping[str, str]) -> None:
        super().__init__()
        self.names = dict(names)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not self.names:
            return ir.passes.PassResult(model, modified=False)
        names = self.names
        pattern = re.compile(
            r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b"
        )
        values = [*model.graph.inputs, *model.graph.outputs]
        values += [
            v for node in ir.traversal.RecursiveGraphIterator(model.graph) for v in node.outputs
        ]
        modified = False
        for value in values:
            if value.shape is None:
                continue
            dims = [
                pattern.sub(lambda m: names[m.group(1)], d.value)
                if isinstance(d, ir.SymbolicDim) and isinstance(d.value, str)
                else d
                for d in value.shape
            ]
            shape = ir.Shape(dims)
            if shape != value.shape:
                value.shape = shape
                modified = True
        return ir.passes.PassResult(model, modified=modified)


class AddOpsetImportsPass(ir.passes.InPlacePass):
    """Import the default opset at ``opset_version`` and every domain nodes and functions use."""

    def __init__(self, opset_version: int) -> None:
        super().__init__()
        self.opset_version = opset_version

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        imports = model.opset_imports
        before = dict(imports)
        imports[""] = self.opset_version
        for function in model.functions.values():
            for domain, version in function.opset_imports.items():
                imports.setdefault(domain, version)
            imports.setdefault(function.domain, 1)
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            imports.setdefault(node.domain, node.version or 1)
        return ir.passes.PassResult(model, modified=dict(imports) != before)


class FinalizePass:
    """Make the translated model valid: outputs, names, dims and opset imports."""

    name: ClassVar[str] = PassName.FINALIZE
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model, registry = state.onnx_model, state.registry
        assert model is not None and registry is not None
        passes = ir.passes.Sequential(
            ir.passes.common.RemoveUnusedNodesPass(),
            ir.passes.common.OutputFixPass(),
            RenameDimsPass(state.dim_names),
            AddOpsetImportsPass(registry.opset_version),
            ir.passes.common.NameFixPass(),
        )
        passes(model)
        return state
