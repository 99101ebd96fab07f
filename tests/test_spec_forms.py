"""Every dynamic-shape spec form a user writes for a causal LM's KV cache (and for plain
tensors), with and without transformers' pytree registration of the cache; a clear error,
before capture and at the caller's line, for a spec that fits no form or names no input."""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import warnings
from typing import Any

import pytest
import torch
import transformers
from torch.export import Dim

import dynamo_onnx
import hf_models
from conftest import line_of
from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.integrations.transformers import hf_folder
from dynamo_onnx.passes.base import ExportRequest, ExportState
from dynamo_onnx.passes.validate import ValidatePass

#: (batch, new tokens, past): prefill with an empty past, one-token decoding past the
#: sliding window, a few tokens after a short past.
SHAPES = [(1, 4, 0), (3, 1, 7), (2, 5, 2)]


def _cache_parameter(model: torch.nn.Module) -> str:
    """``cache`` from transformers 5.24 on, ``past_key_values`` before."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _inputs(model: transformers.PreTrainedModel, batch: int = 2, new: int = 3, past: int = 4):
    """A decoding step's inputs, as ``export-llm`` builds them (its cache filled at random)."""
    return hf_folder.example_inputs(model, batch, new, past)


def _eager(model, inputs) -> list[torch.Tensor]:
    out = model(**copy.deepcopy(inputs))
    cache = getattr(out, "cache", None) or out.past_key_values
    return [out.logits] + [t for layer in cache.layers for t in (layer.keys, layer.values)]


def _others(batch: Any = "batch", new: Any = "new", total: Any = "total") -> dict[str, Any]:
    return {
        "input_ids": {0: batch, 1: new},
        "attention_mask": {0: batch, 1: total},
        "position_ids": {0: batch, 1: new},
    }


def _per_tensor(model, cache) -> list[dict[int, str]]:
    """One spec per tensor in layer order, with the sliding layers' past named apart."""
    return dynamo_onnx.cache_dynamic_shapes(cache, batch="batch", past="past")


def _spec(model, form: str) -> Any:
    """The spec of ``_inputs(model)`` written in one of the forms users write."""
    inputs = _inputs(model)
    name = _cache_parameter(model)
    cache = inputs[name]
    flat = _per_tensor(model, cache)
    keys, values = flat[0::2], flat[1::2]
    one = {0: "batch", 2: "past"}
    forms: dict[str, Any] = {
        "one-dict": {**_others(), name: one},
        "one-list-of-dims": {**_others(), name: ["batch", None, "past", None]},
        "registration-nesting": {**_others(), name: [keys, values]},
        "flat-per-tensor": {**_others(), name: flat},
        "auto": {
            **_others(Dim.AUTO, Dim.AUTO, Dim.AUTO),
            name: {0: Dim.AUTO, 2: Dim.AUTO},
        },
        "dynamic": {
            **_others(Dim.DYNAMIC, Dim.DYNAMIC, Dim.DYNAMIC),
            name: [[{0: Dim.DYNAMIC, 2: Dim.DYNAMIC}] * len(keys)] * 2,
        },
        "dim-objects": {
            **_others(Dim("batch"), "new", "total"),
            name: {0: Dim("batch"), 2: "past"},
        },
        # the other transformers version's name of the parameter
        "other-name": {
            **_others(),
            ("past_key_values" if name == "cache" else "cache"): [keys, values],
        },
    }
    if form == "positional":  # a tuple in forward's order of the given inputs
        named = {**_others(), name: [keys, values], "use_cache": None}
        bound = inspect.signature(model.forward).bind(**inputs).arguments
        return tuple(named[p] for p in bound)
    return forms[form]


