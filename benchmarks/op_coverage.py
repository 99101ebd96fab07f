"""``make coverage``: every torch OpInfo operator, exported by dynamo-onnx and by torch.onnx.

Each operator of torch's OpInfo database (the operator test suite of PyTorch itself) is
wrapped in a one-operator module per sample and exported twice in the same process:
``dynamo_onnx.export(module, args)`` and ``torch.onnx.export(module, args, dynamo=True)``,
both with their defaults. Each exported model runs in ONNX Runtime (through its own
``ONNXProgram``) and is compared with eager. Operators whose eager result depends on the
random seed (``rand*``, ``bernoulli``, ``empty*``...) are compared on shape and dtype only.

Samples: the first ``--samples`` float32 samples of each operator, then the first sample in
each other dtype the operator supports and ONNX Runtime computes on CPU (float16, float64,
int64, int32, bool). An operator's status for a dtype is its worst sample.

Writes ``docs/coverage.json`` (every sample's outcome) and ``docs/coverage.md`` (the table).
This is a measuring tool, not part of the package: it reads torch's OpInfo database from
``torch.testing._internal`` (test infrastructure, which needs ``expecttest``), the only
list of every operator with sample inputs.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import datetime
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workers import (  # a sibling module, found from this file's folder
    Timeout,
    quiet,
    rows_json,
    time_limit,
)

from dynamo_onnx.files import atomic_write_text  # the one atomic writer

ROOT = Path(__file__).resolve().parent.parent
EXPORTERS = ("dynamo_onnx", "torch_onnx")
#: Worst first: an operator's status for a dtype is the worst of its samples'.
STATUSES = ("timeout", "crash", "export-failed", "ort-failed", "mismatch", "shape-only", "match")
GOOD = ("match", "shape-only")
OTHER_DTYPES = ("float16", "float64", "int64", "int32", "bool")
#: Operators whose result is unspecified memory, whatever the seed.
UNINITIALIZED = ("empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided")


@dataclasses.dataclass
class Outcome:
    """What happened to one sample with one exporter."""

    status: str
    rule: str | None = None
    detail: str = ""


# --------------------------------------------------------------------------------------
# In the worker processes
# --------------------------------------------------------------------------------------


def _op_db() -> dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return {_full_name(op): op for op in op_db}


def _full_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@dataclasses.dataclass
class Case:
    """One sample of one operator: its tensors (the module's inputs) and eager's results."""

    dtype: str
    args: tuple[Any, ...]
    rebuild: Callable[[Sequence[Any]], Any]
    expected: list[Any]
    #: eager's result is unspecified memory or changes with the seed
    shape_only: bool
    #: OpInfo re-seeds before each call (random operators): eager looks deterministic, so
    #: randomness shows as two ONNX runs that differ
    seeded: bool


def _case(op: Any, sample: Any, dtype: str) -> Case | None:
    """A sample as a case: tensors become inputs, the rest constants; None when eager fails."""
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    function = op.op

    def rebuild(tensors: Sequence[Any]) -> Any:
        values = list(leaves)
        for position, tensor in zip(positions, tensors):
            values[position] = tensor
        first, args, kwargs = pytree.tree_unflatten(values, spec)
        return function(first, *args, **kwargs)

    args = tuple(leaves[i].detach().clone().contiguous() for i in positions)
    try:
        with quiet():
            expected = _eager(rebuild, args, seed=0)
            again = _eager(rebuild, args, seed=1)
    except Exception:  # eager fails: nothing to compare against
        return None
    if not expected:
        return None
    try:
        shape_only = op.name in UNINITIALIZED or not _same(expected, again)
    except Exception:  # eager's results cannot be compared on CPU
        return None
    seeded = "wrapper_set_seed" in getattr(getattr(function, "__code__", None), "co_names", ())
    return Case(dtype, args, rebuild, expected, shape_only, seeded)


def _module_for(cases: Sequence[Case]) -> tuple[Any, tuple[Any, ...]]:
    """One module calling the operator on every case: one export covers many samples (each
    export of torch.onnx costs ~1 s of fixed overhead), each case's outputs kept apart."""
    import torch

    sizes = [len(case.args) for case in cases]

    class Operator(torch.nn.Module):
        def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            outputs: list[torch.Tensor] = []
            start = 0
            for case, size in zip(cases, sizes):
                outputs += _tensors(case.rebuild(tensors[start : start + size]))
                start += size
            return tuple(outputs)

    return Operator(), tuple(a for case in cases for a in case.args)


def _tensors(value: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def _eager(function: Callable[[Sequence[Any]], Any], args: tuple[Any, ...], seed: int) -> list[Any]:
    import torch

    torch.manual_seed(seed)
    return [t.detach().clone() for t in _tensors(function([a.clone() for a in args]))]


def _comparable(tensor: Any) -> Any:
    """A tensor torch.equal and assert_close work on: dense, complex32 widened."""
    import torch

    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    return tensor.to(torch.complex64) if tensor.dtype == torch.complex32 else tensor


def _same(a: list[Any], b: list[Any]) -> bool:
    import torch

    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(_comparable(x), _comparable(y))
        for x, y in zip(a, b)
    )


def _export(exporter: str, module: Any, args: tuple[Any, ...]) -> Any:
    import torch

    if exporter == "dynamo_onnx":
        import dynamo_onnx

        return dynamo_onnx.export(module, args)
    return torch.onnx.export(module, args, dynamo=True, verbose=False)


def _rule_of(error: BaseException) -> str:
    """dynamo-onnx's rule id, or for torch.onnx the error's class."""
    rule = getattr(error, "rule_id", None)
    if rule:
        return str(rule)
    cause = error.__cause__ or error.__context__
    if type(error).__name__ == "TorchExportError" and cause is not None:
        return f"TorchExportError({type(cause).__name__})"
    return type(error).__name__


def _first_line(error: BaseException) -> str:
    """The error's first lines (dynamo-onnx lists the operators after its first line);
    for torch.onnx, the cause under its "Exception summary" rather than its generic steps."""
    message = str(error).strip()
    if "## Exception summary" in message:
        message = message.split("## Exception summary", 1)[1]
    message = message.replace(f"{ROOT}{os.sep}", "")  # the checkout's path: not the docs'
    text = [line.strip() for line in message.splitlines() if line.strip()]
    return (" ".join(text[:3]) if text else type(error).__name__)[:200]


def _compare(actual: Sequence[Any], expected: Sequence[Any], shape_only: bool) -> Outcome:
    import torch

    if len(actual) != len(expected):
        return Outcome("mismatch", detail=f"{len(actual)} outputs, eager has {len(expected)}")
    for index, (got, want) in enumerate(zip(actual, expected)):
        if got.shape != want.shape or got.dtype != want.dtype:
            return Outcome(
                "mismatch",
                detail=f"output {index}: {got.dtype}{list(got.shape)}, "
                f"eager {want.dtype}{list(want.shape)}",
            )
        if shape_only:
            continue
        low_precision = want.dtype in (torch.float16, torch.bfloat16, torch.complex32)
        try:
            torch.testing.assert_close(
                _comparable(got),
                _comparable(want),
                rtol=1e-2 if low_precision else 1e-3,
                atol=1e-2 if low_precision else 1e-4,
                equal_nan=True,
            )
        except AssertionError as error:
            lines = [line for line in str(error).splitlines() if line.strip()]
            return Outcome("mismatch", detail=f"output {index}: " + " ".join(lines[:3])[:300])
    return Outcome("shape-only" if shape_only else "match")


def _run_cases(exporter: str, cases: Sequence[Case], timeout: int) -> list[Outcome] | Outcome:
    """Each case's outcome, or one outcome for all when the export or the session failed."""
    import torch

    module, args = _module_for(cases)
    torch.manual_seed(0)
    try:
        with quiet(), time_limit(timeout):
            try:
                program = _export(exporter, module, args)
            except Timeout:
                raise
            except Exception as error:  # every failure is a data point here
                return Outcome("export-failed", _rule_of(error), _first_line(error))
            try:
                actual = [a.detach() for a in _tensors(program(*(a.clone() for a in args)))]
                rerun = actual
                if any(case.seeded for case in cases):
                    rerun = [a.detach() for a in _tensors(program(*(a.clone() for a in args)))]
            except Timeout:
                raise
            except Exception as error:
                return Outcome("ort-failed", type(error).__name__, _first_line(error))
    except Timeout as error:
        return Outcome("timeout", None, str(error))
    draws = _draws_random(program)
    outcomes = []
    for case in cases:
        count = len(case.expected)
        random = case.seeded and (draws or not _same(actual[:count], rerun[:count]))
        outcomes.append(_compare(actual[:count], case.expected, case.shape_only or random))
        actual, rerun = actual[count:], rerun[count:]
    return outcomes


#: ONNX operators whose results are random draws (Dropout is not here: in inference mode it is
#: the identity, and a model that should draw but does not must show as a mismatch).
RANDOM_OPS = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)


