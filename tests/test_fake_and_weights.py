"""Fake mode, apply_weights, the four initializer layouts, and optimize()."""

from __future__ import annotations

import onnx
import pytest
import torch

import dynamo_onnx
from conftest import MLPModel


class SeedParamModel(torch.nn.Module):
    """The seed's fake-mode example."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(42.0))

    def forward(self, x):
        return self.weight + x


def test_seed_fake_mode_example_runs_as_written(tmp_path):
    with dynamo_onnx.enable_fake_mode() as fake_context:
        my_nn_module = SeedParamModel()
        arg1 = torch.randn(2, 2, 2)
    assert my_nn_module.weight.device.type == "meta", "no real weights allocated"
    assert isinstance(fake_context, dynamo_onnx.ONNXFakeContext)
    export_options = dynamo_onnx.ExportOptions(fake_context=fake_context)
    onnx_program = dynamo_onnx.dynamo_export(my_nn_module, arg1, export_options=export_options)
    onnx_program.save(
        tmp_path / "my_model_without_initializers.onnx",
        include_initializers=False,
        keep_initializers_as_inputs=True,
    )
    bare = onnx.load(str(tmp_path / "my_model_without_initializers.onnx"))
    assert [i.name for i in bare.graph.input] == ["x", "weight"] and not bare.graph.initializer
    onnx_program.apply_weights({"weight": torch.tensor(42.0)})
    onnx_program.save(tmp_path / "my_model_with_initializers.onnx")
    full = onnx.load(str(tmp_path / "my_model_with_initializers.onnx"))
    assert onnx.numpy_helper.to_array(full.graph.initializer[0]) == 42.0
    x = torch.randn(2, 2, 2)
    torch.testing.assert_close(onnx_program(x)[0], x + 42)


def _fake_mlp():
    with dynamo_onnx.enable_fake_mode():
        model = MLPModel()
        x = torch.randn(3, 8)
    return dynamo_onnx.export(model, (x,), optimize=False)


def test_fake_weights_cannot_be_saved_or_run_and_say_why(tmp_path):
    program = _fake_mlp()
    assert sorted(program.fake_weights())[:2] == ["fc0.bias", "fc0.weight"]
    with pytest.raises(dynamo_onnx.FakeWeightsError) as info:
        program.save(tmp_path / "m.onnx")
    assert str(info.value).startswith("[DO403 fake-weights] 8 weight(s) are fake (meta)")
    assert "apply_weights" in str(info.value) or "Apply real weights" in str(info.value)
    assert not list(tmp_path.iterdir()), "nothing written"
    with pytest.raises(dynamo_onnx.FakeWeightsError, match="cannot run them"):
        program(torch.randn(3, 8))


def test_apply_weights_checks_names_shapes_and_dtypes():
    program = _fake_mlp()
    real = MLPModel()
    state = real.state_dict()
    bad = dict(state)
    bad["fc9.weight"] = torch.zeros(2)
    bad["fc0.weight"] = torch.zeros(8, 7)
    bad["fc1.bias"] = state["fc1.bias"].double()
    del bad["fc3.bias"]
    with pytest.raises(dynamo_onnx.WeightsMismatchError) as info:
        program.apply_weights(bad)
    text = str(info.value)
    assert text.startswith("[DO404 weights-mismatch]")
    for needle in (
        "not weights of this model: fc9.weight",
        "fake weights left without a value: fc3.bias",
        "fc0.weight has shape [8, 7], the model's is [8, 8]",
        "fc1.bias has dtype torch.float64, the model's is float",
    ):
        assert needle in text
    assert program.diagnostics.by_rule("DO404")
    assert len(program.fake_weights()) == 8, "nothing applied"
    program.apply_weights(state)
    x = torch.randn(3, 8)
    torch.testing.assert_close(program(x)[0], real(x), atol=1e-6, rtol=1e-6)


def test_optimize_before_and_after_apply_weights():
    program = _fake_mlp()
    program.optimize()  # fake weights are never read
    assert len(program.fake_weights()) == 8
    real = MLPModel()
    program.apply_weights(real.state_dict())
    program.optimize()
    (first, second) = program.diagnostics.by_rule("model-optimized")
    assert first.properties["before"] >= first.properties["after"] > 0
    x = torch.randn(3, 8)
    torch.testing.assert_close(program(x)[0], real(x), atol=1e-6, rtol=1e-6)


def test_optimize_folds_constants_and_keeps_results():
    class Foldable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor([2.0, 3.0]))

        def forward(self, x):
            return x * (self.scale * 2 + 1)

    model, x = Foldable(), torch.randn(4, 2)
    program = dynamo_onnx.export(model, (x,), optimize=False)
    program.optimize()
    (finding,) = program.diagnostics.by_rule("model-optimized")
    assert finding.properties["after"] < finding.properties["before"]
    torch.testing.assert_close(program(x)[0], model(x))


def test_cli_fake_writes_the_architecture_with_weights_as_inputs(tmp_path):
    import textwrap

    from cli_runner import run_cli  # the command in this process, as tests/test_cli.py runs it

    (tmp_path / "big.py").write_text(
        textwrap.dedent(
            """
        import torch

        def build():
            model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU())
            return model, (torch.randn(2, 1024),)
        """
        )
    )
    proc = run_cli(tmp_path, "export", "big.py:build", "--fake", "-o", "big.onnx")
    assert proc.returncode == 0, proc.stderr
    assert "(fake weights: saved as inputs)" in proc.stdout
    saved = onnx.load(str(tmp_path / "big.onnx"))
    assert not saved.graph.initializer
    assert (tmp_path / "big.onnx").stat().st_size < 100_000, "no weight data"
