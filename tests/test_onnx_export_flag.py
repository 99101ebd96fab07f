"""``torch.onnx.is_in_onnx_export()`` is True while dynamo-onnx captures the model (so a model
branching on it exports its ONNX branch, as with torch.onnx) and False again after, also when
the export fails; also for code that imported the function before the export."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.onnx import is_in_onnx_export  # bound at import time, as user code does

import dynamo_onnx
from dynamo_onnx.passes.capture.onnx_export_flag import check_supported, onnx_export_flag

X = torch.randn(3, 4)


class ByAttribute(torch.nn.Module):
    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            return x * 2
        return x + 1


class ByImportedName(torch.nn.Module):
    def forward(self, x):
        if is_in_onnx_export():
            return x * 2
        return x + 1


#: The flag as each capture attempt of FailsInExport saw it (the module may be copied).
SEEN: list[bool] = []


class FailsInExport(torch.nn.Module):
    """Records the flag at each capture attempt, then fails every one."""

    def forward(self, x):
        SEEN.append(torch.onnx.is_in_onnx_export())
        raise ValueError("refusing to export")


EXPORTS = {
    "export": lambda m: dynamo_onnx.export(m, (X,), dynamic_shapes=({0: "b"},)),
    "dynamo_export": lambda m: dynamo_onnx.dynamo_export(
        m, X, export_options=dynamo_onnx.ExportOptions(dynamic_shapes=True)
    ),
}


@pytest.mark.parametrize("model", [ByAttribute(), ByImportedName()], ids=["attribute", "imported"])
@pytest.mark.parametrize("how", sorted(EXPORTS))
def test_a_model_branching_on_the_flag_exports_its_onnx_branch(model, how):
    assert not torch.onnx.is_in_onnx_export()
    program = EXPORTS[how](model)
    assert not torch.onnx.is_in_onnx_export() and not is_in_onnx_export()
    for rows in (3, 6):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(program(x)[0], x * 2)
    torch.testing.assert_close(model(X), X + 1)  # eager after the export: the other branch


@pytest.mark.parametrize("how", sorted(EXPORTS))
def test_the_flag_is_false_after_a_failing_export(how):
    SEEN.clear()
    with pytest.raises(dynamo_onnx.OnnxExporterError, match="refusing to export"):
        EXPORTS[how](FailsInExport())
    assert SEEN[0] is True  # the non-strict capture ran forward with the flag set
    assert not torch.onnx.is_in_onnx_export() and not is_in_onnx_export()


def test_nested_and_concurrent_scopes_restore_torch_only_when_the_last_ends():
    original = torch.onnx.is_in_onnx_export.__code__
    entered, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_capture() -> None:
        with onnx_export_flag():
            entered.set()
            release.wait(10)
            seen.append(torch.onnx.is_in_onnx_export())

    thread = threading.Thread(target=other_capture)
    thread.start()
    entered.wait(10)
    with onnx_export_flag():
        with onnx_export_flag():
            assert is_in_onnx_export()
        assert is_in_onnx_export()
    assert torch.onnx.is_in_onnx_export()  # the other capture is still inside
    release.set()
    thread.join(10)
    assert seen == [True]
    assert not torch.onnx.is_in_onnx_export()
    assert torch.onnx.is_in_onnx_export.__code__ is original


def test_torch_still_has_the_function_this_relies_on():
    """Fails loudly when a torch release makes ``is_in_onnx_export`` something whose code
    cannot be swapped (a builtin, a wrapper with a closure): the flag would not be set."""
    function = check_supported()
    assert function is torch.onnx.is_in_onnx_export
    assert function() is False
    with onnx_export_flag():
        assert function() is True
    assert function() is False