def _draws_random(program: Any) -> bool:
    """Whether the exported model has a random operator, in its graphs or functions."""
    import onnx_ir as ir

    model = program.model
    graphs = [model.graph, *model.functions.values()]
    return any(
        node.op_type in RANDOM_OPS
        for graph in graphs
        for node in ir.traversal.RecursiveGraphIterator(graph)
    )


def _outcomes(exporter: str, cases: Sequence[Case], timeout: int) -> list[Outcome]:
    """Every case in one export. When that fails as a whole, the cases are split so that a
    dtype an exporter cannot handle does not hide those it can: float32 alone, then the
    other dtypes together, then one by one if that fails while float32 passed. (An operator
    failing in float32 and in all the other dtypes together is not tried dtype by dtype: it
    is broken as a whole, and each try costs torch.onnx a second.)"""
    result = _run_cases(exporter, cases, timeout)
    if isinstance(result, list):
        return result
    if len({case.dtype for case in cases}) == 1 or result.status == "timeout":
        return [result] * len(cases)
    outcomes: dict[int, Outcome] = {}

    def run_group(indices: list[int]) -> bool:
        grouped = _run_cases(exporter, [cases[i] for i in indices], timeout)
        for position, i in enumerate(indices):
            outcomes[i] = grouped[position] if isinstance(grouped, list) else grouped
        return isinstance(grouped, list)

    first = [i for i, case in enumerate(cases) if case.dtype == "float32"]
    others = [i for i, case in enumerate(cases) if case.dtype != "float32"]
    first_ran = run_group(first) if first else False
    if others and not run_group(others) and first_ran:
        for dtype in dict.fromkeys(cases[i].dtype for i in others):
            run_group([i for i in others if cases[i].dtype == dtype])
    return [outcomes[i] for i in range(len(cases))]