#: Llama's forms that are exported, each with and without the registration.
LLAMA_FORMS = ["one-dict", "auto", "dynamic", "dim-objects"]
#: Llama's forms whose checked request is one-dict's (validation reads them into the same
#: flat spec by the export's inputs, the same dims asked, the same labels): every pass after
#: validation reads the checked request alone, so their export is one-dict's export. Each is
#: validated and compared with one-dict, with and without the registration
#: (test_spellings_of_one_dicts_spec_are_checked_into_its_request); one-dict is exported.
SAME_AS_ONE_DICT = [
    "one-list-of-dims",  # validation reads a tensor's list of dims as the dict it means
    "registration-nesting",
    "flat-per-tensor",
    "other-name",
    "positional",
]
#: The forms every other model is exported with (one with the registration, one without).
OTHER_FORMS = [("registration-nesting", True), ("flat-per-tensor", False)]
#: The models whose cache is Llama's (a DynamicCache of full layers, two of them): a spec
#: is read onto their cache as onto Llama's, so their form without the registration is
#: Llama's path, whose forms are all exported (test_llm_cache exports each of these models
#: with its cache as a leaf and compares it with eager; Mixtral's experts are captured the
#: same whatever the spec's form: a configuration switch, integrations/transformers/
#: experts.py). They are exported with the registration, which torch flattens by model.
#: The sliding-window models (Mistral, Gemma 2) have caches of their own: both forms.
LLAMAS_CACHE = ("qwen2", "phi3", "gpt2", "mixtral")
ONE_FORM = {name: [("registration-nesting", True)] for name in LLAMAS_CACHE}

CASES = [("llama", form, registered) for form in LLAMA_FORMS for registered in (False, True)] + [
    (name, form, registered)
    for name in hf_models.CAUSAL_LMS
    if name != "llama"
    for form, registered in ONE_FORM.get(name, OTHER_FORMS)
]


def test_the_models_exported_in_one_form_have_llamas_cache():
    """What LLAMAS_CACHE says: their cache is Llama's, layer for layer."""

    def layers(name: str) -> list[str]:
        model = hf_models.causal_lm(name)
        return [type(layer).__name__ for layer in _inputs(model)[_cache_parameter(model)].layers]

    assert all(layers(name) == layers("llama") == ["DynamicLayer"] * 2 for name in LLAMAS_CACHE)
    assert {"mistral", "gemma2"} <= set(hf_models.CAUSAL_LMS) - set(LLAMAS_CACHE)


def _id(case) -> str:
    name, form, registered = case
    return f"{name}-{form}-{'registered' if registered else 'leaf'}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_cache_spec_form_exports_a_model_equal_to_eager_at_three_shapes(case):
    name, form, registered = case
    model = hf_models.causal_lm(name)
    with hf_models.registered_cache() if registered else contextlib.nullcontext():
        with warnings.catch_warnings():
            warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)  # a clean export
            program = dynamo_onnx.export(
                model, (), kwargs=_inputs(model), dynamic_shapes=_spec(model, form)
            )
        shapes = {v.name: [str(d) for d in v.shape] for v in program.model.graph.inputs}
        key = shapes["past_key_values.0.key"]
        assert not key[0].isdigit() and not key[2].isdigit(), key  # batch and past dynamic
        if form in ("one-dict", "registration-nesting", "flat-per-tensor", "other-name"):
            assert key[0] == "batch" and key[2] in ("past", "sliding_past"), key
        if form == "one-dict":  # the spelling the dynamic_axes forms are checked into
            assert shapes["past_key_values.1.value"] == ["batch", "2", "past", "8"]
            assert shapes["input_ids"] == ["batch", "new"]  # the caller's names, everywhere
        for shape in SHAPES:
            inputs = _inputs(model, *shape)
            got = program(**copy.deepcopy(inputs))
            want = _eager(model, inputs)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)
    leaves, _ = torch.utils._pytree.tree_flatten(_inputs(model)[_cache_parameter(model)])
    assert len(leaves) == 1  # the registration did not outlive the test


def _checked(
    model, inputs: dict[str, Any], spec: Any = None, **axes: Any
) -> tuple[list[str], dict[str, Any]]:
    """Validation's findings and what of its checked request depends on the spec (given as
    ``dynamic_shapes``, or ``dynamic_axes=`` in ``axes``): the exporter's passes after
    validation read these, never the caller's spelling."""
    ctx = DiagnosticContext()
    request = ExportRequest(model, (), kwargs=inputs, dynamic_shapes=spec, **axes)
    checked = ValidatePass()(ctx, ExportState(request)).checked
    seen = {
        "named_spec": checked.shapes.named,
        "dynamic_shapes": checked.shapes.spec,
        "requested_dims": checked.shapes.requested,
        "declared_dims": checked.shapes.declared,
        "all_dims_dynamic": checked.shapes.everything,
        "input_labels": checked.input_labels,
        "input_names": checked.input_names,
        "family_names": checked.family_inputs.names,
        "bound": {k: (v.shape, v.flatten().tolist()) for k, v in checked.bound.items()},
        "kwargs": checked.kwargs,
    }
    return [f"{f.rule.id} {f.level.name} {f.message}" for f in ctx.findings], seen


