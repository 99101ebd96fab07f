"""ShapeRequest alone: every spelling of one request gives one value, and each operation
capture applies to it (widen, drop a dimension, refine from torch's fixes) on hand-built
inputs. No capture, no export: the unit lane."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from torch.export import Dim

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.integrations import families
from dynamo_onnx.specs import (
    ShapeRequest,
    SpecMismatch,
    Spelling,
    UnknownSpecName,
    forms,
    spellings,
)

AUTO = Dim.AUTO


def _bound() -> dict[str, torch.Tensor]:
    return {"x": torch.arange(8.0).reshape(2, 4), "mask": torch.ones(2, 1)}


def _fields(request: ShapeRequest) -> tuple:
    return (request.spec, request.named, dict(request.requested), request.declared)


@pytest.mark.parametrize(
    "spec",
    [
        {"x": {0: "batch"}},
        {"x": ["batch", None]},
        {"x": ("batch", None)},
        {"x": {0: "batch", 1: None}},
        {"x": {0: "batch"}, "mask": None},
    ],
    ids=["dict", "list", "tuple", "dict-with-static", "other-input-none"],
)
def test_each_spelling_of_a_named_dim_gives_one_request(spec):
    request = ShapeRequest.build(spec, _bound(), spelling=Spelling.DYNAMIC_SHAPES)
    assert _fields(request) == (
        {"x": {0: AUTO}, "mask": None},  # every input named: torch.export wants them all
        {"x": {0: "batch"}, **({"mask": None} if "mask" in spec else {})},
        {("x", 0): 2},
        frozenset({("x", 0)}),
    )
    assert not request.everything and request.inputs == ("x", "mask")


def test_torch_onnx_dynamic_axes_give_the_request_dynamic_shapes_gives():
    """``dynamic_axes={"x": {0: "batch"}}`` (by ONNX name) and ``dynamic_shapes={"x": {0:
    "batch"}}``: one request; a list of axes gets torch.onnx's default names."""
    inputs = {"x": ["x"], "input_0": ["x"], "mask": ["mask"]}
    for axes in ({"x": {0: "batch"}}, {"input_0": {0: "batch"}}):
        spec, others = spellings.from_dynamic_axes(axes, inputs)
        assert not others
        by_axes = ShapeRequest.build(spec, _bound(), spelling=Spelling.DYNAMIC_AXES)
        by_shapes = ShapeRequest.build({"x": {0: "batch"}}, _bound())
        assert _fields(by_axes) == _fields(by_shapes)
        assert by_axes.spelling == "dynamic_axes" and by_shapes.spelling is None
    spec, others = spellings.from_dynamic_axes({"x": [0, 1], "logits": [0]}, inputs)
    assert spec == {"x": {0: "x_dim_0", 1: "x_dim_1"}} and others == ["logits"]


def test_both_spellings_of_every_dimension_dynamic_give_one_request():
    spelled = ShapeRequest.build(True, _bound(), spelling=Spelling.EVERY_DIM)
    optioned = ShapeRequest.build(None, _bound(), spelling=Spelling.EXPORT_OPTIONS)
    unsaid = ShapeRequest.build(True, _bound())  # ``True`` says it alone
    assert _fields(spelled) == _fields(optioned) == _fields(unsaid)
    assert spelled.everything and optioned.everything and not spelled.declared
    assert unsaid.spelling == Spelling.EVERY_DIM and unsaid.everything
    assert optioned.spelling == "ExportOptions.dynamic_shapes"
    assert spelled.spec == {"x": {0: AUTO, 1: AUTO}, "mask": {0: AUTO, 1: AUTO}}
    assert dict(spelled.requested) == {("x", 0): 2, ("x", 1): 4, ("mask", 0): 2, ("mask", 1): 1}
    assert spelled.size_one() == []  # the model may keep them static: nothing to widen


def test_dim_objects_keep_their_strict_meaning_and_static_dims_are_not_requested():
    batch = Dim("batch", max=64)
    request = ShapeRequest.build({"x": {0: batch, 1: Dim.STATIC}}, _bound())
    assert request.spec["x"] == {0: batch, 1: Dim.STATIC}
    assert dict(request.requested) == {("x", 0): 2}


def test_a_spec_by_position_stays_by_position_and_reads_by_name():
    request = ShapeRequest.build(({0: "batch"}, None), _bound())
    assert request.spec == ({0: AUTO}, None) and request.named == ({0: "batch"}, None)
    assert request.by_name(request.spec) == {"x": {0: AUTO}, "mask": None}
    assert request.by_name(request.named) == {"x": {0: "batch"}, "mask": None}
    assert request.by_name(None) is None
    assert dict(request.requested) == {("x", 0): 2}


def test_the_request_is_frozen_and_says_who_asked_and_where():
    where = Location("model.py", 12, "main")
    request = ShapeRequest.build({"x": {0: "batch"}}, _bound(), location=where)
    assert request.location == where
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.spec = None  # type: ignore[misc]