def _samples(op: Any, dtype_name: str, count: int) -> list[Any]:
    import torch

    dtype = getattr(torch, dtype_name)
    if not op.supports_dtype(dtype, "cpu"):
        return []
    torch.manual_seed(0)
    samples = []
    try:
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            samples.append(sample)
            if len(samples) >= count:
                break
    except Exception:  # a broken sample generator is not an export result
        return samples
    return samples


def check_operator(name: str, samples: int, timeout: int) -> dict[str, Any]:
    """Every sample of one operator with both exporters: ``{dtype: [row per sample]}``."""
    op = _op_db()[name]
    cases: list[Case] = []
    for dtype in ("float32", *OTHER_DTYPES):
        count = samples if dtype == "float32" else 1
        found = [c for s in _samples(op, dtype, count) if (c := _case(op, s, dtype))]
        if dtype == "float32" and not found:
            break  # no float32 sample eager runs: not an operator to compare here
        cases += found
    result: dict[str, Any] = {"name": name, "dtypes": {}}
    if not cases:
        return result
    outcomes = {exporter: _outcomes(exporter, cases, timeout) for exporter in EXPORTERS}
    for index, case in enumerate(cases):
        row: dict[str, Any] = {"input": _describe(case.args)}
        for exporter in EXPORTERS:
            row[exporter] = dataclasses.asdict(outcomes[exporter][index])
        result["dtypes"].setdefault(case.dtype, []).append(row)
    return result


def _describe(args: tuple[Any, ...]) -> str:
    return ", ".join(f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}" for a in args)


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# --------------------------------------------------------------------------------------
# In the parent: schedule, summarize, write
# --------------------------------------------------------------------------------------


def _all_names(selected: Sequence[str]) -> list[str]:
    names = sorted(_op_db())
    if not selected:
        return names
    unknown = [s for s in selected if s not in names]
    if unknown:
        raise SystemExit(f"unknown OpInfo operator(s): {', '.join(unknown)}")
    return [n for n in names if n in selected]