@pytest.mark.parametrize("registered", [False, True], ids=["leaf", "registered"])
@pytest.mark.parametrize("form", SAME_AS_ONE_DICT)
def test_spellings_of_one_dicts_spec_are_checked_into_its_request(form, registered):
    """A spelling of one-dict's spec: validation takes it (no finding, none of a warning's
    level) into one-dict's checked request, so it exports one-dict's model, which
    test_every_cache_spec_form_exports_a_model_equal_to_eager_at_three_shapes exports and
    compares with eager."""
    model = hf_models.causal_lm("llama")
    inputs = _inputs(model)
    with hf_models.registered_cache() if registered else contextlib.nullcontext():
        findings, checked = _checked(model, inputs, _spec(model, form))
        one_dict = _checked(model, inputs, _spec(model, "one-dict"))
    assert (findings, checked) == one_dict
    assert not [f for f in findings if "WARNING" in f or "ERROR" in f], findings
    key = [str(d) for d in checked["named_spec"]["past_key_values_0_key"].values()]
    assert key == ["batch", "past"]  # batch and past dynamic, by the caller's names
    leaves, _ = torch.utils._pytree.tree_flatten(_inputs(model)[_cache_parameter(model)])
    assert len(leaves) == 1  # the registration did not outlive the test


def test_none_for_the_cache_keeps_it_static():
    model = hf_models.causal_lm("llama")
    name = _cache_parameter(model)
    spec = {**_others(None), name: None}  # a static cache fixes the batch too
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)
        program = dynamo_onnx.export(model, (), kwargs=_inputs(model), dynamic_shapes=spec)
    shapes = {v.name: [str(d) for d in v.shape] for v in program.model.graph.inputs}
    assert shapes["past_key_values.1.value"] == ["2", "2", "4", "8"]
    assert shapes["input_ids"] == ["2", "new"]
    inputs = _inputs(model, 2, 5, 4)
    for g, w in zip(program(**copy.deepcopy(inputs)), _eager(model, inputs)):
        torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)


def test_a_cache_spec_that_fits_no_form_fails_before_capture_at_the_callers_line():
    model = hf_models.causal_lm("llama")
    name = _cache_parameter(model)
    spec = {**_others(), name: [[{0: "batch", 2: "past"}] * 3] * 2}  # 3 layers: it has 2
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export(model, (), kwargs=_inputs(model), dynamic_shapes=spec)  # marker: call
    message = str(info.value)
    assert message.startswith("[DO131 dynamic-spec-mismatch]")
    assert f'`dynamic_shapes["{name}"]` is a list of 2 lists of 3 dicts of dims' in message
    assert "2 lists of 2 specs (keys, then values" in message
    assert "a flat list of 4 specs" in message
    assert f'dynamic_shapes={{"{name}": {{0: "batch", 2: "past"}}}}' in message  # what to write
    findings = info.value.diagnostics.findings
    assert [f.rule.id for f in findings if f.level.name == "ERROR"] == ["DO131"]  # no DO100
    (finding,) = info.value.diagnostics.by_rule("DO131")
    assert finding.primary.path == __file__
    assert finding.primary.line == line_of(
        test_a_cache_spec_that_fits_no_form_fails_before_capture_at_the_callers_line, "marker: call"
    )
    assert "capture" not in {p.name for p in info.value.diagnostics.passes}


@pytest.mark.parametrize(
    ("entry", "given"),
    [
        ([{0: "batch", 2: "past"}] * 3, "a list of 3 dicts of dims"),
        (Dim.AUTO, "a dim (Dim.AUTO)"),
        ([["batch", None, "past", None]] * 2, "a list of 2 lists of 4 dims"),
    ],
)
def test_other_cache_specs_that_fit_no_form_say_what_was_given(entry, given):
    model = hf_models.causal_lm("qwen2")
    name = _cache_parameter(model)
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="DO131") as info:
        dynamo_onnx.export(model, (), kwargs=_inputs(model), dynamic_shapes={name: entry})
    assert f"is {given}" in str(info.value)


