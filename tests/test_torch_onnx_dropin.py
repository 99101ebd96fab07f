"""dynamo_onnx.export as a drop-in for torch.onnx.export: the same calls, the same files.

The calls are those of torch.onnx's documentation; each saved file is read back with onnx
and run in ONNX Runtime at two batch sizes against eager PyTorch.
"""

from __future__ import annotations

import inspect
import logging
import pathlib

import onnx
import onnxruntime as ort
import onnxscript
import pytest
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import dynamo_onnx
from conftest import MLPModel, line_of


class SumModule(torch.nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1)


def _io(path: pathlib.Path) -> tuple[list[tuple[str, list]], list[tuple[str, list]]]:
    """(name, dims) of the saved model's inputs and outputs; dims as ints or names."""
    model = onnx.load(str(path), load_external_data=False)

    def dims(value):
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    return (
        [(i.name, dims(i)) for i in model.graph.input],
        [(o.name, dims(o)) for o in model.graph.output],
    )


def _run(path: pathlib.Path, feeds: dict) -> list:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in feeds.items()})


def test_the_signature_is_torch_onnx_exports():
    ours = inspect.signature(dynamo_onnx.export).parameters
    theirs = inspect.signature(torch.onnx.export).parameters
    for name, parameter in theirs.items():
        assert name in ours, name
        assert ours[name].kind == parameter.kind, name
        assert ours[name].default == parameter.default, name
    assert list(ours)[: len(theirs)] == list(theirs)


def test_the_documentation_example_with_f_names_and_dynamic_axes(tmp_path):
    path = tmp_path / "onnx.pb"
    program = dynamo_onnx.export(
        SumModule(),
        (torch.ones(2, 2),),
        path,
        input_names=["x"],
        output_names=["sum"],
        dynamic_axes={"x": {0: "my_custom_axis_name"}},
        dynamo=True,
    )
    assert isinstance(program, dynamo_onnx.ONNXProgram)  # returned as well as saved
    inputs, outputs = _io(path)
    assert inputs == [("x", ["my_custom_axis_name", 2])]
    assert outputs == [("sum", ["my_custom_axis_name"])]
    assert [
        i["name"] for i in program.diagnostics.to_sarif()["runs"][0]["properties"]["inputs"]
    ] == ["x"]
    for batch in (2, 7):
        x = torch.randn(batch, 2)
        (got,) = _run(path, {"x": x})
        torch.testing.assert_close(torch.from_numpy(got), SumModule()(x))


def test_external_data_and_input_names_like_torch_onnx(tmp_path):
    model = MLPModel()
    ours, theirs = tmp_path / "ours.onnx", tmp_path / "theirs.onnx"
    call = {
        "input_names": ["features"],
        "output_names": ["logits"],
        "dynamic_axes": {"features": {0: "batch"}},
        "dynamo": True,
        "external_data": True,
    }
    dynamo_onnx.export(model, (torch.randn(97, 8),), ours, **call)
    torch.onnx.export(model, (torch.randn(97, 8),), theirs, **call)
    assert (tmp_path / "ours.onnx.data").exists()  # weights beside the model, as torch.onnx
    assert _io(ours) == _io(theirs)  # the same names and dims
    assert onnx.load(str(ours)).opset_import[0].version == 20  # torch.onnx's default opset
    for batch in (3, 64):
        x = torch.randn(batch, 8)
        (got,) = _run(ours, {"features": x})
        torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-5, atol=1e-6)


def test_the_optimizer_runs_by_default_and_dynamo_export_keeps_the_seeds_defaults():
    program = dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),))
    assert program.diagnostics.by_rule("model-optimized")
    assert program.model.opset_imports[""] == 20
    seed = dynamo_onnx.dynamo_export(MLPModel(), torch.randn(4, 8))
    assert not seed.diagnostics.by_rule("model-optimized")
    assert seed.model.opset_imports[""] == 18


def test_export_params_false_saves_without_weights(tmp_path):
    path = tmp_path / "arch.onnx"
    dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),), path, export_params=False)
    assert not onnx.load(str(path)).graph.initializer


def test_custom_translation_table_registers_functions_for_this_export():
    def custom_relu(x):
        return op.Mul(op.Relu(x), op.CastLike(op.Constant(value_float=2.0), x))

    class Relu(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x)

    registry = dynamo_onnx.OnnxRegistry()
    x = torch.randn(3, 4)
    program = dynamo_onnx.export(
        Relu(),
        (x,),
        custom_translation_table={torch.ops.aten.relu.default: custom_relu},
        registry=registry,
    )
    torch.testing.assert_close(program(x)[0], torch.relu(x) * 2)
    assert not any(f.is_custom for f in registry.get_op_functions("aten", "relu"))  # not changed