@pytest.mark.parametrize(
    "spec",
    [
        {"x": {0: Dim("batch", min=3, max=64)}},
        {"x": [Dim("batch", min=3, max=64), None]},
        ({0: Dim("batch", min=3, max=64)}, None),
    ],
    ids=["dict", "list", "by-position"],
)
def test_asked_range_reads_the_dims_range_whichever_spelling(spec):
    request = ShapeRequest.build(spec, _bound())
    assert request.asked_range("x", 0) == (3, 64)
    assert request.asked_range("x", 1) == (2, None)  # not asked: torch's [2, inf)
    assert request.asked_range("mask", 0) == (2, None)
    assert ShapeRequest.build({"x": {0: Dim("b")}}, _bound()).asked_range("x", 0) == (2, None)


@pytest.mark.parametrize(
    "spec",
    [
        {"x": {0: "batch"}},
        {"x": ["batch", None]},
        {"x": {0: Dim("batch")}},
        ({0: "batch"}, None),
    ],
    ids=["string", "list", "Dim", "by-position"],
)
def test_names_are_the_callers_whichever_spelling(spec):
    assert ShapeRequest.build(spec, _bound()).names() == {("x", 0): "batch"}


def test_names_of_tensors_a_parameter_holds_and_of_dynamic_axes():
    caches = {"caches": [torch.ones(2, 3), torch.ones(2, 3)]}
    request = ShapeRequest.build({"caches": [{0: "batch"}, {0: "batch", 1: "past"}]}, caches)
    assert request.names() == {
        ("caches_0", 0): "batch",
        ("caches_1", 0): "batch",
        ("caches_1", 1): "past",
    }
    spec, _ = spellings.from_dynamic_axes({"x": [0]}, {"x": ["x"]})
    assert ShapeRequest.build(spec, _bound()).names() == {("x", 0): "x_dim_0"}
    assert ShapeRequest.build(True, _bound()).names() == {}  # Dim.AUTO: no name given


def test_size_one_lists_the_declared_dims_whose_example_is_one():
    request = ShapeRequest.build({"x": {0: "batch"}, "mask": {0: "batch", 1: "n"}}, _bound())
    assert request.size_one() == [("mask", 1)]
    assert request.example("mask", 1) == 1 and request.example("x", 1) == 1
    assert request.example("x", 0) == 2


def test_widen_repeats_the_example_along_the_dims_and_leaves_the_given_one():
    bound = _bound()
    request = ShapeRequest.build({"mask": {1: "n"}}, bound)
    widened = request.widen(bound, request.size_one())
    assert widened["mask"].shape == (2, 2) and bound["mask"].shape == (2, 1)
    assert torch.equal(widened["mask"], torch.ones(2, 2))
    assert widened["x"] is bound["x"]


def test_without_makes_dims_static_and_forgets_them():
    request = ShapeRequest.build({"x": {0: "batch", 1: "features"}}, _bound())
    narrower = request.without({("x", 1)})
    assert narrower is not None
    assert narrower.spec == {"x": {0: AUTO}, "mask": None}
    assert dict(narrower.requested) == {("x", 0): 2}
    assert narrower.declared == frozenset({("x", 0)})
    assert request.spec == {"x": {0: AUTO, 1: AUTO}, "mask": None}  # unchanged
    only = request.without({("x", 0), ("x", 1)})
    assert only is not None and only.spec["x"] is None
    # by position too: the request is read by name
    by_position = ShapeRequest.build(({0: "batch", 1: "f"}, None), _bound())
    dropped = by_position.without({("x", 1)})
    assert dropped is not None and dropped.spec == {"x": {0: AUTO}, "mask": None}
    # a dim that is not a top-level tensor's {dim: ...} entry: left alone
    assert request.without({("mask", 0)}) is None
    assert ShapeRequest().without({("x", 0)}) is None


def test_refined_applies_torchs_suggested_fixes():
    batch = Dim("batch")
    request = ShapeRequest.build({"x": {0: batch}}, _bound())
    refined = request.refined(["batch = Dim('batch', max=8)"])
    assert refined is not None and refined is not request
    assert refined.spec["x"][0].max == 8 and request.spec["x"][0] is batch
    assert refined.requested == request.requested and refined.named == request.named
    fixed = request.refined(["batch = 2"])
    assert fixed is not None and fixed.spec["x"] == {0: 2}
    assert request.refined([]) is None  # no fixes
    assert request.refined(["not a fix"]) is None  # torch cannot apply it
    assert ShapeRequest().refined(["batch = 2"]) is None  # nothing asked


def test_forms_check_an_entry_against_its_input_with_the_families_given():
    x = torch.randn(2, 4)
    with pytest.raises(SpecMismatch) as mismatch:
        forms.check_spec({0: "a", 5: "b"}, x, "x")
    assert mismatch.value.entry == 'dynamic_shapes["x"]'
    assert "a dict of dims by index (0 to 1)" in mismatch.value.expected
    with pytest.raises(UnknownSpecName) as unknown:
        forms.spec_by_parameter({"y": {0: "a"}}, _signature(), {"x": x}, {"x": x})
    assert unknown.value.name == "y" and unknown.value.valid == ["x"]
    assert forms.family_of(x, families()) is None and forms.family_of(x, ()) is None


def _signature() -> inspect.Signature:
    def forward(x):
        return x

    return inspect.signature(forward)
