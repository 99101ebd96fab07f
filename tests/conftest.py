"""Shared models and helpers for the test suite: real torch models, real ONNX Runtime."""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import pathlib
import sys
import warnings

import pytest
import torch

# The seed's MLP is the demo's (examples/mlp.py): the tests check what `make demo` runs.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from mlp import MLPModel  # noqa: F401 - imported by the tests from conftest

from dynamo_onnx.defaults import GC_THRESHOLDS_WHILE_EXPORTING

warnings.filterwarnings("ignore", category=FutureWarning)
# A test process holds what its module fixtures exported (programs, models), and each export
# allocates hundreds of thousands of objects: at Python's default thresholds the collector
# walks that heap in full every few exports, ~8 % of the suite's time. Young collections
# less often, full ones a tenth as often (the thresholds an export's passes run with): 12 %
# faster, ~10 % more peak memory. What a test checks never depends on when a cycle is
# collected (those that need it call gc.collect()).
gc.set_threshold(*GC_THRESHOLDS_WHILE_EXPORTING)
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Every pipeline checks that a pass declaring changes_input = False changes nothing it was
# given (dynamo_onnx.passes.contract), in this process and in the CLI's it starts.
os.environ.setdefault("DYNAMO_ONNX_CHECK_PASSES", "1")


class SeedModel(torch.nn.Module):
    """The seed's ``MyModel`` (Example 1 of dynamo_export)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)

    def forward(self, x, bias=None):
        out = self.linear(x)
        out = out + bias
        return out


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(2)
        self.gap = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(self.gap(x), 1))


def line_of(func, marker: str) -> int:
    """The line number of the first line of ``func``'s source that contains ``marker``."""
    lines, start = inspect.getsourcelines(func)
    for offset, text in enumerate(lines):
        if marker in text:
            return start + offset
    raise AssertionError(f"{marker!r} not in the source of {func}")


def first_output(out):
    """The first tensor of a model output (a tensor, a tuple, or a transformers output)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return out[0]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=["logging-disabled", "debug-logging"])
def caller_logging(request):
    """Runs a test as callers configure logging at its two ends: ``logging.disable(
    logging.CRITICAL)`` (scripts, notebooks, test harnesses) and ``logging.basicConfig(
    level=logging.DEBUG)``. A finding must not depend on it. Logging left untouched, between
    the two (torch's records reach the capture's listener as under ``disable``, none reach a
    handler), is every other test's configuration: the rule fixtures of the same findings
    (DO1xx, test_rule_fixtures) are exported under it."""
    import io
    import logging

    root = logging.getLogger()
    saved = root.level, list(root.handlers), logging.root.manager.disable
    if request.param == "logging-disabled":
        logging.disable(logging.CRITICAL)
    elif request.param == "debug-logging":
        root.addHandler(logging.StreamHandler(io.StringIO()))
        root.setLevel(logging.DEBUG)
    yield request.param
    logging.disable(saved[2])
    root.setLevel(saved[0])
    root.handlers = saved[1]


# -- the two layers -------------------------------------------------------------------------
#
# `make test-fast` runs the unit layer (`-m unit`): the tests of tests/passes/ (each pass on
# hand-built input), of tests/runtimes/onnxruntime/rewrites/ (each rewrite rule on a
# hand-built graph), tests/foreign_text/ (each reader on its recorded text) and of the modules
# below (rules, the SARIF builder, parsers, the architecture, the diagnostics context), and
# tests/specs/ (the shape request). tests/ mirrors src/: passes/, runtimes/, integrations/,
# reports/, foreign_text/, specs/. A test there
# that runs a full export fails (``_no_full_export``), so the lane cannot silently grow slow:
# such a test is marked ``e2e`` or moved. A new module not listed is in the end-to-end layer
# only, which `make test` runs along with this one.
#: Folders under tests/ (POSIX paths) whose every module is in the unit layer.
UNIT_DIRECTORIES = (
    "foreign_text",
    "onnx_tools",
    "passes",
    "runtimes/onnxruntime/rewrites",
    "specs",
)
UNIT_MODULES = frozenset(
    {
        "test_architecture.py",
        "test_defaults.py",
        "test_diagnostic_context.py",
        "test_hygiene.py",
        "test_integrations.py",
        "test_sarif_builder.py",
        "test_transformers_ort_steps.py",
        "test_units.py",
    }
)
TESTS = pathlib.Path(__file__).resolve().parent


def _is_unit(item: pytest.Item) -> bool:
    if item.get_closest_marker("e2e") is not None:
        return False
    path = pathlib.Path(str(item.fspath)).resolve()
    relative = path.relative_to(TESTS) if path.is_relative_to(TESTS) else path
    folder = relative.parent.as_posix()
    in_a_unit_folder = any(folder == d or folder.startswith(d + "/") for d in UNIT_DIRECTORIES)
    return in_a_unit_folder or relative.name in UNIT_MODULES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_unit(item):
            item.add_marker(pytest.mark.unit)


def _refuse_full_export(*args, **kwargs):
    raise AssertionError(
        "a unit test (tests/conftest.py's UNIT_MODULES, tests/passes/) ran a full export: "
        "mark it @pytest.mark.e2e or build its input by hand (tests/passes/helpers.py)"
    )


@contextlib.contextmanager
def _no_full_export(item: pytest.Item):
    """In the unit layer, the export pipeline and torch.onnx.export refuse to run, in the
    test and in the fixtures it sets up (a module's fixture too)."""
    if item.get_closest_marker("unit") is None:
        yield
        return
    import dynamo_onnx.exporter

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dynamo_onnx.exporter, "export_passes", _refuse_full_export)
        patch.setattr(torch.onnx, "export", _refuse_full_export)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    with _no_full_export(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _no_full_export(item):
        return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The test process (or xdist worker) ends after this: its objects (torch's, sympy's,
    every export's) are frozen out of the collector, as the command's are
    (dynamo_onnx.cli.console_main), so the interpreter's final collections do not walk
    them again for a second or two."""
    gc.freeze()