@torch.library.custom_op("dxdrop::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


class Twice(torch.nn.Module):
    def forward(self, x):
        return twice(x)


@onnxscript.script(onnxscript.values.Opset("com.example", 3))
def twice_onnx(x: FLOAT) -> FLOAT:
    return op.Add(x, x)


def test_custom_opsets_set_the_version_of_a_custom_domain():
    x = torch.randn(2)
    program = dynamo_onnx.export(
        Twice(),
        (x,),
        custom_translation_table={torch.ops.dxdrop.twice.default: twice_onnx},
        custom_opsets={"com.example": 3},
        opset_version=18,
        optimize=False,
    )
    assert program.model.opset_imports["com.example"] == 3
    torch.testing.assert_close(program(x)[0], x * 2)


IGNORED = {
    "profile": ({"profile": True}, "pass table"),
    "dump_exported_program": ({"dump_exported_program": True}, "torch.export.save"),
    "autograd_inlining": ({"autograd_inlining": False}, "TorchScript"),
    "do_constant_folding": ({"do_constant_folding": False}, "optimize=False"),
    "export_params": ({"export_params": False}, "include_initializers=False"),
    "keep_initializers_as_inputs": ({"keep_initializers_as_inputs": True}, "program.save"),
    "dynamo": ({"dynamo": False}, "no TorchScript exporter"),
    "training": ({"training": torch.onnx.TrainingMode.PRESERVE}, None),
}


def test_verbose_prints_each_pass_as_the_command_line_does(capfd):
    program = dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),), verbose=True)
    err = capfd.readouterr().err
    for name in ("capture", "translation", "load-check", "optimization"):
        assert f"  {name}: done in " in err
    assert not program.diagnostics.by_rule("argument-ignored")
    dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),), verbose=False)
    assert "done in" not in capfd.readouterr().err


@pytest.mark.parametrize("argument", sorted(IGNORED))
def test_each_argument_with_no_effect_is_a_finding_at_the_call(argument, tmp_path):
    given, words = IGNORED[argument]
    program = dynamo_onnx.export(
        MLPModel(), (torch.randn(4, 8),), report=True, artifacts_dir=tmp_path, **given
    )
    findings = [
        f
        for f in program.diagnostics.by_rule("argument-ignored")
        if f.properties["argument"] == argument
    ]
    if words is None:  # PRESERVE is what this exporter does anyway: nothing to say
        assert not findings
        return
    (finding,) = findings
    assert words in finding.message
    line = line_of(
        test_each_argument_with_no_effect_is_a_finding_at_the_call, "program = dynamo_onnx"
    )
    assert (finding.primary.path, finding.primary.line) == (__file__, line)
    expected = logging.WARNING if argument == "dynamo" else logging.INFO
    assert finding.level == expected
    results = program.diagnostics.to_sarif()["runs"][0]["results"]
    assert any(r["ruleId"] == "DO111" for r in results)


def test_a_value_that_would_change_the_model_is_an_error(tmp_path):
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export(
            MLPModel().eval(),
            (torch.randn(4, 8),),
            tmp_path / "m.onnx",
            training=torch.onnx.TrainingMode.TRAINING,
            report=True,
            artifacts_dir=tmp_path,
        )
    message = str(info.value)
    assert message.startswith("[DO112 argument-unsupported] `training=TrainingMode.TRAINING`")
    assert "model.train()" in message
    assert not (tmp_path / "m.onnx").exists()  # nothing half-done
    assert (tmp_path / "MLPModel.sarif").exists()


def test_names_that_do_not_fit_are_an_option_error():
    with pytest.raises(
        dynamo_onnx.InvalidExportOptionsError, match="has 2 names for 1 graph inputs"
    ):
        dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),), input_names=["a", "b"])
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="`input_names` is 'a'"):
        dynamo_onnx.export(MLPModel(), (torch.randn(4, 8),), input_names="a")
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="together with dynamic_shapes"):
        dynamo_onnx.export(
            MLPModel(),
            (torch.randn(4, 8),),
            dynamic_axes={"x": [0]},
            dynamic_shapes={"x": {0: "b"}},
        )


def test_the_older_positional_kwargs_still_works():
    program = dynamo_onnx.export(torch.nn.Linear(2, 2), (), {"input": torch.randn(3, 2)})
    assert [v.name for v in program.model.graph.inputs] == ["input"]
