"""dynamo_onnx.export as a drop-in for torch.onnx.export: the same calls, the same files.

The calls are those of torch.onnx's documentation; each saved file is read back with onnx
and run in ONNX Runtime at two batch sizes against eager PyTorch.
"""

from __future__ import annotations

import inspect
import io
import logging
import os
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
from dynamo_onnx.io import onnx_file


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
    # Every weight of this MLP is at most 256 bytes: ir.save keeps them all inline, and
    # where torch.onnx leaves an empty ours.onnx.data beside the model, there is none.
    assert os.path.getsize(tmp_path / "theirs.onnx.data") == 0
    assert not (tmp_path / "ours.onnx.data").exists()
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


# -- the names and behaviors beside export that torch.onnx code relies on -------------------


def _ort_outputs(data: bytes, x: torch.Tensor) -> list:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


def test_a_file_object_as_f_or_save_destination_holds_the_whole_model(tmp_path):
    model = MLPModel().eval()
    batch = {"tensor_x": {0: "batch"}}
    by_position, by_keyword = io.BytesIO(), io.BytesIO()
    program = dynamo_onnx.export(model, (torch.randn(4, 8),), by_position, dynamic_shapes=batch)
    dynamo_onnx.export(model, (torch.randn(4, 8),), f=by_keyword, dynamic_shapes=batch)
    saved = io.BytesIO()
    program.save(saved)
    with open(tmp_path / "opened.onnx", "wb") as handle:
        program.save(handle)
    program.save(tmp_path / "path.onnx")
    files = [
        by_position.getvalue(),
        by_keyword.getvalue(),
        saved.getvalue(),
        (tmp_path / "opened.onnx").read_bytes(),
    ]
    assert all(data == (tmp_path / "path.onnx").read_bytes() for data in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opened.onnx", "path.onnx"]
    onnx.checker.check_model(onnx.load_from_string(files[0]), full_check=True)
    for size in (3, 17):
        x = torch.randn(size, 8)
        (got,) = _ort_outputs(files[0], x)
        torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-5, atol=1e-6)
    assert not program.diagnostics.by_rule("argument-ignored")


def test_a_file_object_cannot_hold_external_data(monkeypatch):
    model, x = MLPModel().eval(), torch.randn(4, 8)
    buffer = io.BytesIO()
    with pytest.raises(dynamo_onnx.SaveError) as info:
        dynamo_onnx.export(model, (x,), buffer, external_data=True)  # written out: honored
    assert str(info.value).startswith(
        "[DO412 file-object-cannot-hold-model] Cannot write the model to a BytesIO: "
        "external_data=True asks for a second file."
    )
    assert 'program.save("model.onnx")' in str(info.value)
    assert buffer.getvalue() == b""
    program = dynamo_onnx.export(model, (x,))
    monkeypatch.setattr(onnx_file, "TWO_GB", 400)  # these 496 bytes of weights: "too large"
    with pytest.raises(dynamo_onnx.SaveError, match="exceed protobuf's 2 GiB limit"):
        program.save(buffer)
    assert buffer.getvalue() == b""
    program.save(buffer, include_initializers=False)  # the graph alone fits
    assert buffer.getvalue()


def test_calling_the_program_returns_a_tuple_as_torch_onnx_does():
    model, x = MLPModel().eval(), torch.randn(4, 8)
    ours = dynamo_onnx.export(model, (x,))(x)
    theirs = torch.onnx.export(model, (x,), dynamo=True, verbose=False)(x)
    assert type(ours) is type(theirs) is tuple
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_dir_lists_the_public_names_and_submodules_only():
    listed = dir(dynamo_onnx)
    assert set(dynamo_onnx.__all__) <= set(listed)
    for leaked in ("Any", "TYPE_CHECKING", "annotations", "importlib", "types"):
        assert leaked not in listed
    extra = set(listed) - set(dynamo_onnx.__all__) - {"__version__"}
    assert extra and all(
        getattr(dynamo_onnx, name).__name__ == f"dynamo_onnx.{name}" for name in extra
    )
    for name in listed:
        getattr(dynamo_onnx, name)


