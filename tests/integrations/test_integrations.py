"""The model-family protocol answered by the transformers family, on hand-built values:
a real ``DynamicCache``, a real config, a three-node ONNX model; no export (unit layer)."""

from __future__ import annotations

import inspect

import onnx_ir as ir
import pytest
import torch
import transformers

import dynamo_onnx
from dynamo_onnx import integrations
from dynamo_onnx.integrations.transformers import TransformersFamily, genai
from dynamo_onnx.integrations.transformers.caches import with_full_layers

LAYERS, HEADS, PAST, HEAD_DIM = 2, 2, 3, 4


def _config() -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        hidden_size=HEADS * HEAD_DIM,
        intermediate_size=16,
        vocab_size=50,
        max_position_embeddings=32,
    )


def _cache() -> transformers.DynamicCache:
    cache = transformers.DynamicCache(config=_config())
    for layer in range(LAYERS):
        shape = (2, HEADS, PAST, HEAD_DIM)
        cache.update(torch.full(shape, 10.0 * layer), torch.full(shape, 10.0 * layer + 1), layer)
    return cache


class _WithConfig(torch.nn.Module):
    """A model that carries a transformers config, the way the family reads one."""

    def __init__(self, config: object) -> None:
        super().__init__()
        self.config = config

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        return input_ids


def test_the_family_of_a_cache_is_transformers_and_of_anything_else_none():
    family = integrations.family_of(_cache())
    assert isinstance(family, TransformersFamily) and family.name == "transformers"
    for other in (torch.ones(2), {"a": torch.ones(2)}, [torch.ones(2)], None, 3):
        assert integrations.family_of(other) is None


def test_a_model_that_makes_its_own_cache_is_the_familys_and_a_plain_one_is_not():
    model = _WithConfig(_config())
    signature = inspect.signature(model.forward)
    assert integrations.input_family(model, signature, [torch.ones(1, 2)]) is not None
    plain = torch.nn.Linear(2, 2)
    assert integrations.input_family(plain, inspect.signature(plain.forward), []) is None
    no_cache = _WithConfig(transformers.LlamaConfig(use_cache=False))
    assert integrations.input_family(no_cache, signature, [torch.ones(1, 2)]) is None


def test_a_cache_is_taken_as_named_tensors_and_rebuilt_from_them():
    family, cache, ids = TransformersFamily(), _cache(), torch.ones(2, 1, dtype=torch.int64)
    signature = inspect.signature(_WithConfig.forward)
    bound = {"input_ids": ids, "past_key_values": cache, "use_cache": True}
    inputs = family.inputs(signature, bound)
    assert list(inputs.names.items()) == [
        ("input_ids", "input_ids"),
        ("past_key_values_0_key", "past_key_values.0.key"),
        ("past_key_values_0_value", "past_key_values.0.value"),
        ("past_key_values_1_key", "past_key_values.1.key"),
        ("past_key_values_1_value", "past_key_values.1.value"),
    ]
    flat = inputs.flat(bound)
    assert float(flat["past_key_values_1_value"][0, 0, 0, 0]) == 11.0
    flat["past_key_values_1_value"] = torch.zeros(2, HEADS, PAST + 2, HEAD_DIM)
    rebuilt = inputs.model_inputs(flat)
    assert rebuilt["use_cache"] is True and rebuilt["input_ids"] is ids
    assert rebuilt["past_key_values"] is not cache  # the caller's cache is not changed
    assert rebuilt["past_key_values"].layers[1].values.shape[2] == PAST + 2
    assert cache.layers[1].values.shape[2] == PAST
    assert list(inputs.forward_signature().parameters) == list(inputs.names)


def test_a_cache_that_holds_no_tensors_is_a_value_error():
    empty = transformers.DynamicCache(config=_config())
    with pytest.raises(ValueError, match="holds no tensors"):
        TransformersFamily().inputs(inspect.signature(_WithConfig.forward), {"x": empty})


def test_names_of_a_program_captured_with_the_cache_registered_come_from_the_paths():
    family = TransformersFamily()
    paths = [("kwargs", "input_ids"), ("kwargs", "past_key_values", "key_cache", "1")]
    assert family.input_names(paths) == [None, "past_key_values.1.key"]
    assert family.input_names([("kwargs", "x")]) is None
    assert family.output_names([("logits",), ("past_key_values", "value_cache", "0")]) == [
        "logits",
        "present.0.value",
    ]
    assert family.output_names([("logits",), ("hidden_states", "0")]) is None


def test_output_leaves_are_a_caches_tensors_and_an_output_classs_tuple():
    cache = _cache()
    leaves = integrations.output_leaves(cache)
    assert [float(t.flatten()[0]) for t in leaves] == [0.0, 1.0, 10.0, 11.0]
    logits = torch.randn(2, 1, 50)
    output = transformers.modeling_outputs.CausalLMOutputWithPast(logits=logits)
    assert integrations.output_leaves(output) == (logits,)
    assert integrations.output_leaves(logits) is None
    assert integrations.output_leaves({"logits": logits}) is None


