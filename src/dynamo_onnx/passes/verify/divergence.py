"""``verify(find_divergence=True)``: the first FX node whose ONNX value differs from eager's,
found by running the graph eagerly node by node and exposing every node's ONNX value as an
output of a probe model (DO603 at the node's source line)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch
import torch.fx
from torch.export import graph_signature as gs

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.io.inputs import onnx_input_tensors, user_input_leaves
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.passes.verify.comparison import compare
from dynamo_onnx.registry import target_name

if TYPE_CHECKING:
    from dynamo_onnx.passes.verify.request import VerifyRequest


class _Recorder(torch.fx.Interpreter):
    """Runs the FX graph eagerly and keeps every node's value."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.values: dict[str, Any] = {}

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        # Symbolic sizes are plain numbers when run eagerly; the graph may cast one
        # (type promotion of ``x * x.shape[1]``), which prims takes only for tensors.
        if target is torch.ops.prims.convert_element_type.default and isinstance(
            args[0], (int, float, bool)
        ):
            dtype = args[1]
            if dtype.is_floating_point:
                return float(args[0])
            return bool(args[0]) if dtype == torch.bool else int(args[0])
        return super().call_function(target, args, kwargs)

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.values[n.name] = result
        return result


def _graph_inputs(ep: torch.export.ExportedProgram, user_inputs: list[Any]) -> list[Any]:
    """The flat inputs of the program's graph: weights where the signature says, user inputs."""
    state = {**ep.state_dict, **ep.constants}
    supply = iter(user_inputs)
    flat = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == gs.InputKind.USER_INPUT:
            flat.append(next(supply))
        else:
            flat.append(state[spec.target])
    return flat


def first_divergence(
    ctx: DiagnosticContext, request: VerifyRequest, kwargs: Mapping[str, Any]
) -> None:
    """Record DO602 at the first node of the program whose ONNX value is out of the
    request's tolerances, if one is."""
    ep, args, atol, rtol = request.exported_program, request.args, request.atol, request.rtol
    if ep is None:
        return
    leaves = user_input_leaves(ep, args, kwargs)
    recorder = _Recorder(ep.graph_module)
    with torch.no_grad():
        recorder.run(*_graph_inputs(ep, leaves))
    # Expose the ONNX value of every FX node that kept its name.
    probe = ir.from_proto(ir.to_proto(request.model))
    by_name = {v.name: v for node in probe.graph for v in node.outputs if v.name}
    nodes = [
        n
        for n in ep.graph.nodes
        if n.op == "call_function"
        and n.name in by_name
        and isinstance(recorder.values.get(n.name), torch.Tensor)
    ]
    for n in nodes:
        value = by_name[n.name]
        if not value.is_graph_output():
            probe.graph.outputs.append(value)
    session = inference_session(ir.to_proto(probe).SerializeToString())
    feed_names = [i.name for i in session.get_inputs()]
    feed = {
        name: t.detach().cpu().numpy()
        for name, t in zip(feed_names, onnx_input_tensors(ep, args, kwargs))
    }
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    for n in nodes:
        got = torch.from_numpy(outputs[n.name])
        result = compare(0, n.name, got, recorder.values[n.name], atol, rtol)
        if result.ok:
            continue
        frames = parse_stack_trace(n.meta.get("stack_trace") or "")
        primary = ctx.user_frame(frames)
        ctx.record(
            "first-divergence",
            locations=[primary],
            stack=frames,
            fx_node=n.name,
            op=target_name(n.target),
            source=ctx.display(primary),
            max_abs=result.max_abs,
        )
        return
