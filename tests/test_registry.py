"""OnnxRegistry: registering custom operators and looking functions up."""

from __future__ import annotations

import onnx
import onnxscript
import pytest
import torch
from onnxscript import opset18 as op

import dynamo_onnx
from dynamo_onnx import registry as registry_module


@torch.library.custom_op("dxreg::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.nn.functional.gelu(x) * scale


@scaled_gelu.register_fake
def _(x, scale):
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return scaled_gelu(x, 2.0) + 1


def traced_scaled_gelu(x, scale: float):
    """A plain function of ONNX ops: traced, its nodes inlined in the graph."""
    gelu = op.Mul(op.Mul(x, 0.5), op.Add(op.Erf(op.Div(x, 1.4142135623730951)), 1.0))
    return op.Mul(gelu, scale)


custom_domain = onnxscript.values.Opset("com.example", 1)


@onnxscript.script(custom_domain)
def ScaledGelu(x, scale: float):  # ONNX function names are CamelCase
    half = op.CastLike(op.Constant(value_float=0.5), x)
    one = op.CastLike(op.Constant(value_float=1.0), x)
    root2 = op.CastLike(op.Constant(value_float=1.4142135623730951), x)
    gelu = op.Mul(op.Mul(half, x), op.Add(one, op.Erf(op.Div(x, root2))))
    return op.Mul(gelu, op.CastLike(op.Constant(value_float=scale), x))


@pytest.mark.parametrize(
    "function", [traced_scaled_gelu, ScaledGelu], ids=["traced", "script-custom-domain"]
)
def test_custom_operator_exports_and_matches_eager(function):
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(function, "dxreg", "scaled_gelu")
    model, x = UsesCustomOp(), torch.randn(3, 4)
    program = dynamo_onnx.export(model, (x,), registry=registry, optimize=False)
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)
    if function is ScaledGelu:
        assert ("com.example", "ScaledGelu", "") in program.model.functions
        assert program.model_proto.graph.node[0].domain == "com.example"
    else:
        assert "Erf" in {n.op_type for n in program.model.graph}
    (dispatched,) = [
        f
        for f in program.diagnostics.by_rule("node-dispatched")
        if f.properties["op"] == "dxreg::scaled_gelu"
    ]
    assert dispatched.properties["reason"] == "perfect match (custom function)"


@pytest.mark.parametrize("opset", [18, 20, 23])
def test_a_script_function_stays_a_local_function_at_every_opset(opset):
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(ScaledGelu, "dxreg", "scaled_gelu")
    model = UsesCustomOp()
    program = dynamo_onnx.export(
        model,
        (torch.randn(3, 4),),
        registry=registry,
        optimize=False,
        opset_version=opset,
        dynamic_shapes={"x": {0: "batch"}},
    )
    function = program.model.functions[("com.example", "ScaledGelu", "")]
    assert function.opset_imports[""] == opset == program.model.opset_imports[""]
    assert [n.op_type for n in program.model.graph][0] == "ScaledGelu"
    assert any(a.is_ref() for n in function for a in n.attributes.values())  # scale: float
    onnx.checker.check_model(program.model_proto, full_check=True)
    for batch in (3, 11):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)
    assert not program.diagnostics.by_rule("local-functions-inlined")


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ({"optimize": False, "opset_version": 17}, "cannot take a function's body to opset 17"),
        ({}, "the optimizer inlines functions"),  # export()'s defaults: optimize=True
    ],
)
def test_a_script_function_inlined_is_a_note_naming_it(call, reason):
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(ScaledGelu, "dxreg", "scaled_gelu")
    model, x = UsesCustomOp(), torch.randn(3, 4)
    program = dynamo_onnx.export(model, (x,), registry=registry, **call)
    assert not program.model.functions
    (note,) = program.diagnostics.by_rule("local-functions-inlined")
    assert note.message.startswith("Inlined 1 local function(s) (com.example::ScaledGelu): ")
    assert reason in note.message
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


def test_custom_function_via_export_options():
    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(traced_scaled_gelu, "dxreg", "scaled_gelu")
    options = dynamo_onnx.ExportOptions(onnx_registry=registry)
    x = torch.randn(2, 2)
    program = dynamo_onnx.dynamo_export(UsesCustomOp(), x, export_options=options)
    torch.testing.assert_close(program(x)[0], UsesCustomOp()(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("namespace", "op_name"),
    [
        ("", "gelu"),
        ("dxreg", ""),
        ("dx::reg", "gelu"),
        ("dxreg", "ge.lu"),
        ("dxreg", "ge lu"),
        (None, "gelu"),
    ],
)
def test_register_op_rejects_names_not_of_the_form_namespace_op(namespace, op_name):
    with pytest.raises(ValueError, match="namespace::op"):
        dynamo_onnx.OnnxRegistry().register_op(traced_scaled_gelu, namespace, op_name)


def test_get_op_functions_orders_builtins_first_and_custom_after():
    registry = dynamo_onnx.OnnxRegistry()
    builtins = registry.get_op_functions("aten", "add", "Tensor")
    assert builtins and not any(f.is_custom for f in builtins)
    registry.register_op(traced_scaled_gelu, "aten", "add", "Tensor")
    functions = registry.get_op_functions("aten", "add", "Tensor")
    assert functions[: len(builtins)] == builtins
    assert functions[-1].is_custom and functions[-1].name == "traced_scaled_gelu"
    assert registry.functions_for("aten::add.Tensor")[0].is_custom, "custom functions are preferred"
    assert registry.get_op_functions("dxreg", "nothing") is None


def test_is_registered_op_and_default_overload():
    registry = dynamo_onnx.OnnxRegistry()
    assert registry.is_registered_op("aten", "relu")
    assert registry.is_registered_op("aten", "relu", "default")
    assert not registry.is_registered_op("dxreg", "scaled_gelu")
    registry.register_op(traced_scaled_gelu, "dxreg", "scaled_gelu")
    assert registry.is_registered_op("dxreg", "scaled_gelu")
    assert not dynamo_onnx.OnnxRegistry().is_registered_op("dxreg", "scaled_gelu"), (
        "registries are independent"
    )
    assert registry.opset_version == 18


def test_default_registry_is_built_once_per_process():
    dynamo_onnx.OnnxRegistry()
    before = registry_module._torchlib_table.cache_info()
    dynamo_onnx.OnnxRegistry()
    after = registry_module._torchlib_table.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 1