def test_a_tensor_spec_of_the_wrong_rank_is_the_same_error_not_a_capture_failure():
    model, args, kwargs, _ = hf_models.llama()
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes={"input_ids": [{0: "b"}]})
    message = str(info.value)
    assert message.startswith("[DO131 dynamic-spec-mismatch]")
    assert '`dynamic_shapes["input_ids"]` is a list of 1 dict of dims' in message
    assert "a list of 2 dims, for a tensor of shape (2, 7)" in message
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="DO131") as info:
        dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes={0: "batch"})
    assert "`dynamic_shapes` is a dict of dims" in str(info.value)


def test_a_positional_spec_for_plain_inputs_is_taken_as_torch_export_takes_it():
    model, args, kwargs, _ = hf_models.llama()
    program = dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes=({0: "b", 1: "s"},))
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["b", "s"]


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.eval()

    def forward(self, x):
        return x.relu() * 2


@pytest.mark.parametrize(
    "spec",
    [
        {"x": ["b", None]},
        {"x": {0: "b", 1: None}},
        (["b", None],),
        ({0: "b", 1: None},),
        ((torch.export.Dim("b"), None),),
    ],
    ids=["list-by-name", "dict-with-None", "list-by-position", "dict-by-position", "dims"],
)
def test_a_static_dimension_written_none_gives_the_model_asked_and_torch_logs_nothing(spec, caplog):
    """None for a static dimension (torch.onnx's idiom): the same model as leaving it out,
    and none of torch.export's "Using None as a dynamic shape dimension is deprecated"
    records (logging's last resort prints them on the caller's terminal)."""
    with caplog.at_level(logging.DEBUG):
        program = dynamo_onnx.export(_Net(), (torch.randn(3, 4),), dynamic_shapes=spec)
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["b", "4"]
    x = torch.randn(5, 4)
    torch.testing.assert_close(program(x)[0], _Net()(x))
    said = [r.getMessage() for r in caplog.records if r.name == "torch.export.dynamic_shapes"]
    assert not said and not [m for m in caplog.messages if "deprecated" in m], said


def test_a_dynamic_axes_key_that_is_no_input_or_output_is_an_error():
    x = torch.randn(3, 4)
    names = {"input_names": ["input"], "output_names": ["output"]}
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export(_Net(), (x,), dynamic_axes={"inptu": {0: "batch"}}, **names)  # here
    message = str(info.value)
    assert message.startswith("[DO132 dynamic-spec-unknown-name]")
    assert "`dynamic_axes` has the key `inptu`" in message
    assert "(did you mean `input`?)" in message and "`input`, `output`" in message
    (finding,) = info.value.diagnostics.by_rule("DO132")
    assert finding.primary.line == line_of(
        test_a_dynamic_axes_key_that_is_no_input_or_output_is_an_error, "# here"
    )
    axes = {"input": {0: "batch"}, "outptu": {0: "batch"}}
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="did you mean `output`"):
        dynamo_onnx.export(_Net(), (x,), dynamic_axes=axes, **names)
    # torch.onnx fails on it too
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match="dynamic_axes"):
        warnings.simplefilter("ignore")  # its advice to use dynamic_shapes
        torch.onnx.export(_Net(), (x,), dynamic_axes={"inptu": {0: "batch"}}, dynamo=True, **names)


def test_dynamic_axes_keys_naming_outputs_are_a_note_and_inputs_stay_dynamic():
    names = {"input_names": ["input"], "output_names": ["output"]}
    axes = {"input": {0: "batch"}, "output": {0: "batch"}}
    program = dynamo_onnx.export(_Net(), (torch.randn(3, 4),), dynamic_axes=axes, **names)
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["batch", "4"]
    (note,) = program.diagnostics.by_rule("DO111")
    assert "'output'" in note.message


def test_without_output_names_a_key_that_is_no_input_says_so():
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export(_Net(), (torch.randn(3, 4),), dynamic_axes={"y": {0: "batch"}})
    assert "output_names is not given" in str(info.value) and "`x`" in str(info.value)


def test_a_dynamic_shapes_key_that_names_no_input_is_an_error():
    model, args, kwargs, _ = hf_models.llama()
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError) as info:
        dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes={"inputs_ids": {0: "b"}})
    message = str(info.value)
    assert message.startswith("[DO132 dynamic-spec-unknown-name]")
    assert "`dynamic_shapes` has the key `inputs_ids`" in message
    assert "did you mean `input_ids`?" in message
    # an input_names entry is not a parameter name: the message says which to use
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="input_names") as info:
        dynamo_onnx.export(
            _Net(),
            (torch.randn(3, 4),),
            input_names=["features"],
            dynamic_shapes={"features": {0: "b"}},
        )