def test_family_values_are_deep_copied_and_tensors_are_not():
    cache, x = _cache(), torch.ones(2)
    args, kwargs = integrations.copy_family_values(((x,), {"past_key_values": cache}))
    assert args[0] is x
    copied = kwargs["past_key_values"]
    assert copied is not cache and copied.layers[0].keys is not cache.layers[0].keys
    assert torch.equal(copied.layers[1].values, cache.layers[1].values)


def _decoder_model() -> ir.Model:
    """A graph with a causal LM's runtime names, the way an export with a cache names it."""
    names = ["input_ids", *(f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in "kv")]
    names = [n.replace(".k", ".key").replace(".v", ".value") for n in names]
    inputs = [ir.Value(name=n) for n in names]
    node = ir.node("Identity", [inputs[0]])
    outputs = [node.outputs[0]]
    outputs[0].name = "logits"
    presents = [ir.node("Identity", [v]) for v in inputs[1:]]
    for value, present in zip(inputs[1:], presents):
        present.outputs[0].name = value.name.replace("past_key_values", "present")
    graph = ir.Graph(
        inputs,
        outputs + [p.outputs[0] for p in presents],
        nodes=[node, *presents],
        opset_imports={"": 20},
    )
    return ir.Model(graph, ir_version=10)


def test_files_beside_a_causal_lm_are_its_genai_config_and_nothing_for_another_model():
    config, cache = _config(), _cache()
    reference = _WithConfig(config)
    bound = {"input_ids": torch.ones(2, 1, dtype=torch.int64), "past_key_values": cache}
    inputs = TransformersFamily().inputs(inspect.signature(_WithConfig.forward), bound)
    files = integrations.files_beside(_decoder_model(), reference, inputs, "model.onnx")
    assert list(files) == [genai.FILENAME]
    assert '"filename": "model.onnx"' in files[genai.FILENAME]
    assert '"num_hidden_layers": 2' in files[genai.FILENAME]
    assert integrations.files_beside(_decoder_model(), reference, None, "model.onnx") == {}
    linear = torch.nn.Linear(2, 2)
    assert integrations.files_beside(_decoder_model(), linear, inputs, "model.onnx") == {}


def test_facts_and_runtime_steps_of_a_transformers_model():
    family = TransformersFamily()
    config = transformers.MistralConfig(sliding_window=16, use_cache=True)
    assert family.facts(_WithConfig(config)) == {
        "model_type": "mistral",
        "use_cache": True,
        "sliding_window": 16,
        "max_positions": config.max_position_embeddings,
    }
    assert family.facts(torch.nn.Linear(2, 2)) == {}
    # among and after ONNX Runtime's fusions: the soft cap, the sliding layers' whole cache
    steps = integrations.runtime_steps(_WithConfig(config), "onnxruntime")
    assert [(s.name, s.before, s.changes_outputs) for s in steps] == [
        ("sdpa_softcap", "sdpa", False),
        ("whole_window_cache", "packed_qkv_for_gqa", True),
        ("sdpa_softcap_unfused", "packed_qkv_for_gqa", False),
        ("whole_window_cache_names", None, False),
    ]
    assert integrations.runtime_steps(torch.nn.Linear(2, 2), "onnxruntime") == []
    assert integrations.runtime_steps(_WithConfig(config), "tensorrt") == []


def _windowed_model(window: int) -> ir.Model:
    """``present.0.*`` from a GroupQueryAttention of ``local_window_size=window`` reading
    ``past_key_values.0.*`` of the sliding layer's dimension."""
    float_type = ir.TensorType(ir.DataType.FLOAT)
    past = [
        ir.Value(
            name=f"past_key_values.0.{kind}",
            type=float_type,
            shape=ir.Shape(["batch_size", 2, "sliding_past_sequence_length", 16]),
        )
        for kind in ("key", "value")
    ]
    new = ir.Value(
        name="value", type=float_type, shape=ir.Shape(["batch_size", "sequence_length", 32])
    )
    gqa = ir.node(
        "GroupQueryAttention",
        [new, new, new, *past],
        attributes={"num_heads": 2, "kv_num_heads": 2, "local_window_size": window},
        domain="com.microsoft",
        num_outputs=3,
    )
    for value, name in zip(gqa.outputs, ["attention", "present.0.key", "present.0.value"]):
        value.name = name
        value.type = float_type
    gqa.outputs[1].shape = ir.Shape(
        ["batch_size", 2, "sliding_past_sequence_length + sequence_length", 16]
    )
    graph = ir.Graph([new, *past], list(gqa.outputs), nodes=[gqa], opset_imports={"": 20})
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("window", [4, -1])
def test_a_sliding_layers_whole_cache_takes_the_full_layers_names(window):
    from dynamo_onnx.integrations.transformers.whole_cache import WholeWindowCacheNames

    model = _windowed_model(window)
    assert WholeWindowCacheNames()(model).modified == (window > 0)
    past = "past_sequence_length" if window > 0 else "sliding_past_sequence_length"
    assert str(model.graph.inputs[1].shape[2]) == past
    assert str(model.graph.outputs[1].shape[2]) == f"{past} + sequence_length"


