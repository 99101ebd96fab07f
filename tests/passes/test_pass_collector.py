"""The runner spaces Python's garbage collections out while passes run and gives the caller
back its thresholds (dynamo_onnx.passes.collector): after the pipeline, after a pass that
fails, never lowering the caller's own, never switching a stopped collector on."""

from __future__ import annotations

import gc
from typing import ClassVar

import pytest

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import OnnxExporterError
from dynamo_onnx.passes.base import ExportRequest, ExportState, run_pipeline
from dynamo_onnx.passes.collector import SPACED


class _Seen:
    """A pass that notes the collector's thresholds while it runs, then fails if asked."""

    name = "seen"
    changes_input = True
    error_type: ClassVar[type[OnnxExporterError]] = OnnxExporterError

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.thresholds, self.enabled = fail, None, None

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        self.thresholds, self.enabled = gc.get_threshold(), gc.isenabled()
        if self.fail:
            raise RuntimeError("the pass broke")
        return state


@pytest.fixture
def callers_thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def _run(seen: _Seen) -> None:
    run_pipeline(DiagnosticContext(), [seen], ExportState(ExportRequest(None)))


@pytest.mark.usefixtures("callers_thresholds")
def test_collections_are_spaced_while_passes_run_and_the_callers_thresholds_come_back():
    gc.set_threshold(700, 10, 10)  # Python's defaults
    seen = _Seen()
    _run(seen)
    assert seen.thresholds == SPACED
    assert gc.get_threshold() == (700, 10, 10)

    failing = _Seen(fail=True)
    with pytest.raises(OnnxExporterError):
        _run(failing)
    assert failing.thresholds == SPACED
    assert gc.get_threshold() == (700, 10, 10)  # put back after a failure too


@pytest.mark.usefixtures("callers_thresholds")
def test_a_callers_higher_threshold_is_kept_and_a_stopped_collector_stays_stopped():
    gc.set_threshold(50_000, 5, 500)
    seen = _Seen()
    _run(seen)
    assert seen.thresholds == (50_000, SPACED[1], 500)  # only raised, generation by generation
    assert gc.get_threshold() == (50_000, 5, 500)
    gc.disable()
    try:
        _run(seen)
        assert seen.enabled is False and not gc.isenabled()
    finally:
        gc.enable()
