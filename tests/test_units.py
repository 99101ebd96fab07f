"""Units without a full export: dispatch on hand-built FX nodes, translation of a three-node
FX graph, and each onnx_ir pass of ours on a tiny model."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import onnxruntime as ort
import torch
import torch.fx

import dynamo_onnx
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.passes.base import CheckedRequest, ExportRequest, ExportState
from dynamo_onnx.passes.onnx_graph.finalize import AddOpsetImportsStep, FinalizePass, RenameDimsStep
from dynamo_onnx.passes.translate.builder import GraphBuilder
from dynamo_onnx.passes.translate.interpreter import Translator
from dynamo_onnx.passes.translate.problems import OperatorTally
from dynamo_onnx.registry.dispatch import dispatch

aten = torch.ops.aten


def _graph(*calls):
    """An FX graph: placeholder x [2, 3] float, then ``calls`` as (target, arg names), output
    the last. Each node's ``meta["val"]`` is computed eagerly, as torch.export would."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.randn(2, 3)
    nodes = {"x": x}
    last = x
    for name, target, args in calls:
        fx_args = tuple(nodes[a] if isinstance(a, str) else a for a in args)
        last = graph.call_function(target, fx_args)
        last.name = name
        last.meta["val"] = target(
            *[a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in fx_args]
        )
        nodes[name] = last
    graph.output(last)
    return graph, nodes


def test_dispatch_picks_torch_libs_function_for_a_hand_built_node():
    _, nodes = _graph(("relu", aten.relu.default, ("x",)))
    chosen = dispatch(nodes["relu"], dynamo_onnx.OnnxRegistry())
    assert chosen.op == "aten::relu"
    assert chosen.function is not None and chosen.function.name == "aten_relu"
    assert chosen.reason.startswith("perfect match")


def test_dispatch_says_why_when_no_function_exists():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.randn(3)
    node = graph.call_function(aten.special_bessel_j0.default, (x,))
    node.meta["val"] = torch.randn(3)
    chosen = dispatch(node, dynamo_onnx.OnnxRegistry())
    assert chosen.function is None
    assert chosen.reason == "no ONNX function is registered for this operator"


def test_dispatch_prefers_the_opset_20_gelu_only_at_opset_20():
    _, nodes = _graph(("gelu", aten.gelu.default, ("x",)))
    registry = dynamo_onnx.OnnxRegistry()
    assert "opset 20" in dispatch(nodes["gelu"], registry, 20).reason
    assert dispatch(nodes["gelu"], registry, 18).function.name == "aten_gelu"


def test_translation_of_a_three_node_graph_runs_in_onnx_runtime():
    graph, _ = _graph(
        ("relu", aten.relu.default, ("x",)),
        ("added", aten.add.Tensor, ("relu", "x")),
    )
    model = ir.Model(ir.Graph([], [], nodes=[], name="g"), ir_version=10)
    builder = GraphBuilder(model, model.graph)
    ctx = DiagnosticContext()
    tally = OperatorTally()
    Translator(ctx, dynamo_onnx.OnnxRegistry(), builder, opset=18, tally=tally).run(graph)
    model.graph.inputs.append(builder.value("x"))
    builder.set_outputs([builder.value("added")])
    model.opset_imports[""] = 18
    assert [n.op_type for n in model.graph] == ["Relu", "Add"]
    assert tally.coverage() == (2, 2)
    assert [f.rule.name for f in ctx.findings] == ["node-dispatched", "node-dispatched"]
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString())
    x = torch.randn(2, 3)
    (out,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), torch.relu(x) + x)


def test_translation_collects_unsupported_nodes_with_stand_ins():
    graph, _ = _graph(
        ("bessel", aten.special_bessel_j0.default, ("x",)),
        ("relu", aten.relu.default, ("bessel",)),
    )
    model = ir.Model(ir.Graph([], [], nodes=[], name="g"), ir_version=10)
    builder = GraphBuilder(model, model.graph)
    ctx = DiagnosticContext()
    tally = OperatorTally()
    Translator(ctx, dynamo_onnx.OnnxRegistry(), builder, opset=18, tally=tally).run(graph)
    assert [(f.kind, f.op, f.finding.rule.id) for f in tally.failures] == [
        ("unsupported", "aten::special_bessel_j0", "DO301")
    ]
    assert tally.coverage() == (1, 2)  # relu still translated, on the stand-in
    assert [n.op_type for n in model.graph] == ["Relu"]