def test_torch_onnx_names_are_the_same_objects_and_export_takes_them(tmp_path):
    assert dynamo_onnx.TrainingMode is torch.onnx.TrainingMode
    assert dynamo_onnx.OperatorExportTypes is torch.onnx.OperatorExportTypes
    assert dynamo_onnx.is_in_onnx_export() is False  # outside an export
    from dynamo_onnx import OperatorExportTypes, TrainingMode  # as code for torch.onnx does

    for training in (TrainingMode.EVAL, TrainingMode.PRESERVE):
        program = dynamo_onnx.export(
            MLPModel().eval(),
            (torch.randn(4, 8),),
            training=training,
            operator_export_type=OperatorExportTypes.ONNX,
        )
        assert not program.diagnostics.by_rule("argument-ignored")
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="DO112"):
        dynamo_onnx.export(
            MLPModel(), (torch.randn(4, 8),), operator_export_type=OperatorExportTypes.ONNX_ATEN
        )


def test_is_in_onnx_export_is_torch_onnx_s(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: calls.append(1) or True)
    assert dynamo_onnx.is_in_onnx_export() is True
    assert calls == [1]


@pytest.mark.parametrize("spelling", ["lone tensor", "tuple", "list"])
def test_verify_reads_its_inputs_as_export_does(spelling):
    model = MLPModel().eval()
    program = dynamo_onnx.export(
        model, torch.randn(4, 8), dynamic_shapes={"tensor_x": {0: "batch"}}
    )
    x = torch.randn(6, 8)
    call = {
        "lone tensor": lambda: program.verify(x),
        "tuple": lambda: program.verify((x,)),
        "list": lambda: program.verify([x]),
    }[spelling]
    comparisons = call()
    assert [c.ok for c in comparisons] == [True]
    assert program.diagnostics.by_rule("outputs-match")
    assert not program.diagnostics.by_rule("verification-failed")


@pytest.mark.parametrize("as_inputs", [False, True])
def test_export_params_false_writes_no_data_file_and_says_where_the_weights_are(
    tmp_path, as_inputs
):
    model, x = MLPModel().eval(), torch.randn(4, 8)
    path = tmp_path / "graph.onnx"
    program = dynamo_onnx.export(
        model, (x,), path, export_params=False, keep_initializers_as_inputs=as_inputs
    )
    assert [p.name for p in tmp_path.iterdir()] == ["graph.onnx"]  # no (empty) .data file
    saved = onnx.load(str(path))
    assert not saved.graph.initializer  # as torch.onnx: the weights are left out
    (note,) = program.diagnostics.by_rule("weights-not-saved")
    assert note.level == logging.INFO
    assert note.message.startswith(f"Saved {path} without its 8 weight(s): ")
    weights = dict(model.state_dict())
    if as_inputs:
        assert "graph inputs of the same names" in note.message
        onnx.checker.check_model(saved, full_check=True)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {name: tensor.numpy() for name, tensor in weights.items()}
        (got,) = session.run(None, {"tensor_x": x.numpy(), **feeds})
        torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-5, atol=1e-6)
    else:
        assert "onnx.checker and ONNX Runtime reject the file" in note.message
        with pytest.raises(onnx.checker.ValidationError):
            onnx.checker.check_model(saved)


def test_the_optimize_note_needs_optimize_written_out():
    model, x = MLPModel().eval(), torch.randn(4, 8)
    default = dynamo_onnx.export(model, (x,), module_functions=True)
    assert not default.diagnostics.by_rule("argument-ignored")
    for written in ({"optimize": True}, {"export_modules_as_functions": True, "optimize": True}):
        program = dynamo_onnx.export(model, (x,), module_functions=True, **written)
        (note,) = program.diagnostics.by_rule("argument-ignored")
        assert note.message.startswith("`optimize=True` has no effect here")
    positional = dynamo_onnx.export(model, (x,), None, export_modules_as_functions=True)
    assert not positional.diagnostics.by_rule("argument-ignored")