def test_a_sliding_cache_is_fed_whole_to_a_model_that_keeps_it_whole():
    """A sliding layer that saw 6 tokens keeps 3 (window 4); fed to a whole-cache model at
    the end of 6 positions, zeros before; the 6 given back are kept as transformers does."""
    config = transformers.MistralConfig(
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        hidden_size=32,
        sliding_window=4,
    )
    cache = transformers.DynamicCache(config=config)
    keys = torch.arange(6.0).reshape(1, 1, 6, 1).expand(1, 2, 6, 16).contiguous()
    cache.update(keys, keys + 100, 0)
    assert cache.layers[0].keys.shape[2] == 3
    bound = {"input_ids": torch.ones(1, 1, dtype=torch.int64), "past_key_values": cache}
    inputs = TransformersFamily().inputs(inspect.signature(_WithConfig.forward), bound)
    assert inputs.flat(bound)["past_key_values_0_key"].shape[2] == 3  # as exported
    assert inputs.for_model(_windowed_model(-1)) is inputs
    whole = inputs.for_model(_windowed_model(4))
    fed = whole.flat(bound)["past_key_values_0_key"]
    assert fed.shape[2] == 6 and fed[0, 0, :, 0].tolist() == [0, 0, 0, 3, 4, 5]
    assert whole.longer_output("present.0.key") == 2 and whole.longer_output("logits") is None
    assert inputs.longer_output("present.0.key") is None
    rebuilt = whole.model_inputs(whole.flat(bound))["past_key_values"]
    assert rebuilt.layers[0].keys[0, 0, :, 0].tolist() == [3, 4, 5]


def test_the_public_cache_dynamic_shapes_comes_from_the_integration():
    from dynamo_onnx.integrations.transformers import dynamic_shapes

    assert dynamo_onnx.cache_dynamic_shapes is dynamic_shapes.cache_dynamic_shapes
    assert dynamo_onnx.cache_dynamic_shapes(_cache()) == [
        {0: "batch_size", 2: "past_sequence_length"}
    ] * (2 * LAYERS)


@pytest.mark.parametrize("window", [None, 4, 5, 6, 7, 8, 9, 16, 4096])
def test_the_example_step_crosses_every_window_with_no_length_near_one(window):
    """export-llm's example step: the default 3 new tokens without a window; with one, a
    total past it and no length (new, past + new) a window, one less or one more."""
    from dynamo_onnx.integrations.transformers import hf_folder

    config = transformers.MistralConfig(
        num_hidden_layers=LAYERS, hidden_size=8, num_attention_heads=2, sliding_window=window
    )
    cache = transformers.DynamicCache(config=config)
    past = hf_folder.PAST
    new = hf_folder.example_new_tokens(cache, past)
    if window is None:
        assert new == hf_folder.NEW
        return
    assert past + new > window
    assert not {new, past + new} & {window - 1, window, window + 1}


def test_a_caches_sliding_layers_as_full_layers_keep_their_tensors_and_grow_whole():
    """The plain fallback's example cache: Gemma 3's sliding layer 0 becomes a full layer
    holding the same tensors (an update then keeps every token, past the window of 4), its
    full layer 1 is the same object; a cache with no sliding layer has no fallback."""
    layers = ["sliding_attention", "full_attention"]
    config = transformers.Gemma3TextConfig(
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        hidden_size=32,
        head_dim=16,
        sliding_window=4,
        layer_types=layers,
    )
    cache = transformers.DynamicCache(config=config)
    past = torch.randn(1, 1, 3, 16)
    for layer in range(2):
        cache.update(past, past + 1, layer)
    full = with_full_layers(cache)
    assert [getattr(layer, "is_sliding", False) for layer in full.layers] == [False, False]
    assert full.layers[0].keys is cache.layers[0].keys and torch.equal(full.layers[0].keys, past)
    assert full.layers[1] is cache.layers[1]
    assert cache.layers[0].is_sliding  # the given cache is not changed
    keys, _ = full.layers[0].update(torch.randn(1, 1, 5, 16), torch.randn(1, 1, 5, 16))
    assert keys.shape[2] == 8 and full.get_seq_length(0) == 8
    plain = transformers.DynamicCache(config=transformers.LlamaConfig(num_hidden_layers=1))
    plain.update(past, past, 0)
    assert with_full_layers(plain) is None