def test_a_cache_is_keyed_in_dynamic_axes_by_its_onnx_names_or_its_parameter():
    """``dynamic_axes`` naming the cache by its parameter or by its ONNX names: validation
    takes either (no finding) into one-dict's checked request, so it exports one-dict's
    model, which test_every_cache_spec_form_exports_a_model_equal_to_eager_at_three_shapes
    exports (``past_key_values.1.value`` is ``["batch", "2", "past", "8"]``) and compares
    with eager at three shapes, (3, 1, 7) among them."""
    model = hf_models.causal_lm("llama")
    name = _cache_parameter(model)
    inputs = _inputs(model)
    others = {k: {i: str(v) for i, v in d.items()} for k, d in _others().items()}
    one_dict = _checked(model, inputs, _spec(model, "one-dict"))
    for cache_axes in (
        {name: {0: "batch", 2: "past"}},
        {
            f"past_key_values.{i}.{kv}": {0: "batch", 2: "past"}
            for i in (0, 1)
            for kv in ("key", "value")
        },
    ):
        findings, checked = _checked(model, inputs, dynamic_axes={**others, **cache_axes})
        assert (findings, checked) == one_dict
        assert not [f for f in findings if "WARNING" in f or "ERROR" in f], findings
        value = [str(d) for d in checked["named_spec"]["past_key_values_1_value"].values()]
        assert value == ["batch", "past"]


def test_a_spec_beside_an_exported_program_is_reported_not_dropped():
    x = torch.randn(3, 4)
    static = torch.export.export(_Net(), (x,))
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning, match="DO111"):
        program = dynamo_onnx.export(static, (x,), dynamic_shapes={"x": {0: "batch"}})
    (finding,) = program.diagnostics.by_rule("DO111")
    assert finding.level.name == "WARNING"
    assert "`x` dim 0 static" in finding.message
    assert "pass dynamic_shapes to torch.export.export" in finding.message
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["3", "4"]
    dynamic = torch.export.export(_Net(), (x,), dynamic_shapes={"x": {0: Dim("batch")}})
    for given in ({"dynamic_shapes": {"x": {0: "batch"}}}, {"dynamic_axes": {"x": [0]}}):
        program = dynamo_onnx.export(dynamic, (x,), **given)
        (finding,) = program.diagnostics.by_rule("DO111")
        assert finding.level.name == "NOTE"  # the program has that dim dynamic already
        assert "fixed when torch.export.export captured it" in finding.message
    with pytest.warns(dynamo_onnx.DynamoOnnxWarning, match="`input` dim 0 static"):
        dynamo_onnx.export(static, (x,), input_names=["input"], dynamic_axes={"input": [0]})


def _collection(inputs: dict[str, Any], name: str) -> torch.export.ShapesCollection:
    """torch.export's spec by tensor: every input's batch and length, the cache's tensors'."""
    collection = torch.export.ShapesCollection()
    for key in ("input_ids", "attention_mask", "position_ids"):
        collection[inputs[key]] = {0: Dim.AUTO, 1: Dim.AUTO}
    for layer in inputs[name].layers:
        collection[layer.keys] = {0: Dim.AUTO, 2: Dim.AUTO}
        collection[layer.values] = {0: Dim.AUTO, 2: Dim.AUTO}
    return collection


def test_a_shapes_collection_is_taken_for_plain_inputs_and_for_a_registered_cache():
    model, args, kwargs, _ = hf_models.llama()
    plain = torch.export.ShapesCollection()
    plain[args[0]] = {0: Dim.AUTO, 1: Dim.AUTO}
    program = dynamo_onnx.export(model, args, kwargs=kwargs, dynamic_shapes=plain)
    assert [str(d) for d in program.model.graph.inputs[0].shape] == [
        "input_ids_dim_0",
        "input_ids_dim_1",
    ]
    model = hf_models.causal_lm("llama")
    name = _cache_parameter(model)
    inputs = _inputs(model)
    with pytest.raises(dynamo_onnx.InvalidExportOptionsError, match="DO131") as info:
        dynamo_onnx.export(model, (), kwargs=inputs, dynamic_shapes=_collection(inputs, name))
    assert "ShapesCollection that finds no tensor of the cache" in str(info.value)
    with (
        hf_models.registered_cache()
    ):  # there, torch.export finds the cache's tensors: the nesting form
        program = dynamo_onnx.export(
            model, (), kwargs=inputs, dynamic_shapes=_collection(inputs, name)
        )
        other = _inputs(model, 3, 1, 7)
        for g, w in zip(program(**copy.deepcopy(other)), _eager(model, other)):
            torch.testing.assert_close(g, w.detach(), atol=1e-4, rtol=1e-4)


