"""``torch.onnx.ops`` becomes the ONNX nodes it names: ``symbolic``/``symbolic_multi_out``
as one node of its domain (imported at its version), ``rotary_embedding``/``attention`` as
ONNX's ``RotaryEmbedding``/``Attention`` at opset 23 and their decomposition below; never
traced through (DO204)."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
import torch

import dynamo_onnx
from conftest import line_of
from dynamo_onnx.diagnostics import Level

X = torch.randn(3, 4)
BATCH = ({0: "batch"},)


class CustomThenAdd(torch.nn.Module):
    def forward(self, x):
        y = torch.onnx.ops.symbolic(  # the custom node
            "custom_domain::CustomOp",
            (x,),
            {"alpha": 2.0, "n": 3, "s": "hi", "ints": [1, 2], "floats": [0.5, 1.5], "ss": ["a"]},
            dtype=x.dtype,
            shape=x.shape,
            version=1,
            metadata_props={"note": "kept"},
        )
        return y + 1


class TwoOutputs(torch.nn.Module):
    def forward(self, x):
        a, b = torch.onnx.ops.symbolic_multi_out(
            "custom_domain::Two",
            (x, None),
            {"k": 1},
            dtypes=(x.dtype, torch.int64),
            shapes=(x.shape, [3]),
            version=2,
        )
        return a + 1, b


def _nodes(proto: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(n.domain, n.op_type) for n in proto.graph.node]


@pytest.mark.parametrize("optimize", [True, False])
def test_symbolic_is_one_node_of_its_domain_with_its_attributes(optimize):
    program = dynamo_onnx.export(CustomThenAdd(), (X,), dynamic_shapes=BATCH, optimize=optimize)
    proto = program.model_proto
    (custom,) = [n for n in proto.graph.node if n.domain == "custom_domain"]
    assert custom.op_type == "CustomOp"
    assert list(custom.input) == [proto.graph.input[0].name]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in custom.attribute}
    assert attrs["alpha"] == pytest.approx(2.0) and attrs["n"] == 3
    assert attrs["s"] == b"hi" and list(attrs["ints"]) == [1, 2]
    assert list(attrs["floats"]) == pytest.approx([0.5, 1.5]) and list(attrs["ss"]) == [b"a"]
    assert {(o.domain, o.version) for o in proto.opset_import} >= {("custom_domain", 1), ("", 20)}
    assert ("", "Add") in _nodes(proto)
    output = proto.graph.output[0].type.tensor_type
    assert output.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in output.shape.dim] == ["batch", 4]
    # the custom op's result feeds the Add: nothing was computed in its place
    (add,) = [n for n in proto.graph.node if n.op_type == "Add"]
    assert custom.output[0] in add.input
    assert {p.key: p.value for p in custom.metadata_props}.get("note") == "kept"
    onnx.checker.check_model(proto, full_check=True)


def test_symbolic_is_never_traced_through_and_says_where_it_came_from():
    program = dynamo_onnx.export(CustomThenAdd(), (X,))
    ids = [f.rule.id for f in program.diagnostics.findings]
    assert "DO204" not in ids and "DO205" not in ids
    (note,) = program.diagnostics.by_rule("custom-domain-node")
    assert note.level == Level.NOTE
    assert note.primary.line == line_of(CustomThenAdd.forward, "the custom node")
    assert "`custom_domain::CustomOp`" in note.message and "version 1" in note.message
    assert not [f for f in program.diagnostics.findings if f.level >= Level.WARNING]


def test_symbolic_multi_out_has_its_outputs_typed_as_declared():
    program = dynamo_onnx.dynamo_export(TwoOutputs(), X)
    proto = program.model_proto
    (two,) = [n for n in proto.graph.node if n.domain == "custom_domain"]
    assert two.op_type == "Two" and len(two.output) == 2
    assert list(two.input) == [proto.graph.input[0].name]  # the trailing None is left out
    assert ("custom_domain", 2) in {(o.domain, o.version) for o in proto.opset_import}
    second = proto.graph.output[1].type.tensor_type
    assert second.elem_type == onnx.TensorProto.INT64
    assert [d.dim_value for d in second.shape.dim] == [3]
    assert two.output[1] == proto.graph.output[1].name


def test_symbolic_without_version_imports_its_domain_at_1():
    class NoVersion(torch.nn.Module):
        def forward(self, x):
            return torch.onnx.ops.symbolic("my.domain::Op", (x,), dtype=torch.int32, shape=[2])

    proto = dynamo_onnx.export(NoVersion(), (X,)).model_proto
    assert ("my.domain", 1) in {(o.domain, o.version) for o in proto.opset_import}
    assert proto.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.INT32


class Rotary(torch.nn.Module):
    def forward(self, x, cos, sin, pos):
        return torch.onnx.ops.rotary_embedding(x, cos, sin, pos)


class Attends(torch.nn.Module):
    def forward(self, q, k, v):
        y, _, _, _ = torch.onnx.ops.attention(q, k, v, is_causal=True)
        return y


class GroupedAttends3d(torch.nn.Module):
    """[batch, seq, heads * size] inputs, 4 query heads sharing 2 key/value heads."""

    def forward(self, q, k, v):
        y, _, _, _ = torch.onnx.ops.attention(q, k, v, q_num_heads=4, kv_num_heads=2, scale=0.3)
        return y


def _rotary_inputs(seq: int):
    x = torch.randn(2, 4, seq, 8)
    pos = torch.arange(seq).expand(2, seq).contiguous()
    return x, torch.randn(16, 4), torch.randn(16, 4), pos


def _attention_inputs(seq: int):
    return tuple(torch.randn(2, 4, seq, 8) for _ in range(3))


def _grouped_inputs(seq: int):
    return torch.randn(2, seq, 32), torch.randn(2, seq, 16), torch.randn(2, seq, 16)


SEQ = {0: "batch", 2: "seq"}


@pytest.mark.parametrize(
    ("model", "inputs", "spec", "onnx_op", "decomposed_op"),
    [
        (
            Rotary(),
            _rotary_inputs,
            (SEQ, None, None, {0: "batch", 1: "seq"}),
            "RotaryEmbedding",
            "GatherND",
        ),
        (Attends(), _attention_inputs, (SEQ, SEQ, SEQ), "Attention", "Softmax"),
        (
            GroupedAttends3d(),
            _grouped_inputs,
            ({0: "batch", 1: "seq"},) * 3,
            "Attention",
            "Softmax",
        ),
    ],
)
@pytest.mark.parametrize("opset", [18, 20, 23, 25])
def test_standard_onnx_ops_are_their_node_at_23_and_decomposed_below(
    model, inputs, spec, onnx_op, decomposed_op, opset
):
    program = dynamo_onnx.export(model, inputs(5), dynamic_shapes=spec, opset_version=opset)
    proto = program.model_proto
    ops = {n.op_type for n in proto.graph.node}
    assert dict((o.domain, o.version) for o in proto.opset_import)[""] == opset
    if opset >= 23:
        assert ops == {onnx_op}
    else:
        assert onnx_op not in ops and decomposed_op in ops
    ids = [f.rule.id for f in program.diagnostics.findings]
    assert "DO204" not in ids and "DO310" not in ids
    for seq in (5, 7):
        args = inputs(seq)
        expected = model(*args)
        session = ort.InferenceSession(proto.SerializeToString())
        feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
        (actual,) = session.run(None, feeds)
        torch.testing.assert_close(torch.from_numpy(actual), expected, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(program(*args)[0], expected, atol=1e-5, rtol=1e-4)


def test_the_symbolic_op_behind_is_in_onnx_export_exports_the_onnx_branch():
    class Branches(torch.nn.Module):
        def forward(self, x):
            if torch.onnx.is_in_onnx_export():
                return torch.onnx.ops.symbolic(
                    "custom_domain::Fast", (x,), dtype=x.dtype, shape=x.shape, version=3
                )
            return torch.relu(x)

    proto = dynamo_onnx.export(Branches(), (X,)).model_proto
    assert _nodes(proto) == [("custom_domain", "Fast")]
    assert ("custom_domain", 3) in {(o.domain, o.version) for o in proto.opset_import}


class LinearThenCustom(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return torch.onnx.ops.symbolic("custom_domain::Op", (y,), dtype=y.dtype, shape=y.shape)


class Wraps(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = LinearThenCustom()

    def forward(self, x):
        return self.inner(x) + 1


def test_a_custom_node_inside_a_module_function_is_kept_and_the_export_succeeds():
    program = dynamo_onnx.export(Wraps().eval(), (X,), module_functions=True)
    proto = program.model_proto
    bodies = [n for f in proto.functions for n in f.node if n.domain == "custom_domain"]
    assert [n.op_type for n in bodies] == ["Op"]
    assert ("custom_domain", 1) in {(o.domain, o.version) for o in proto.opset_import}
    assert program.diagnostics.by_rule("custom-domain-node")


class RuntimeGelu(torch.nn.Module):
    def forward(self, x):
        if torch.onnx.is_in_onnx_export():  # a contrib operator ONNX Runtime has
            return torch.onnx.ops.symbolic(
                "com.microsoft::Gelu", (x,), dtype=x.dtype, shape=x.shape, version=1
            )
        return torch.nn.functional.gelu(x)


def test_a_symbolic_node_of_a_domain_onnx_runtime_runs_is_loaded_and_runs():
    program = dynamo_onnx.export(RuntimeGelu(), (X,), dynamic_shapes=BATCH)
    proto = program.model_proto
    assert _nodes(proto) == [("com.microsoft", "Gelu")]
    assert ("com.microsoft", 1) in {(o.domain, o.version) for o in proto.opset_import}
    assert not program.diagnostics.by_rule("custom-domain-node")  # checked in a session
    for rows in (3, 6):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(program(x)[0], RuntimeGelu()(x), atol=1e-5, rtol=1e-4)


def test_a_none_input_between_others_is_an_empty_input_as_torch_onnx_writes_it():
    class MiddleNone(torch.nn.Module):
        def forward(self, x):
            return torch.onnx.ops.symbolic(
                "d::Op", (x, None, x), dtype=x.dtype, shape=x.shape, version=4
            )

    proto = dynamo_onnx.export(MiddleNone(), (X,)).model_proto
    (node,) = proto.graph.node
    name = proto.graph.input[0].name
    assert list(node.input) == [name, "", name]
    assert ("d", 4) in {(o.domain, o.version) for o in proto.opset_import}


def test_a_standard_operator_named_without_version_is_written_at_the_models_opset():
    class Reshapes(torch.nn.Module):
        def forward(self, x, shape):
            return torch.onnx.ops.symbolic("Reshape", (x, shape), dtype=x.dtype, shape=[12])

    shape = torch.tensor([12])
    program = dynamo_onnx.export(Reshapes(), (X, shape), optimize=False)
    proto = program.model_proto
    assert _nodes(proto) == [("", "Reshape")]
    assert {(o.domain, o.version) for o in proto.opset_import} == {("", 20)}
    assert not program.diagnostics.by_rule("custom-domain-node")
    torch.testing.assert_close(program(X, shape)[0], X.reshape(12))
