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


def _gpt2():
    cfg = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, use_cache=False
    )
    return transformers.GPT2Model(cfg), (torch.randint(0, 100, (2, 7)),), {}


def _bert():
    cfg = transformers.BertConfig(
        num_hidden_layers=2,
        num_attention_heads=2,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
    )
    ids = torch.randint(0, 100, (2, 7))
    return transformers.BertModel(cfg), (ids,), {"attention_mask": torch.ones_like(ids)}


def _llama():
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
        use_cache=False,
    )
    return transformers.LlamaModel(cfg), (torch.randint(0, 100, (2, 7)),), {}


def _t5():
    cfg = transformers.T5Config(
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        d_model=32,
        d_kv=16,
        d_ff=64,
        vocab_size=100,
        use_cache=False,
    )
    kwargs = {
        "input_ids": torch.randint(0, 100, (2, 7)),
        "decoder_input_ids": torch.randint(0, 100, (2, 5)),
    }
    return transformers.T5Model(cfg), (), kwargs


@pytest.mark.parametrize("build", [_gpt2, _bert, _llama, _t5], ids=["gpt2", "bert", "llama", "t5"])
def test_transformers_model_matches_eager(build):
    model, args, kwargs = build()
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
    model, args, _ = _gpt2()
    program = dynamo_onnx.export(model.eval(), args)
    (plan,) = program.diagnostics.by_rule("decomposition-plan")
    assert plan.properties["retraced"] is False, plan.message
    # The re-trace path (taken for in-place operators, mutations...) rewrites GPT-2's
    # `view`s as `reshape`s before run_decompositions, which can fail on their strides.
    ep = torch.export.export(model.eval(), args, strict=False)
    lowered, views, _ = decomposition.lower(ep, dynamo_onnx.OnnxRegistry())
    assert views > 0
    assert any(n.op == "call_function" for n in lowered.graph.nodes)