def _tiny_model(dims):
    x = ir.Value(name="x", shape=ir.Shape(dims), type=ir.TensorType(ir.DataType.FLOAT))
    node = ir.node("Relu", [x], num_outputs=1)
    node.outputs[0].name = "y"
    node.outputs[0].shape = ir.Shape(dims)
    node.outputs[0].dtype = ir.DataType.FLOAT
    graph = ir.Graph([x], [node.outputs[0]], nodes=[node], name="g")
    return ir.Model(graph, ir_version=10)


def test_rename_dims_pass_renames_symbols_also_in_expressions():
    model = _tiny_model(["s17", "s17*2"])
    result = RenameDimsStep({"s17": "batch"})(model)
    assert result.modified
    assert [str(d) for d in model.graph.inputs[0].shape] == ["batch", "batch*2"]
    assert not RenameDimsStep({"s99": "other"})(model).modified


def test_add_opset_imports_pass_imports_every_domain_used():
    model = _tiny_model([2])
    model.graph.append(ir.Node("pkg.custom", "Thing", [model.graph.outputs[0]], num_outputs=1))
    result = AddOpsetImportsStep(20)(model)
    assert result.modified
    assert model.opset_imports == {"": 20, "pkg.custom": 1}


def test_finalize_gives_an_input_used_as_output_its_own_node():
    x = ir.Value(name="x", shape=ir.Shape([2]), type=ir.TensorType(ir.DataType.FLOAT))
    model = ir.Model(ir.Graph([x], [x], nodes=[], name="g"), ir_version=10)
    registry = dynamo_onnx.OnnxRegistry()
    checked = CheckedRequest(model=None, registry=registry)
    state = ExportState(ExportRequest(model=None), checked=checked, onnx_model=model)
    FinalizePass()(DiagnosticContext(), state)
    assert [n.op_type for n in model.graph] == ["Identity"]
    assert model.graph.outputs[0] is not model.graph.inputs[0]
    onnx.checker.check_model(ir.to_proto(model), full_check=True)


def test_a_decorated_forwards_code_is_found_where_the_function_is_written():
    """transformers wraps many ``forward``s in a decorator (``deprecate_kwarg``): the file
    was the decorator's (transformers/utils/deprecation.py) with the function's line number,
    a place that points nowhere. Both now come from the function."""
    import inspect

    import transformers

    from dynamo_onnx.passes.model import code_location, return_location

    config = transformers.MistralConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, vocab_size=50
    )
    model = transformers.MistralForCausalLM(config)
    forward = inspect.unwrap(transformers.MistralForCausalLM.forward)
    assert forward is not transformers.MistralForCausalLM.forward  # (still decorated)
    where = code_location(model)
    assert where is not None and where.path == inspect.getsourcefile(forward)
    assert where.line == inspect.getsourcelines(forward)[1]
    returned = return_location(model)
    assert returned is not None and returned.path == where.path and returned.line > where.line


def _save_events(total_bytes: int) -> list:
    from dynamo_onnx.diagnostics.context import ProgressEvent

    events = [ProgressEvent("start", "save")]
    for done in range(1, 5):
        events.append(
            ProgressEvent(
                "progress",
                "save",
                done=done,
                total=4,
                unit="tensors",
                done_bytes=done * total_bytes // 4,
                total_bytes=total_bytes,
            )
        )
    return [*events, ProgressEvent("end", "save", 1.5, "ok")]


def test_the_save_progress_is_a_bar_on_a_terminal_and_plain_lines_in_a_log():
    """Issue 44: a bar over the tensors and bytes written, rewritten in place on a
    terminal; into a file or CI log a plain line at each tenth, no control characters."""
    import io

    from dynamo_onnx.reports.terminal import ProgressPrinter

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log = io.StringIO()
    printer = ProgressPrinter(log)
    for event in _save_events(4_000_000_000):
        printer(event)
    assert log.getvalue().splitlines() == [
        "  save: 20% (1/4 tensors, 1.00/4.00 GB)",
        "  save: 50% (2/4 tensors, 2.00/4.00 GB)",
        "  save: 70% (3/4 tensors, 3.00/4.00 GB)",
        "  save: 100% (4/4 tensors, 4.00/4.00 GB)",
        "  save: done in 1.50 s",
    ]
    assert "\r" not in log.getvalue() and "\033" not in log.getvalue()
    terminal = Terminal()
    printer = ProgressPrinter(terminal)
    for event in _save_events(8_000_000):
        printer(event)
    text = terminal.getvalue()
    assert f"\r  save [{'#' * 15}{'.' * 15}] 2/4 tensors, 4.00/8.00 MB\033[K" in text
    assert text.endswith("\r  save: done in 1.50 s\033[K\n")