def run(names: Sequence[str], jobs: int, samples: int, timeout: int) -> list[dict[str, Any]]:
    """Every operator in ``names`` on ``jobs`` processes; a crashing operator is retried once."""
    results: dict[str, dict[str, Any]] = {}
    attempts: collections.Counter[str] = collections.Counter()
    pending = list(names)
    context = multiprocessing.get_context("spawn")
    started = time.monotonic()
    while pending:
        with concurrent.futures.ProcessPoolExecutor(
            jobs, mp_context=context, initializer=_worker_init
        ) as pool:
            futures = {pool.submit(check_operator, n, samples, timeout): n for n in pending}
            for future in concurrent.futures.as_completed(futures):
                name = futures[future]
                try:
                    results[name] = future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    attempts[name] += 1
                    if attempts[name] >= 2:
                        results[name] = _crashed(name)
                except Exception as error:
                    results[name] = _crashed(name, _first_line(error))
                else:
                    done = len(results)
                    if done % 25 == 0:
                        elapsed = time.monotonic() - started
                        print(f"{done}/{len(names)} operators, {elapsed:.0f} s", flush=True)
        pending = [n for n in pending if n not in results]
    return [results[n] for n in names]


def _crashed(name: str, detail: str = "the worker process died") -> dict[str, Any]:
    outcome = dataclasses.asdict(Outcome("crash", None, detail))
    row = {"input": "", **{e: outcome for e in EXPORTERS}}
    return {"name": name, "dtypes": {"float32": [row]}}


