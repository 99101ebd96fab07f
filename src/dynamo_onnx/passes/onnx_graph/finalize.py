"""The finalize pass: the translated model made valid and readable.

onnx_ir passes where onnx_ir has them: unused nodes removed (constants a function did not
use), graph inputs used as outputs and repeated outputs given an ``Identity``
(``OutputFixPass``), unique names (``NameFixPass``, then ``ModelWideNamesStep``: unique
across subgraphs too); and two of our own, each an onnx_ir
pass too: torch's dimension symbols renamed to the user's names, and the opset imports of
every domain the nodes and functions use. Each step's ``PassResult.modified`` is recorded
in the pass record (``steps.run_steps``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import onnx
import onnx_ir as ir
from torch.export import graph_signature as gs

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidOptionValueError, OnnxExporterError, SerializationError
from dynamo_onnx.foreign_text import symbol_renamer
from dynamo_onnx.integrations import families
from dynamo_onnx.io.inputs import leaf_paths
from dynamo_onnx.onnx_tools.names import ModelWideNamesStep
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.fx import none_outputs
from dynamo_onnx.passes.onnx_graph.steps import run_steps

__all__ = [
    "AddOpsetImportsStep",
    "FinalizePass",
    "RenameDimsStep",
    "RenameIOStep",
    "UntypedIdentityStep",
]


class RenameDimsStep(ir.passes.InPlacePass):
    """Replace torch's symbols in symbolic dims (``s17``), also inside expressions
    (``s17*2``), with the names the user gave (or ``<input>_dim_<i>``)."""

    def __init__(self, names: Mapping[str, str]) -> None:
        super().__init__()
        self.names = dict(names)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not self.names:
            return ir.passes.PassResult(model, modified=False)
        rename = symbol_renamer(self.names)
        values = [*model.graph.inputs, *model.graph.outputs]
        values += [
            v for node in ir.traversal.RecursiveGraphIterator(model.graph) for v in node.outputs
        ]
        modified = False
        for value in values:
            if value.shape is None:
                continue
            dims = [
                rename(d.value) if isinstance(d, ir.SymbolicDim) and isinstance(d.value, str) else d
                for d in value.shape
            ]
            shape = ir.Shape(dims)
            if shape != value.shape:
                value.shape = shape
                modified = True
        return ir.passes.PassResult(model, modified=modified)


class AddOpsetImportsStep(ir.passes.InPlacePass):
    """Import the default opset at ``opset_version`` and every domain nodes and functions use;
    ``custom_opsets`` (torch.onnx.export's argument) sets the version of custom domains."""

    def __init__(self, opset_version: int, custom_opsets: Mapping[str, int] | None = None) -> None:
        super().__init__()
        self.opset_version = opset_version
        self.custom_opsets = dict(custom_opsets or {})

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        imports = model.opset_imports
        before = dict(imports)
        imports[""] = self.opset_version
        for domain, version in self.custom_opsets.items():
            if domain not in ("", "ai.onnx"):
                imports[domain] = version
        for function in model.functions.values():
            for domain, version in function.opset_imports.items():
                imports.setdefault(domain, version)
            imports.setdefault(function.domain, 1)
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            imports.setdefault(node.domain, node.version or 1)
        return ir.passes.PassResult(model, modified=dict(imports) != before)


class UntypedIdentityStep(ir.passes.InPlacePass):
    """Undo ``OutputFixPass``'s ``Identity`` for a weight returned as an output when the
    opset's ``Identity`` cannot take its type (float4 before opset 23, float8e8m0 before
    24): ONNX lets an initializer be a graph output directly, an invalid node it does not."""

    def __init__(self, opset_version: int) -> None:
        super().__init__()
        schema = onnx.defs.get_schema("Identity", opset_version)
        self.allowed = {t for c in schema.type_constraints for t in c.allowed_type_strs}

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = False
        for node in list(graph):
            if node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
                continue
            (source,) = node.inputs
            (output,) = node.outputs
            if source is None or not source.is_initializer() or not output.is_graph_output():
                continue
            if source.type is None or f"tensor({source.dtype.name.lower()})" in self.allowed:  # type: ignore[union-attr]
                continue
            if source in graph.outputs:
                continue  # the same weight returned twice: one of them keeps the node
            graph.outputs[graph.outputs.index(output)] = source
            graph.remove(node, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified=modified)


class RenameIOStep(ir.passes.InPlacePass):
    """Name the graph's inputs and outputs as ``input_names``/``output_names`` say, in order
    (torch.onnx.export's arguments); unnamed ones keep their names."""

    def __init__(
        self, input_names: Sequence[str] | None, output_names: Sequence[str] | None
    ) -> None:
        super().__init__()
        self.input_names = list(input_names or [])
        self.output_names = list(output_names or [])

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for values, names in (
            (model.graph.inputs, self.input_names),
            (model.graph.outputs, self.output_names),
        ):
            for value, name in zip(values, names):
                if value.name != name:
                    value.name = name
                    modified = True
        return ir.passes.PassResult(model, modified=modified)


def _registered_family_inputs(state: ExportState, model: ir.Model) -> list[str] | None:
    """For a program the caller captured with a model family's values registered as pytree
    nodes, the graph inputs' names with those values' tensors named as their family names
    them (torch names them after the path to them); None for any other program."""
    ep = state.exported_program
    if state.checked.family_inputs is not None or ep is None or ep.call_spec.in_spec is None:
        return None
    user = [s for s in ep.graph_signature.input_specs if s.kind == gs.InputKind.USER_INPUT]
    paths = list(leaf_paths(ep.call_spec.in_spec))
    if len(paths) != len(user):
        return None
    tensors = [p for p, s in zip(paths, user) if isinstance(s.arg, gs.TensorArgument)]
    if len(tensors) != len(model.graph.inputs):
        return None
    for family in families():
        names = family.input_names(tensors)
        if names is not None:
            return [name or str(v.name) for name, v in zip(names, model.graph.inputs)]
    return None


def _registered_family_outputs(paths: Sequence[tuple[str, ...]]) -> list[str] | None:
    """The outputs' names, by their paths, of the first family that names them."""
    for family in families():
        names = family.output_names(paths)
        if names is not None:
            return names
    return None


def _output_keys(state: ExportState, family_among_inputs: bool) -> Sequence[str] | None:
    """With a model family's values among the inputs, the outputs are named by the keys
    of the dict the flat forward returned (as its family names them), as torch.export
    recorded them."""
    ep = state.exported_program
    if ep is None or ep.call_spec.out_spec is None:
        return None
    spec = ep.call_spec.out_spec
    if state.checked.family_inputs is None:  # a program captured with the values registered
        return _registered_family_outputs(list(leaf_paths(spec))) if family_among_inputs else None
    if spec.type is not dict:
        return None
    if not all(spec.child(i).is_leaf() for i in range(spec.num_children)):
        return None
    return tuple(str(key) for key in spec.context)


class FinalizePass:
    """Make the translated model valid: outputs, names, dims and opset imports."""

    name: ClassVar[str] = PassName.FINALIZE
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = True

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        model, registry, request = state.onnx_model, state.checked.registry, state.checked
        assert model is not None and registry is not None
        # A None the model returns has no ONNX output (DO311); as with torch.onnx, a name
        # given for it is not an error: the names go to the outputs there are, in order.
        dropped = len(none_outputs(state.exported_program)) if state.exported_program else 0
        for option, names, values, spare in (
            ("input_names", request.input_names, model.graph.inputs, 0),
            ("output_names", request.output_names, model.graph.outputs, dropped),
        ):
            if names is not None and len(names) > len(values) + spare:
                ctx.fail(
                    "invalid-option",
                    InvalidOptionValueError,
                    option=option,
                    problem=f"has {len(names)} names for {len(values)} graph "
                    f"{option.split('_')[0]}s",
                    allowed=f"it takes at most one name per graph {option.split('_')[0]}, in order",
                )
        registered = _registered_family_inputs(state, model)
        steps = [
            ir.passes.common.RemoveUnusedNodesPass(),
            ir.passes.common.OutputFixPass(),
            UntypedIdentityStep(registry.opset_version),
            RenameDimsStep(state.dim_names),
            RenameIOStep(
                request.input_names or registered,
                request.output_names or _output_keys(state, registered is not None),
            ),
            AddOpsetImportsStep(registry.opset_version, request.custom_opsets),
            ir.passes.common.NameFixPass(),
            ModelWideNamesStep(),
        ]
        run_steps(ctx, model, steps)  # in place: each step's ``modified`` in the pass record
        return state
