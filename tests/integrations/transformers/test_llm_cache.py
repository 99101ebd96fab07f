"""Causal LMs exported with their KV cache as transformers passes it (a ``DynamicCache``), with
no registration: named as onnxruntime-genai names them, one model for prefill (past 0) and
decoding, equal to eager at several shapes, and generating transformers' greedy tokens."""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers
from torch.export import pytree

import dynamo_onnx
import hf_models
from sarif_tools import ROOT  # the top of the checkout

_spec = importlib.util.spec_from_file_location(
    "llm_generate", ROOT / "examples" / "llm_generate.py"
)
llm_generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llm_generate)


def _model(name: str) -> transformers.PreTrainedModel:
    return hf_models.causal_lm(name)


MODELS = ["llama", "qwen2", "mistral", "gemma2", "phi3", "gpt2"]
#: (batch, new tokens, past): prefill with an empty past, one-token decoding past the
#: sliding window, a few tokens after a short past.
SHAPES = [(1, 4, 0), (3, 1, 7), (2, 5, 2)]


def _expected(model, inputs):
    out = model(**copy.deepcopy(inputs))
    layers = llm_generate.output_cache(out).layers
    return [out.logits] + [t for layer in layers for t in (layer.keys, layer.values)]


@pytest.fixture(scope="module")
def exports():
    """name -> (model, ``export(model, (), kwargs=example_inputs(model), verify=True)``), the
    call a user writes, made once per model for every test that reads, saves or runs its
    program (an LLM's export is most of such a test's time; saving adds findings and files,
    never changes the model). The export issues no warning at all and leaves the caller's
    cache as it was. Each call leaves torch's random generator as the export left it, so a
    test draws the same prompt whichever test exported first (the model is built from seed 0)."""
    made: dict[str, tuple[transformers.PreTrainedModel, dynamo_onnx.ONNXProgram, torch.Tensor]]
    made = {}

    def get(name: str) -> tuple[transformers.PreTrainedModel, dynamo_onnx.ONNXProgram]:
        if name not in made:
            model = _model(name).eval()
            inputs = llm_generate.example_inputs(model)
            cache = inputs[llm_generate.cache_parameter(model)]
            before = [t.clone() for layer in cache.layers for t in (layer.keys, layer.values)]
            with warnings.catch_warnings():
                warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)  # no warning
                program = dynamo_onnx.export(model, (), kwargs=inputs, verify=True)
            after = [t for layer in cache.layers for t in (layer.keys, layer.values)]
            assert all(torch.equal(a, b) for a, b in zip(before, after)), "the cache changed"
            made[name] = model, program, torch.get_rng_state()
        model, program, state = made[name]
        torch.set_rng_state(state)
        return model, program

    return get


@pytest.fixture(scope="module", params=MODELS)
def exported(request, exports):
    model, program = exports(request.param)
    return request.param, model, program


def test_the_cache_is_taken_as_it_is_and_named_as_runtimes_expect(exported):
    name, model, program = exported
    layers = model.config.num_hidden_layers
    names = [f"{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    graph = program.model.graph
    given = {"input_ids", "attention_mask", "position_ids", "past_key_values", "cache"}
    expected = []
    for parameter in inspect.signature(model.forward).parameters:  # forward's order
        if parameter in ("past_key_values", "cache"):
            expected += [f"past_key_values.{n}" for n in names]
        elif parameter in given:
            expected.append(parameter)
    assert [v.name for v in graph.inputs] == expected
    assert [v.name for v in graph.outputs] == ["logits", *(f"present.{n}" for n in names)]
    inputs = {v.name: v for v in graph.inputs}
    assert [str(d) for d in inputs["input_ids"].shape] == ["batch_size", "sequence_length"]
    assert [str(d) for d in inputs["attention_mask"].shape] == [
        "batch_size",
        "total_sequence_length",
    ]
    past = str(inputs["past_key_values.0.key"].shape[2])
    assert past in ("past_sequence_length", "sliding_past_sequence_length")
    (match,) = program.diagnostics.by_rule("DO602")
    assert match.properties["on_values"] == 1 + 2 * layers  # compared on values, not shapes
    assert "forward" not in model.__dict__  # the flat forward was the export's only


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "batch{}-new{}-past{}".format(*s))
def test_logits_and_presents_match_eager(exported, shape):
    _, model, program = exported
    inputs = llm_generate.example_inputs(model, *shape)
    got = program(**inputs)
    want = _expected(model, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)