def _dynamic_cache(layers: int, past: int = 4) -> transformers.DynamicCache:
    cache = transformers.DynamicCache()
    for layer in range(layers):
        cache.update(torch.randn(2, 2, past, 8), torch.randn(2, 2, past, 8), layer)
    return cache


def test_each_cache_form_gives_every_tensor_its_spec_in_layer_order():
    from dynamo_onnx.integrations.transformers.spec_forms import cache_specs
    from dynamo_onnx.specs.messages import SpecMismatch

    cache = _dynamic_cache(3)
    k = [{0: "b", 2: f"k{i}"} for i in range(3)]
    v = [{0: "b", 2: f"v{i}"} for i in range(3)]
    flat = [k[0], v[0], k[1], v[1], k[2], v[2]]
    assert cache_specs([k, v], cache) == flat  # transformers' registration nesting
    assert cache_specs(tuple(flat), cache) == flat  # onnx-diagnostic's order
    assert cache_specs(k[0], cache) == [k[0]] * 6  # one for all
    assert cache_specs(["b", None, "p", None], cache) == [["b", None, "p", None]] * 6
    assert cache_specs(None, cache) == [None] * 6
    for wrong in ([k, v[:2]], flat[:4], {0: "b", 4: "p"}, [["b", None, "p", None]] * 2):
        with pytest.raises(SpecMismatch):
            cache_specs(wrong, cache)
    both = transformers.EncoderDecoderCache(_dynamic_cache(2), _dynamic_cache(2, past=16))
    mine = [{0: "b", 2: "past"}] * 4
    cross = [{0: "b", 2: "encoder"}] * 4
    # self-attention then cross-attention, each in a cache's forms -> layer 0's four first
    assert cache_specs([mine, {0: "b", 2: "encoder"}], both) == [
        *mine[:2],
        *cross[:2],
        *mine[2:],
        *cross[2:],
    ]


def _all_dims(model, form: str) -> dict[str, Any]:
    """docs/llm.md's spec written with ``torch.export.Dim`` objects only, the cache in
    ``form``: ``total`` unbounded where the model needs it at least 4 (torch.export's fix)."""
    batch, new, past, total = Dim("batch"), Dim("new"), Dim("past"), Dim("total")
    name = _cache_parameter(model)
    one = {0: batch, 2: past}
    layers = model.config.num_hidden_layers
    cache = {
        "one-dict": one,
        "registration-nesting": [[one] * layers, [one] * layers],
        "flat-per-tensor": [one] * (2 * layers),
    }[form]
    return {**_others(batch, new, total), name: cache}


@pytest.mark.parametrize("form", ["one-dict", "registration-nesting"])
def test_the_spec_do125_suggests_is_one_the_same_call_takes(form):
    """DO125 gives the spec the export used by the caller's parameters (the cache under
    its own), not by the export's flat inputs (``past_key_values_0_key``, which the same
    call rejects with DO132): pasted back, it exports with no finding on the spec."""
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**{**hf_models.DECODER, "use_cache": True})
    ).eval()
    inputs = _inputs(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dynamo_onnx.DynamoOnnxWarning)
        first = dynamo_onnx.export(model, (), kwargs=inputs, dynamic_shapes=_all_dims(model, form))
    (refined,) = first.diagnostics.by_rule("DO125")
    text = refined.message.rpartition("dynamic_shapes=")[2].removesuffix(".")
    suggested = eval(text, {"Dim": Dim})  # what the user pastes  # the test's own text
    parameters = {"input_ids", "attention_mask", "position_ids", _cache_parameter(model)}
    assert set(suggested) == parameters
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo_onnx.DynamoOnnxWarning)  # no DO125 again
        again = dynamo_onnx.export(model, (), kwargs=inputs, dynamic_shapes=suggested)
    ids = {f.rule.id for f in again.diagnostics.findings}
    assert not ids & {"DO125", "DO131", "DO132"}, ids
    assert [str(v.shape) for v in again.model.graph.inputs] == [
        str(v.shape) for v in first.model.graph.inputs
    ]
