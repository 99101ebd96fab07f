"""What capture does to a program once it has one: a program the caller passed in is
copied before anything rewrites it, a region's call is given the user's line, and every
output is checked to be a tensor."""

from __future__ import annotations

import copy

import torch
from torch.export import graph_signature as gs

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import CaptureError
from dynamo_onnx.passes.fx import is_none_output
from dynamo_onnx.passes.model import describe_value

__all__ = ["check_outputs", "copy_program", "lines_for_regions"]


def copy_program(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A program whose graph can be rewritten without touching ``ep`` (weights shared)."""
    gm = copy.deepcopy(ep.graph_module)
    _keep_names(gm, ep.graph_module)
    return torch.export.ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=copy.deepcopy(ep.graph_signature),
        state_dict=ep.state_dict,
        range_constraints=ep.range_constraints,
        module_call_graph=copy.deepcopy(ep.module_call_graph),
        example_inputs=ep.example_inputs,
        constants=ep.constants,
        verifiers=ep.verifiers,
    )


def _keep_names(copied: torch.fx.GraphModule, original: torch.fx.GraphModule) -> None:
    """Give the copy's nodes the original's names, in every graph of the module.

    Copying a graph renames a node named like a Python builtin (``input``, the parameter
    of every ``torch.nn`` module's ``forward``, becomes ``input_1``), while the copied
    signature keeps the original names: the program would no longer match its signature.
    torch.export names its nodes directly (``node.name = node.target = ...``) and so
    does this; the names were valid and unique in the original graph.
    """
    originals = dict(original.named_modules())
    for path, module in copied.named_modules():
        source = originals.get(path)
        if not isinstance(module, torch.fx.GraphModule) or not isinstance(
            source, torch.fx.GraphModule
        ):
            continue
        renamed = False
        for node, before in zip(module.graph.nodes, source.graph.nodes):
            if node.name != before.name:
                node.name = before.name
                renamed = True
            if node.op == "placeholder" and node.target != before.target:
                node.target = before.target
                renamed = True
        if renamed:
            module.recompile()


#: The higher-order operators torch.export records a ``with`` block as (``torch.autocast``,
#: ``torch.no_grad``/``set_grad_enabled``): their names start so. (``torch.cond`` and the
#: loops are not regions: translation places them by their operands, ``control_flow_source``.)
_REGION_PREFIX = "wrap_with_"


def lines_for_regions(program: torch.export.ExportedProgram) -> None:
    """Give each call of a region's subgraph (``torch.autocast``'s, ``torch.no_grad``'s) the
    user's line of the first operator inside it, where torch gives it none.

    torch.export records a ``with torch.autocast(...)`` block as one call of a
    higher-order operator on a subgraph; the operators inside carry the user's line, the
    call does not. Decomposition inlines the subgraph by tracing it again, and the nodes
    it makes take the line of the call they came from: without this, every one of them
    (and a finding about it, DO409) would be "at an unknown line". All of a region's
    operators then point at its first line: nearer than none, and the region's own.
    """
    for graph_module in program.graph_module.modules():
        if not isinstance(graph_module, torch.fx.GraphModule):
            continue
        for node in graph_module.graph.nodes:
            if node.op != "call_function" or node.meta.get("stack_trace"):
                continue
            if not getattr(node.target, "__name__", "").startswith(_REGION_PREFIX):
                continue
            for arg in node.args:
                if not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
                    continue
                body = getattr(graph_module, str(arg.target), None)
                if isinstance(body, torch.fx.GraphModule):
                    inner = _first_line(body)
                    if inner is not None:
                        node.meta["stack_trace"] = inner
                        break


def _first_line(graph_module: torch.fx.GraphModule) -> str | None:
    """The stack trace of the first node of ``graph_module`` (or of a subgraph of it) that
    has one."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                trace = node.meta.get("stack_trace")
                if trace:
                    return str(trace)
    return None


def check_outputs(
    ctx: DiagnosticContext, ep: torch.export.ExportedProgram, model_location: Location | None
) -> None:
    """Every user output of the captured program is a tensor (or a symbolic integer); a
    ``None`` is dropped from the ONNX outputs by translation (DO311), as torch.onnx does."""
    user = [s for s in ep.graph_signature.output_specs if s.kind == gs.OutputKind.USER_OUTPUT]
    for index, spec in enumerate(user):
        if isinstance(spec.arg, gs.ConstantArgument) and not is_none_output(spec):
            ctx.fail(
                "non-tensor-output",
                CaptureError,
                model_location,
                index=index,
                what=describe_value(spec.arg.value),
            )