def test_nothing_global_is_registered_for_the_cache(exported):
    _, model, _ = exported
    cache = llm_generate.example_inputs(model)[llm_generate.cache_parameter(model)]
    leaves, _ = pytree.tree_flatten(cache)
    assert leaves == [cache]  # still a leaf: no pytree registration left behind


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma2", "gpt2", "mixtral"])
def test_greedy_generation_with_onnx_runtime_alone_matches_transformers(name, tmp_path, exports):
    model, program = exports(name)
    program.save(tmp_path / "model.onnx")
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    prompt = torch.randint(1, 100, (2, 5))
    tokens = llm_generate.generate(session, prompt.numpy(), 8)
    eager = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=8,
        min_new_tokens=8,
        do_sample=False,
    )
    np.testing.assert_array_equal(tokens, eager[:, 5:].numpy())


def test_the_example_runs(tmp_path):
    llm_generate.main(str(tmp_path))
    assert (tmp_path / "llama.onnx").exists()


def _whisper_inputs(model, batch: int, new: int, past: int) -> dict:
    """One decoder step of Whisper: encoder states, an encoder-decoder cache (self-attention
    grows, cross-attention holds the encoder's 16 frames)."""
    self_attention, cross_attention = transformers.DynamicCache(), transformers.DynamicCache()
    for layer in range(2):
        self_attention.update(
            torch.randn(batch, 2, past, 16), torch.randn(batch, 2, past, 16), layer
        )
        cross_attention.update(torch.randn(batch, 2, 16, 16), torch.randn(batch, 2, 16, 16), layer)
    return {
        "encoder_outputs": (torch.randn(batch, 16, 32),),
        "decoder_input_ids": torch.randint(1, 100, (batch, new)),
        llm_generate.cache_parameter(model): transformers.EncoderDecoderCache(
            self_attention, cross_attention
        ),
        "use_cache": True,
    }


def test_whisper_takes_its_encoder_decoder_cache_and_encoder_states_as_inputs():
    config = transformers.WhisperConfig(
        **{**hf_models.WHISPER, "max_source_positions": 16, "use_cache": True}
    )
    model = transformers.WhisperForConditionalGeneration(config).eval()
    program = dynamo_onnx.export(model, (), kwargs=_whisper_inputs(model, 2, 3, 4), verify=True)
    names = [v.name for v in program.model.graph.inputs]
    assert names[:3] == ["decoder_input_ids", "encoder_outputs.0", "past_key_values.0.decoder.key"]
    assert "past_key_values.1.encoder.value" in names
    outputs = [v.name for v in program.model.graph.outputs]
    assert outputs[:3] == ["logits", "present.0.decoder.key", "present.0.decoder.value"]
    assert not program.model.graph.initializers.get("encoder_last_hidden_state")  # an input
    for shape in [(1, 1, 0), (3, 2, 5), (2, 4, 1)]:
        inputs = _whisper_inputs(model, *shape)
        got = program(**inputs)
        out = model(**copy.deepcopy(inputs))
        cache = llm_generate.output_cache(out)
        want = [out.logits]
        for i in range(2):
            for side in (cache.self_attention_cache, cache.cross_attention_cache):
                want += [side.layers[i].keys, side.layers[i].values]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)


