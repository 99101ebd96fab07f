"""Findings a team can gate a build on: no false warning on clean real models, verification
that compares values, Python warnings in the terminal, and the same findings whatever the
caller's logging (issue: "Findings you can gate on")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import onnx_ir as ir
import pytest
import torch

import dynamo_onnx
from dynamo_onnx.diagnostics import Level

transformers = pytest.importorskip("transformers")
from hf_models import MODELS  # noqa: E402 - needs transformers

GATE = dynamo_onnx.DiagnosticOptions(warnings_as_errors=True)


def _only_true_narrowing(ctx) -> None:
    """No warning at all, except a narrowed range the model really has (BERT's positions
    stop at max_position_embeddings), which must name its line and the Dim to write."""
    for finding in ctx.findings:
        if finding.level < Level.WARNING:
            continue
        assert finding.rule.name == "dynamic-dim-narrowed", finding.message
        assert finding.primary is not None and "transformers" in finding.primary.path
        assert "because of `unknown`" not in finding.message
        assert "torch.export.Dim(" in finding.message


@pytest.mark.parametrize("name", sorted(MODELS))
def test_clean_transformers_models_export_with_no_false_warning(name):
    model, args, kwargs, spec = MODELS[name]()
    try:
        program = dynamo_onnx.export(
            model, args, kwargs=kwargs, dynamic_shapes=spec, diagnostic_options=GATE
        )
    except dynamo_onnx.WarningsAsErrorsError as error:
        _only_true_narrowing(error.diagnostics)
    else:
        assert program.diagnostics.success
        assert not program.diagnostics.by_rule("nondeterministic-operator")
    options = dynamo_onnx.ExportOptions(dynamic_shapes=True, diagnostic_options=GATE)
    try:
        program = dynamo_onnx.dynamo_export(model, *args, **kwargs, export_options=options)
    except dynamo_onnx.WarningsAsErrorsError as error:
        _only_true_narrowing(error.diagnostics)
    else:
        assert not program.diagnostics.by_rule("dynamic-dim-specialized")


def test_the_narrowing_fix_removes_the_warning():
    model, args, kwargs, _ = MODELS["bert"]()
    sequence = torch.export.Dim("sequence", max=64)
    spec = {name: {0: "batch", 1: sequence} for name in ("input_ids", "attention_mask")}
    program = dynamo_onnx.export(
        model, args, kwargs=kwargs, dynamic_shapes=spec, diagnostic_options=GATE
    )
    assert program.diagnostics.success


def test_both_spellings_of_everything_dynamic_give_the_same_findings():
    class Lin(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.lin(x).reshape(x.shape[0], -1)

    x = torch.randn(3, 8)
    by_export = dynamo_onnx.export(Lin(), (x,), dynamic_shapes=True)
    options = dynamo_onnx.ExportOptions(dynamic_shapes=True)
    by_options = dynamo_onnx.dynamo_export(Lin(), x, export_options=options)

    def findings(program):
        return [
            (f.rule.id, f.level, f.message)
            for f in program.diagnostics.findings
            if f.rule.name.startswith("dynamic")
        ]

    assert findings(by_export) == findings(by_options)
    ((rule, level, message),) = findings(by_export)
    assert (rule, level) == ("DO128", Level.NOTE)
    assert "`x` dimension 1 = 8" in message


# -- verification --------------------------------------------------------------------------


def test_a_corrupted_attention_weight_is_a_mismatch_with_the_first_diverging_node():
    model, args, kwargs, spec = MODELS["llama"]()
    program = dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes=spec, verify=True)
    (match,) = program.diagnostics.by_rule("outputs-match")
    assert "1 compared on values" in match.message and "0 on shape only" in match.message
    name = "layers.0.input_layernorm.weight"  # the norm in front of the first attention
    weight = program.model.graph.initializers[name]
    noisy = weight.const_value.numpy() + 0.5
    weight.const_value = ir.tensor(noisy, name=name)
    program.release()
    comparisons = program.verify(args, kwargs, find_divergence=True)
    assert not comparisons[0].ok and comparisons[0].on_values
    (mismatch,) = program.diagnostics.by_rule("output-mismatch")
    assert mismatch.properties["on_values"] is True
    (first,) = program.diagnostics.by_rule("first-divergence")
    assert "modeling_llama.py" in first.primary.path
    assert "diff" in first.message


class HalfNoisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x), x * 2


def test_an_output_drawn_from_random_numbers_is_compared_on_shape_only_and_says_so():
    x = torch.randn(3, 4)
    program = dynamo_onnx.export(HalfNoisy(), (x,), verify=True)
    comparisons = program.verify((x,))
    assert [c.on_values for c in comparisons] == [False, True]
    match = program.diagnostics.by_rule("outputs-match")[-1]
    assert "1 compared on values" in match.message
    assert "1 on shape only" in match.message
    assert comparisons[0].name in match.message and "random numbers" in match.message


def test_program_verify_and_export_verify_agree_on_a_dynamic_gpt2():
    model, args, kwargs, spec = MODELS["gpt2"]()
    program = dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes=spec, verify=True)
    (at_export,) = program.diagnostics.by_rule("outputs-match")
    comparisons = program.verify(args, kwargs)  # crashed in the reference run before
    assert all(c.ok and c.on_values for c in comparisons)
    assert len(program.diagnostics.by_rule("outputs-match")) == 2
    assert at_export.properties["on_values"] == 1


def test_verification_leaves_the_callers_model_as_it_was():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    program = dynamo_onnx.export(model, (torch.randn(5, 4),), verify=True)
    program.verify((torch.randn(5, 4),))
    after = model.state_dict()
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    assert int(after["1.num_batches_tracked"]) == 0


# -- the terminal --------------------------------------------------------------------------


class ReshapesToTwo(torch.nn.Module):
    def forward(self, x):
        return x.reshape(2, -1)  # marker: reshape


def _line(marker: str) -> int:
    with open(__file__) as source:
        return next(i for i, text in enumerate(source, 1) if f"# marker: {marker}" in text)


def test_an_export_with_warnings_issues_python_warnings_at_the_users_line():
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning) as caught:
        dynamo_onnx.export(ReshapesToTwo(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: "b"}})
    (warning,) = [w for w in caught if issubclass(w.category, dynamo_onnx.DynamoOnnxWarning)]
    assert str(warning.message).startswith("[DO106 dynamic-dim-specialized] Input `x` dimension 0")
    assert "Fix: " in str(warning.message)
    assert (warning.filename, warning.lineno) == (__file__, _line("reshape"))


def test_python_warnings_are_bounded_and_filterable():
    class ManyNoises(torch.nn.Module):
        def forward(self, x):
            for _ in range(8):
                x = x + torch.rand_like(x)
            return x

    with pytest.warns(dynamo_onnx.DynamoOnnxWarning) as caught:
        dynamo_onnx.export(ManyNoises(), (torch.randn(2),))
    ours = [str(w.message) for w in caught if w.category is dynamo_onnx.DynamoOnnxWarning]
    assert len(ours) == 6
    assert ours[-1].startswith("3 more warning(s) of this export")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=dynamo_onnx.DynamoOnnxWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        dynamo_onnx.export(ManyNoises(), (torch.randn(2),))


def test_a_clean_export_issues_no_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dynamo_onnx.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),), dynamic_shapes=True)
    assert not [w for w in caught if w.category is dynamo_onnx.DynamoOnnxWarning]


@pytest.mark.parametrize("torch_logs", ["dynamic", "-dynamic"])
def test_torch_logs_change_no_finding(tmp_path, torch_logs):
    script = tmp_path / "model_check.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, dynamo_onnx

            class ReshapesToTwo(torch.nn.Module):
                def forward(self, x):
                    return x.reshape(2, -1)

            program = dynamo_onnx.export(
                ReshapesToTwo(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: "b"}}
            )
            (finding,) = program.diagnostics.by_rule("dynamic-dim-specialized")
            print("FOUND", finding.primary.line, "Eq(" in finding.message)
            """
        )
    )
    env = {**os.environ, "TORCH_LOGS": torch_logs}
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert "FOUND 6 True" in result.stdout, result.stderr[-2000:]
