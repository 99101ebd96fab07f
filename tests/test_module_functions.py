"""Layers as functions: module_functions=True groups submodule calls, results unchanged."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
import torch

import dynamo_onnx
from conftest import MLPModel
from dynamo_onnx.passes.onnx_graph.module_functions import DOMAIN

transformers = pytest.importorskip("transformers")


def test_mlp_layers_become_functions_named_after_the_module_path(tmp_path):
    model, x = MLPModel(), torch.randn(3, 8)
    program = dynamo_onnx.export(model, (x,), module_functions=True)
    top = [(n.domain, n.op_type) for n in program.model.graph]
    assert top == [
        (DOMAIN, "fc0"),
        ("", "Sigmoid"),
        (DOMAIN, "fc1"),
        ("", "Sigmoid"),
        (DOMAIN, "fc2"),
        ("", "Sigmoid"),
        (DOMAIN, "fc3"),
    ]
    fc0 = program.model.functions[(DOMAIN, "fc0", "")]
    assert fc0.metadata_props["pkg.dynamo_onnx.module_class"] == "torch.nn.modules.linear.Linear"
    assert [v.name for v in fc0.inputs] == ["tensor_x", "fc0.weight", "fc0.bias"]
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-6, rtol=1e-6)
    (note,) = program.diagnostics.by_rule("module-functions")
    assert note.properties["count"] == 4 and note.properties["skipped_modules"] == []
    # the grouping is an onnx_ir pass whose ``modified`` is in the pass record
    (record,) = [p for p in program.diagnostics.passes if p.name == "module-functions"]
    assert [(s.name, s.modified) for s in record.steps] == [("GroupModulesStep", True)]
    program.save(tmp_path / "mlp.onnx")
    onnx.checker.check_model(str(tmp_path / "mlp.onnx"), full_check=True)


def test_gpt2_hierarchy_is_nested_and_results_match_the_inline_model():
    cfg = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, use_cache=False
    )
    model = transformers.GPT2Model(cfg).eval()
    ids = torch.randint(0, 100, (2, 7))
    grouped = dynamo_onnx.export(model, (ids,), module_functions=True)
    inline = dynamo_onnx.export(model, (ids,))
    assert not any(n.domain == DOMAIN for n in inline.model.graph)
    block = grouped.model.functions[(DOMAIN, "h_0", "")]
    assert {n.op_type for n in block if n.domain == DOMAIN} >= {"h_0_attn", "h_0_mlp", "h_0_ln_1"}
    assert (DOMAIN, "h_1_attn_c_attn", "") in grouped.model.functions
    torch.testing.assert_close(grouped(ids)[0], inline(ids)[0], atol=1e-6, rtol=1e-6)
    session = ort.InferenceSession(
        grouped.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    assert session.get_outputs()[0].name == inline.model_proto.graph.output[0].name
