"""transformers models from small configs (random weights, no downloads), through ONNX Runtime.

GPT-2 and T5 fail torch 2.13's default ``run_decompositions`` ("Cannot view a tensor with
shape ... and strides ..."); these tests are the proof that the view->reshape rewrite works.
"""

from __future__ import annotations

import pytest
import torch

import dynamo_onnx
from conftest import first_output
from dynamo_onnx.passes import decompose as decomposition

transformers = pytest.importorskip("transformers")
from hf_models import MODELS  # noqa: E402 - needs transformers


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5"])
def test_transformers_model_matches_eager(name):
    model, args, kwargs, _ = MODELS[name]()
    model.eval()
    program = dynamo_onnx.export(model, args, kwargs)
    with torch.no_grad():
        expected = first_output(model(*args, **kwargs))
    actual = program(*args, **kwargs)[0]
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    assert program.diagnostics.success
    coverage = program.diagnostics.by_rule("operator-coverage")[0]
    assert coverage.properties["translated"] == coverage.properties["total"]


def test_gpt2_skips_the_retrace_and_the_retrace_path_still_lowers_it():
    model, args, _, _ = MODELS["gpt2"]()
    program = dynamo_onnx.export(model.eval(), args)
    (plan,) = program.diagnostics.by_rule("decomposition-plan")
    assert plan.properties["retraced"] is False, plan.message
    # The re-trace path (taken for in-place operators, mutations...) rewrites GPT-2's
    # `view`s as `reshape`s before run_decompositions, which can fail on their strides.
    ep = torch.export.export(model.eval(), args, strict=False)
    lowered, views, _ = decomposition.lower(ep, dynamo_onnx.OnnxRegistry())
    assert views > 0
    assert any(n.op == "call_function" for n in lowered.graph.nodes)
