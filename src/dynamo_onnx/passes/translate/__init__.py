"""The translate pass: the decomposed ExportedProgram becomes an ``onnx_ir`` model.

The FX graph is run through the :class:`~dynamo_onnx.passes.translate.interpreter.Translator`,
then the program's signature says which values are the graph's inputs, weights and outputs.
Translation is collect-all: an export that meets three unsupported operators reports all
three, with a coverage figure, and fails once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import onnx_ir as ir
import torch
from torch.export import graph_signature as gs

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.diagnostics.findings import Location
from dynamo_onnx.errors import OnnxExporterError, TranslationError
from dynamo_onnx.io.inputs import leaf_paths
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.passes.domains import custom_domain_nodes
from dynamo_onnx.passes.fx import is_none_output, none_outputs
from dynamo_onnx.passes.logs import ONNX_IR_CHATTER, dropped
from dynamo_onnx.passes.metadata import FX_NODE_NAME, STACK_TRACE, stack_frames
from dynamo_onnx.passes.model import return_location
from dynamo_onnx.passes.translate import problems
from dynamo_onnx.passes.translate.builder import GraphBuilder
from dynamo_onnx.passes.translate.dtypes import check_dtypes
from dynamo_onnx.passes.translate.fallback import Lower
from dynamo_onnx.passes.translate.interpreter import Translator
from dynamo_onnx.passes.translate.problems import OperatorTally
from dynamo_onnx.versions import package_version

__all__ = ["Decompose", "TranslatePass"]

#: ``lower(ep, registry, also, opset=...) -> (program, views, casts)`` of the decompose pass.
Decompose = Callable[..., tuple[Any, int, int]]


class TranslatePass:
    """ExportedProgram (ATen) -> ``onnx_ir.Model``, reporting every node it cannot translate.

    Args:
        decompose: the decompose pass's ``lower(ep, registry, also)``; enables the per-node
            fallback (a node whose operator has no working ONNX function but a torch
            decomposition is decomposed alone).
    """

    name: ClassVar[str] = PassName.TRANSLATION
    error_type: ClassVar[type[OnnxExporterError]] = TranslationError
    changes_input: ClassVar[bool] = False

    def __init__(self, decompose: Decompose | None = None) -> None:
        self.decompose = decompose

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        with dropped(
            *ONNX_IR_CHATTER
        ):  # onnx_ir's remarks on how torch_lib calls it are not the user's
            return self._run(ctx, state)

    def _run(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        ep = state.exported_program
        registry = state.checked.registry
        assert ep is not None and registry is not None
        check_dtypes(ctx, ep, state.checked.model_location)
        opset = state.checked.opset
        graph = ir.Graph([], [], nodes=[], name="main_graph")
        model = ir.Model(
            graph, ir_version=10, producer_name="dynamo-onnx", producer_version=package_version()
        )
        builder = GraphBuilder(model, graph)
        tally = OperatorTally()
        lower: Lower | None = None
        if self.decompose is not None:
            decompose = self.decompose

            def lower(program: torch.export.ExportedProgram, ops: Sequence[Any]) -> Any:
                return decompose(program, registry, ops, opset=opset)[0]

        translator = Translator(
            ctx, registry, builder, opset=opset, tally=tally, lower=lower, module=ep.graph_module
        )
        translator.run(ep.graph)
        ctx.summary.operators = tally.uses()
        translated, total = tally.coverage()
        if total:
            ctx.record("operator-coverage", translated=translated, total=total)
        problems.raise_for_failures(ctx, tally)
        _bind_signature(ctx, ep, builder)
        _report_none_outputs(ctx, ep, return_location(state.checked.model))
        _report_custom_domains(ctx, model)
        return state.replace(onnx_model=model)


def _report_custom_domains(ctx: DiagnosticContext, model: ir.Model) -> None:
    """One DO310 note per custom-domain operator in the model (``torch.onnx.ops.symbolic``'s
    nodes), at the user's line that asked for the first one, the others related."""
    by_operator: dict[tuple[str, str], list[ir.Node]] = {}
    for node in custom_domain_nodes(model):
        by_operator.setdefault((node.domain, node.op_type), []).append(node)
    for (domain, op_type), nodes in by_operator.items():
        lines = [
            ctx.user_frame(stack_frames(ctx, n.metadata_props.get(STACK_TRACE, ""))) for n in nodes
        ]
        first = lines[0]
        ctx.record(
            "custom-domain-node",
            locations=[first],
            related=[line for line in lines[1:] if line is not None],
            operator=f"{domain}::{op_type}",
            domain=domain,
            version=nodes[0].version if nodes[0].version is not None else 1,
            count=len(nodes),
            source=ctx.display(first) if first is not None else "an unknown line",
        )


def _bind_signature(
    ctx: DiagnosticContext, ep: torch.export.ExportedProgram, builder: GraphBuilder
) -> None:
    """Inputs, initializers and outputs from the ExportedProgram's graph signature."""
    graph = builder.graph
    state = {**ep.state_dict, **ep.constants}
    for spec in ep.graph_signature.input_specs:
        if isinstance(spec.arg, gs.ConstantArgument) or not hasattr(spec.arg, "name"):
            continue
        value = builder.value(spec.arg.name)
        if spec.kind == gs.InputKind.USER_INPUT:
            graph.inputs.append(value)
            continue
        tensor = state.get(spec.target) if spec.target is not None else None
        if tensor is None:
            ctx.fail(
                "translation-failed",
                TranslationError,
                cause=f"the program has no tensor for its {spec.kind.name} {spec.target!r}",
            )
        if isinstance(tensor, torch.nn.Parameter):
            tensor = tensor.data
        builder.add_initializer(spec.target, tensor, value)
        value.metadata_props[FX_NODE_NAME] = spec.arg.name
    outputs = [
        builder.value(spec.arg.name)
        for spec in ep.graph_signature.output_specs
        if spec.kind == gs.OutputKind.USER_OUTPUT
        and hasattr(spec.arg, "name")
        and not is_none_output(spec)
    ]
    builder.set_outputs(outputs)


def _report_none_outputs(
    ctx: DiagnosticContext, ep: torch.export.ExportedProgram, return_line: Location | None
) -> None:
    """DO311 when the model returns None somewhere: those outputs are not in the ONNX model."""
    dropped_at = none_outputs(ep)
    if not dropped_at:
        return
    spec = ep.call_spec.out_spec
    paths = list(leaf_paths(spec)) if spec is not None else []
    named = [
        "output" + "".join(f"[{p!r}]" if not p.isdigit() else f"[{p}]" for p in paths[i])
        if i < len(paths) and paths[i]
        else f"output {i}"
        for i in dropped_at
    ]
    kept = len(paths) - len(dropped_at) if paths else 0
    ctx.record(
        "none-output-dropped",
        locations=[return_line],
        properties={"positions": dropped_at},
        positions=", ".join(named),
        source=ctx.display(return_line) if return_line is not None else "the model's return",
        count=kept,
    )