def status_of(rows: Sequence[dict[str, Any]], exporter: str) -> dict[str, Any]:
    """The worst outcome of an operator's samples in one dtype."""
    return min((r[exporter] for r in rows), key=lambda o: STATUSES.index(o["status"]))


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Figures for the top of the report, float32 (the dtype every operator is tried in)."""
    tested = [r for r in results if "float32" in r["dtypes"]]
    good = {
        e: {r["name"] for r in tested if status_of(r["dtypes"]["float32"], e)["status"] in GOOD}
        for e in EXPORTERS
    }
    dtype_rows = collections.Counter()
    dtype_good: dict[str, collections.Counter[str]] = {e: collections.Counter() for e in EXPORTERS}
    for r in results:
        for dtype, rows in r["dtypes"].items():
            dtype_rows[dtype] += 1
            for e in EXPORTERS:
                dtype_good[e][dtype] += status_of(rows, e)["status"] in GOOD
    return {
        "operators_tested": len(tested),
        "float32_good": {e: len(good[e]) for e in EXPORTERS},
        "only_torch_onnx": sorted(good["torch_onnx"] - good["dynamo_onnx"]),
        "only_dynamo_onnx": sorted(good["dynamo_onnx"] - good["torch_onnx"]),
        "by_dtype": {
            d: {"operators": n, **{e: dtype_good[e][d] for e in EXPORTERS}}
            for d, n in dtype_rows.items()
        },
    }


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    packages = ("torch", "onnxscript", "onnx-ir", "onnx", "onnxruntime", "dynamo-onnx")
    return {p: version(p) for p in packages}


def _cell(outcome: dict[str, Any]) -> str:
    status = outcome["status"]
    if status in GOOD:
        return "✅ match" if status == "match" else "✅ shape/dtype"
    rule = f" `{outcome['rule']}`" if outcome.get("rule") else ""
    return f"❌ {status}{rule}"


def _dtype_cell(result: dict[str, Any], exporter: str) -> str:
    good = [
        d
        for d in OTHER_DTYPES
        if d in result["dtypes"] and status_of(result["dtypes"][d], exporter)["status"] in GOOD
    ]
    tried = [d for d in OTHER_DTYPES if d in result["dtypes"]]
    return f"{len(good)}/{len(tried)}" if tried else "–"


def markdown(report: dict[str, Any]) -> str:
    """docs/coverage.md: the figures, the gap in both directions, a row per operator."""
    summary = report["summary"]
    good = summary["float32_good"]
    lines = [
        "# Operator coverage: dynamo-onnx and torch.onnx side by side",
        "",
        "Written by `make coverage` (`benchmarks/op_coverage.py`); do not edit by hand.",
        f"Run on {report['date']}, {report['machine']}, in {report['seconds']:.0f} s; "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        + ".",
        "",
        "Every operator of torch's OpInfo database, each sample wrapped in a one-operator "
        "module and exported by `dynamo_onnx.export(m, args)` and by "
        "`torch.onnx.export(m, args, dynamo=True)` with their defaults, in the same process; "
        "each model runs in ONNX Runtime and is compared with eager (float32: rtol 1e-3, "
        "atol 1e-4; float16: 1e-2). Operators whose eager result changes with the seed are "
        "compared on shape and dtype only (✅ shape/dtype). "
        f"Float32: the first {report['config']['samples']} samples of each operator; other "
        "dtypes: the first sample each. All of an operator's samples are one export per "
        "exporter; when it fails, float32 and the other dtypes are exported apart (and the "
        "other dtypes one by one when float32 passes). A row's status is its worst sample's; "
        "the rule is dynamo-onnx's rule id, or the class of torch.onnx's error.",
        "",
        "| | dynamo-onnx | torch.onnx |",
        "|---|---:|---:|",
        f"| float32 operators matching eager (of {summary['operators_tested']}) "
        f"| **{good['dynamo_onnx']}** | {good['torch_onnx']} |",
    ]
    for dtype, figures in sorted(summary["by_dtype"].items()):
        if dtype == "float32":
            continue
        lines.append(
            f"| {dtype} operators matching eager (of {figures['operators']}) "
            f"| {figures['dynamo_onnx']} | {figures['torch_onnx']} |"
        )
    only_torch = summary["only_torch_onnx"]
    only_ours = summary["only_dynamo_onnx"]
    lines += [
        "",
        f"Operators torch.onnx exports correctly and dynamo-onnx does not: **{len(only_torch)}**"
        + (": " + ", ".join(f"`{n}`" for n in only_torch) if only_torch else "."),
        "",
        f"Operators dynamo-onnx exports correctly and torch.onnx does not: **{len(only_ours)}**"
        + (": " + ", ".join(f"`{n}`" for n in only_ours) if only_ours else "."),
        "",
        "## Every operator (float32)",
        "",
        "| operator | dynamo-onnx | torch.onnx | other dtypes matching (dynamo-onnx / torch.onnx) "
        "| samples | what fails |",
        "|---|---|---|---|---:|---|",
    ]
    for result in report["operators"]:
        rows = result["dtypes"].get("float32")
        if not rows:
            continue
        ours, theirs = status_of(rows, "dynamo_onnx"), status_of(rows, "torch_onnx")
        detail = ours["detail"] if ours["status"] not in GOOD else ""
        if not detail and theirs["status"] not in GOOD:
            detail = "torch.onnx: " + theirs["detail"]
        detail = detail.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(
            f"| `{result['name']}` | {_cell(ours)} | {_cell(theirs)} "
            f"| {_dtype_cell(result, 'dynamo_onnx')} / {_dtype_cell(result, 'torch_onnx')} "
            f"| {len(rows)} | {detail} |"
        )
    skipped = [r["name"] for r in report["operators"] if "float32" not in r["dtypes"]]
    lines += [
        "",
        f"Not tried ({len(skipped)}): no float32 sample that eager runs on CPU. "
        + ", ".join(f"`{n}`" for n in skipped),
        "",
    ]
    return "\n".join(lines)


def _write(report: dict[str, Any], json_path: Path, markdown_path: Path) -> None:
    atomic_write_text(json_path, rows_json(report, "operators"))
    atomic_write_text(markdown_path, markdown(report))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", help="OpInfo names (default: every operator)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--samples", type=int, default=4, help="float32 samples per operator")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per export")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "coverage.json")
    parser.add_argument("--markdown", type=Path, default=ROOT / "docs" / "coverage.md")
    parser.add_argument("--print", action="store_true", help="print each row, write nothing")
    parser.add_argument(
        "--render", action="store_true", help="rewrite the markdown from --json, run nothing"
    )
    options = parser.parse_args(argv)
    if options.render:
        report = json.loads(options.json.read_text(encoding="utf-8"))
        _write(report, options.json, options.markdown)
        return 0
    names = _all_names(options.ops)
    started = time.monotonic()
    results = run(names, options.jobs, options.samples, options.timeout)
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {options.jobs} processes",
        "seconds": time.monotonic() - started,
        "versions": _versions(),
        "config": {"samples": options.samples, "timeout": options.timeout},
        "summary": summarize(results),
        "operators": results,
    }
    if options.print:
        for result in results:
            for dtype, rows in result["dtypes"].items():
                for row in rows:
                    cells = "  ".join(f"{e}={row[e]}" for e in EXPORTERS)
                    print(f"{result['name']} {dtype} {row['input']}: {cells}")
        print(json.dumps(report["summary"], indent=1))
        return 0
    _write(report, options.json, options.markdown)
    summary = report["summary"]
    print(
        f"float32 operators matching eager: dynamo-onnx {summary['float32_good']['dynamo_onnx']}, "
        f"torch.onnx {summary['float32_good']['torch_onnx']} of {summary['operators_tested']}; "
        f"only torch.onnx: {len(summary['only_torch_onnx'])}; {report['seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