def _session(program, tmp_path, name: str) -> ort.InferenceSession:
    program.save(tmp_path / f"{name}.onnx")
    path = str(tmp_path / f"{name}.onnx")
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def test_whisper_generates_transformers_greedy_tokens_with_onnx_runtime_alone(tmp_path):
    """Whisper as Optimum ships it: the encoder, a first decoder step that computes the
    cross-attention cache from the encoder's states, and a decoding step that takes both
    caches; greedy decoding with the three ONNX models gives ``model.generate``'s tokens."""
    config = transformers.WhisperConfig(
        **{**hf_models.WHISPER, "max_source_positions": 16, "use_cache": True, "init_std": 0.2}
    )
    torch.manual_seed(0)  # weights large enough that greedy tokens vary
    model = transformers.WhisperForConditionalGeneration(config).eval()
    features = torch.randn(2, 16, 32)
    start = torch.full((2, 1), config.decoder_start_token_id)
    states = model.model.encoder(features).last_hidden_state
    encoder = dynamo_onnx.export(
        model.model.encoder,
        (features,),
        dynamic_shapes=({0: "batch_size"},),
        output_names=["last_hidden_state"],
    )
    first = dynamo_onnx.export(
        model,
        (),
        kwargs={"encoder_outputs": (states,), "decoder_input_ids": start, "use_cache": True},
    )
    step = dynamo_onnx.export(model, (), kwargs=_whisper_inputs(model, 2, 1, 3))
    assert [v.name for v in first.model.graph.inputs] == ["decoder_input_ids", "encoder_outputs.0"]
    sessions = {
        name: _session(program, tmp_path, name)
        for name, program in [("encoder", encoder), ("first", first), ("step", step)]
    }

    (hidden,) = sessions["encoder"].run(None, {"input_features": features.numpy()})
    ids = start.numpy()
    names = [o.name for o in sessions["first"].get_outputs()]
    result = dict(
        zip(
            names,
            sessions["first"].run(None, {"decoder_input_ids": ids, "encoder_outputs.0": hidden}),
        )
    )
    tokens = []
    for _ in range(8):
        ids = result["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        tokens.append(ids)
        past = {
            name.replace("present.", "past_key_values."): value
            for name, value in result.items()
            if name.startswith("present.")
        }
        feeds = {"decoder_input_ids": ids, "encoder_outputs.0": hidden, **past}
        wanted = [i.name for i in sessions["step"].get_inputs()]
        names = [o.name for o in sessions["step"].get_outputs()]
        result = dict(zip(names, sessions["step"].run(None, {k: feeds[k] for k in wanted})))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # generate's notes on its own defaults
        eager = model.generate(features, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    np.testing.assert_array_equal(np.concatenate(tokens, axis=1), eager[:, -8:].numpy())
    assert len(set(eager.flatten().tolist())) > 2  # not one token repeated


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_onnxruntime_genai_generates_transformers_tokens_from_the_saved_folder(
    name, tmp_path, exports
):
    """Saving a causal LM exported with its cache also writes genai_config.json: the folder
    runs in onnxruntime-genai as it is."""
    og = pytest.importorskip("onnxruntime_genai")
    model, program = exports(name)
    program.save(tmp_path / "model.onnx")
    config = json.loads((tmp_path / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert config["model"]["type"] == name and decoder["filename"] == "model.onnx"
    assert decoder["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert (decoder["num_hidden_layers"], decoder["num_key_value_heads"]) == (2, 2)
    prompt = torch.randint(3, 100, (1, 5))
    genai_model = og.Model(str(tmp_path))
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=13, do_sample=False)
    generator = og.Generator(genai_model, params)
    generator.append_tokens(prompt.numpy().astype(np.int32))
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    eager = model.generate(prompt, max_new_tokens=8, do_sample=False)[0, 5:].tolist()
    assert tokens == eager  # both stop at the same end-of-sequence token, if one comes


def test_a_model_exported_without_a_cache_saves_no_genai_config(tmp_path):
    model = _model("llama").eval()
    ids = torch.randint(1, 100, (2, 5))
    program = dynamo_onnx.export(model, (ids,), kwargs={"use_cache": False})
    program.save(tmp_path / "model.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


@pytest.mark.parametrize("name", ["gemma2", "mistral"])
def test_a_sliding_window_model_saves_no_genai_config_and_says_why(name, tmp_path, exports):
    """Unfused, a sliding layer's present is its window; onnxruntime-genai would refuse the
    folder. A note at save says so and names the option that writes it."""
    _, program = exports(name)
    before = len(program.diagnostics.by_rule("DO415"))
    program.save(tmp_path / "model.onnx")
    assert not (tmp_path / "genai_config.json").exists()
    notes = program.diagnostics.by_rule("DO415")
    assert len(notes) == before + 1
    note = notes[-1]
    assert note.level.name == "NOTE"
    assert note.message.startswith(f"`genai_config.json` is not written beside {tmp_path}")
    assert "their last window - 1 tokens as their present" in note.message
    assert '`optimize="onnxruntime"`' in note.message
    program.save(tmp_path / "again.onnx", external_data=True)  # every save says it
    assert len(program.diagnostics.by_rule("DO415")) == before + 2


def test_a_model_with_a_full_cache_saves_its_genai_config_without_a_note(tmp_path, exports):
    _, program = exports("llama")
    program.save(tmp_path / "model.onnx")
    assert (tmp_path / "genai_config.json").exists()
    assert not program.diagnostics.by_rule("DO415")


def test_a_model_that_makes_its_own_cache_returns_it_as_presents():
    """``use_cache=True`` and no past: transformers creates the cache inside forward (from an
    empty constant torch.export lifts); its tensors are outputs named as runtimes expect."""
    model = _model("llama").eval()
    ids = torch.randint(1, 100, (2, 5))
    program = dynamo_onnx.export(
        model,
        (ids,),
        kwargs={"use_cache": True},
        dynamic_shapes={"input_ids": {0: "batch", 1: "sequence"}},
    )
    assert [v.name for v in program.model.graph.outputs] == [
        "logits",
        "present.0.key",
        "present.0.value",
        "present.1.key",
        "present.1.value",
    ]
    other = torch.randint(1, 100, (3, 4))
    got = program(other, use_cache=True)
    out = model(other, use_cache=True)
    torch.testing.assert_close(got[0], out.logits.detach(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], llm_generate.output_cache(out).layers[0].keys.detach())


def _mixtral() -> transformers.MixtralForCausalLM:
    return hf_models.causal_lm("mixtral")


def test_a_mixture_of_experts_model_exports_with_its_cache_and_matches_eager(exports):
    assert _mixtral().config._experts_implementation == "grouped_mm"  # before an export
    model, program = exports("mixtral")
    assert model.config._experts_implementation == "grouped_mm"  # put back
    (note,) = program.diagnostics.by_rule("DO130")
    assert "transformers::grouped_mm_fallback" in note.message and "(2)" in note.message
    for shape in [(1, 4, 0), (3, 1, 7)]:
        inputs = llm_generate.example_inputs(model, *shape)
        got = program(**inputs)
        want = _expected(model, inputs)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)


def test_a_registered_function_for_the_experts_operator_wins():
    from onnxscript import opset18 as op

    def grouped_mm(x, weight, offs):  # a stand-in: the test checks it is the one used
        return op.MatMul(x, op.Gather(weight, op.Constant(value_int=0), axis=0))

    registry = dynamo_onnx.OnnxRegistry()
    registry.register_op(grouped_mm, "transformers", "grouped_mm_fallback")
    model = _mixtral()
    program = dynamo_onnx.export(
        model, (), kwargs=llm_generate.example_inputs(model), registry=registry
    )
    assert not program.diagnostics.by_rule("DO130")
    used = {f.properties.get("op") for f in program.diagnostics.by_rule("DO304")}
    assert "transformers::grouped_mm_fallback" in used


def test_a_one_token_example_with_batch_one_and_an_empty_past_still_gives_a_dynamic_model():
    """torch.export would fix sizes 0 and 1: the example is widened (notes say so), and the
    model runs at every shape."""
    model = _model("llama").eval()
    program = dynamo_onnx.export(model, (), kwargs=llm_generate.example_inputs(model, 1, 1, 0))
    widened = {
        (f.properties["input"], f.properties["dim"]) for f in program.diagnostics.by_rule("DO129")
    }
    assert widened == {("input_ids", 0), ("input_ids", 1), ("past_key_values.0.key", 2)}
    for shape in SHAPES:
        inputs = llm_generate.example_inputs(model, *shape)
        for g, w in zip(program(**inputs), _expected(model, inputs)):
            torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)


def test_a_program_captured_with_the_cache_registered_exports_despite_torchs_lost_constants():
    """With transformers' own pytree registration (for the test only:
    hf_models.registered_cache), the program starts each layer from an empty lifted constant
    that run_decompositions loses (torch fails); the export reads the constant instead."""
    model = llm_generate.small_llama()
    inputs = llm_generate.example_inputs(model)
    with hf_models.registered_cache(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, (), kwargs=inputs, strict=False)
        with pytest.raises(Exception) as torchs:  # what this works around
            ep.run_decompositions()
        assert type(torchs.value).__name__ == "SpecViolationError"
        program = dynamo_onnx.export(ep, (), kwargs=inputs)
        got = program(**copy.deepcopy(inputs))  # the cache flattened as torch.export did
    # named as when the model itself is exported, not past_key_values_key_cache_0, linear_14
    assert [v.name for v in program.model.graph.inputs] == [
        "input_ids",
        "attention_mask",
        "position_ids",
        "past_key_values.0.key",
        "past_key_values.1.key",
        "past_key_values.0.value",
        "past_key_values.1.value",
    ]
    assert [v.name for v in program.model.graph.outputs] == [
        "logits",
        "present.0.key",
        "present.1.key",
        "present.0.value",
        "present.1.value",
    ]
    out = model(**copy.deepcopy(inputs))
    layers = llm_generate.output_cache(out).layers
    want = [out.logits] + [layer.keys for layer in layers] + [layer.values for layer in layers]
    assert len(got) == len(want) == 5
    assert all(torch.allclose(g, w, atol=1e-4) for g, w in zip(got, want))
    leaves, _ = pytree.tree_flatten(inputs[llm_generate.cache_parameter(model)])
    assert len(leaves) == 1  # the registration did not outlive the test


def test_an_llm_export_prints_nothing_of_torch_onnx_ir_or_onnx_runtime(capfd):
    """Gemma 2 made onnx_ir warn ("Attribute type is ambiguous"), torch warn about LeafSpec;
    the terminal shows our findings only, and this export has none."""
    model = _model("gemma2").eval()
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # shown even if another test already triggered it
        dynamo_onnx.export(model, (), kwargs=llm_generate.example_inputs(model))
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
