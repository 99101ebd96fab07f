"""Weights that are tensor subclasses (TwoTensor here; quantized and distributed tensors
are built the same way) export as their plain tensors, as torch.onnx does. Reading such a
weight's data pointer used to kill Python while building the proto, so the exports run in
a subprocess: a crash fails the test of the model it happened in instead of pytest."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

from dynamo_onnx.tensors import TensorSubclassWeight, is_wrapper_subclass, torch_tensor_to_ir

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

#: The models: a TwoTensor parameter, a TwoTensor buffer, a non-persistent one (a constant
#: of the program). A quantized weight's operators return plain tensors; TwoTensor's return
#: TwoTensors, which ``plain`` makes plain (or not: torch.export then returns its tensors).
MODELS = """
import torch
from torch.testing._internal.two_tensor import TwoTensor


def two(t):
    return TwoTensor(t, t * 2)


class SubclassParameter(torch.nn.Module):
    def __init__(self, plain=True):
        super().__init__()
        self.plain = plain
        self.linear = torch.nn.Linear(4, 3)
        self.linear.weight = torch.nn.Parameter(two(self.linear.weight.detach()), requires_grad=False)

    def forward(self, x):
        y = self.linear(x)
        return y.a - y.b if self.plain else y


class SubclassBuffer(torch.nn.Module):
    def __init__(self, persistent):
        super().__init__()
        self.register_buffer("scale", two(torch.rand(4) + 0.5), persistent=persistent)

    def forward(self, x):
        y = torch.relu(x * self.scale)
        return y.a + y.b
"""

#: Each model and the number of outputs its export has. A TwoTensor result is two outputs
#: (its tensors, as torch.onnx gives); with a dynamic batch torch.export adds the subclass's
#: symbolic size to them, so that one is exported static.
BUILDS = [
    ("SubclassParameter()", 1),
    ("SubclassBuffer(persistent=True)", 1),
    ("SubclassBuffer(persistent=False)", 1),
    ("SubclassParameter(plain=False)", 2),
]

#: Every model's exports, one model after the other in one process (a process per model
#: only added torch's import, ~3 s each): a line before each model, its results after it,
#: so that a crash is charged to the model being exported.
SCRIPT = """
import json, sys
import torch
import dynamo_onnx
{models}

for build, dynamic, out in json.loads(sys.argv[1]):
    print(json.dumps({{"start": build}}), flush=True)
    torch.manual_seed(0)
    model = eval(build).eval()
    results = {{}}
    for label, spelling in {{
        "export": lambda x: dynamo_onnx.export(
            model, (x,), dynamic_shapes=({{0: "batch"}},) if dynamic else None, verify=True
        ),
        "dynamo_export": lambda x: dynamo_onnx.dynamo_export(
            model, x, export_options=dynamo_onnx.ExportOptions(dynamic_shapes=dynamic)
        ),
    }}.items():
        program = spelling(torch.randn(3, 4))
        program.save(out + "/" + label + ".onnx")
        rows = []
        for n in (3, 5) if dynamic else (3,):
            x = torch.randn(n, 4)
            with torch.no_grad():
                eager = model(x)
            parts = [eager.a, eager.b] if hasattr(eager, "__tensor_flatten__") else [eager]
            got = program(x)
            rows.append([len(got), len(parts)] + [float((g - e).abs().max()) for g, e in zip(got, parts)])
        rules = sorted({{f.rule.id for f in program.diagnostics.findings}})
        rules += [f.level.name for f in program.diagnostics.findings if f.level.name != "NOTE"]
        results[label] = {{"rows": rows, "rules": rules}}
    print(json.dumps({{"build": build, "results": results}}), flush=True)
"""


@dataclasses.dataclass(frozen=True)
class Exports:
    """What the one process gave: each finished model's results and output folder."""

    returncode: int
    stderr: str
    results: dict[str, dict]
    folders: dict[str, pathlib.Path]
    crashed_in: str | None  # the model that was being exported when the process died


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Exports:
    folders = {build: tmp_path_factory.mktemp("subclass") for build, _ in BUILDS}
    plan = [(build, outputs == 1, str(folders[build])) for build, outputs in BUILDS]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(models=MODELS), json.dumps(plan)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    results, started = {}, None
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["build"]] = record["results"]
                started = None
    return Exports(done.returncode, done.stderr, results, folders, started)


@pytest.mark.parametrize(("build", "outputs"), BUILDS)
def test_a_tensor_subclass_weight_exports_as_its_plain_tensors(build, outputs, exports):
    dynamic = outputs == 1
    # a crash fails the model it happened in, or every model if it came after the last
    failed = f"exit code {exports.returncode} in {exports.crashed_in}:\n{exports.stderr[-3000:]}"
    assert build in exports.results, failed
    assert exports.returncode == 0 or exports.crashed_in is not None, failed
    results = exports.results[build]
    assert sorted(results) == ["dynamo_export", "export"]
    for label, result in results.items():
        assert len(result["rows"]) == (2 if dynamic else 1)
        for count, expected_count, *diffs in result["rows"]:
            assert count == expected_count == outputs, label
            assert max(diffs) < 1e-5, (label, diffs)
        assert "WARNING" not in result["rules"] and "ERROR" not in result["rules"], result
        assert (exports.folders[build] / f"{label}.onnx").stat().st_size > 0
    assert "DO602" in results["export"]["rules"]  # verify=True compared every output


def test_a_tensor_subclass_never_reaches_the_proto_as_raw_bytes():
    from torch.testing._internal.two_tensor import TwoTensor

    weight = TwoTensor(torch.ones(2, 2), torch.zeros(2, 2))
    assert is_wrapper_subclass(weight)
    assert not is_wrapper_subclass(torch.nn.Parameter(torch.ones(2)))
    with pytest.raises(TensorSubclassWeight, match="weight `w` is a TwoTensor"):
        torch_tensor_to_ir(weight, "w")


def test_the_scripts_models_are_what_eager_runs():
    namespace: dict = {}
    exec(textwrap.dedent(MODELS), namespace)  # the test's own model source
    x = torch.randn(2, 4)
    assert type(namespace["SubclassParameter"](plain=False)(x)).__name__ == "TwoTensor"
    assert type(namespace["SubclassParameter"]()(x)) is torch.Tensor
