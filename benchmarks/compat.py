"""``make compat``: a differential test of dynamo-onnx against torch.onnx on generated models.

Each case (benchmarks/compat_models.py) is a small Python file: a model from one family
(elementwise, reductions, matmul, conv/pool, indexing, reshape, normalization, attention,
embedding, control flow, buffers, in-place mutations, output and input structures, a
transformer block) and the export call a user would write (positional or ``kwargs=``,
``input_names``/``output_names``, ``dynamic_axes``, ``dynamic_shapes`` as a dict by name or a
tuple by position, nested for nested inputs, ``Dim``/``Dim.AUTO``/``Dim.DYNAMIC``/names, an
``opset_version`` from 17 to 23, a ``torch.export.export``ed program, ``dynamo_export``).

The same function exports the case with ``dynamo_onnx`` and with ``torch.onnx`` (same
arguments), each model runs in ONNX Runtime at the example size and at a second size of
every dimension asked dynamic (one the case's own ExportedProgram accepts), and each is compared
with eager. Verdicts:

- ``agree``: both match eager (everywhere they were run);
- ``ours-only``: dynamo-onnx fails (export, run or values) where torch.onnx matches: a bug;
- ``torch-only``: torch.onnx fails where dynamo-onnx matches;
- ``both-fail``.

A failed dynamo-onnx export must name a rule and a line of the case file (the user's code):
one that does not is a bug whatever torch.onnx does. Cases run in worker processes (their
stdout and stderr, where torch.onnx logs, go to /dev/null), with a time limit per export.
Writes docs/compat.json (every case) and docs/compat.md (the figures and each disagreement).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import datetime
import importlib.util
import json
import multiprocessing
import os
import platform
import re
import resource
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compat_models  # a sibling module, found from this file's folder
from workers import Timeout, quiet, rows_json, time_limit  # likewise

from dynamo_onnx.files import atomic_write_text  # the one atomic writer

ROOT = Path(__file__).resolve().parent.parent
EXPORTERS = ("dynamo_onnx", "torch_onnx")
VERDICTS = ("agree", "ours-only", "torch-only", "both-fail", "invalid", "ours-match")
#: ``--reference``: torch.onnx on every case, or only on a case dynamo-onnx does not match
#: (a quicker run that finds the same bugs: a case of ours that matches eager is no bug
#: whatever torch.onnx does; its verdict is then ``ours-match``).
REFERENCES = ("always", "on-failure")
#: Rules that say only which pass failed: without a user line they explain nothing.
GENERIC_RULES = frozenset({"DO100", "DO200", "DO300", "DO400", "DO500", "DO600", "DO900"})


@dataclasses.dataclass
class Outcome:
    """What happened to one case with one exporter."""

    #: match | export-failed | run-failed | mismatch | timeout | crash | not-run (the worker
    #: died in the other exporter's run; torch.onnx with --reference on-failure when ours
    #: matched), or caller-failed: the
    #: case's code failed before it called the exporter (its own torch.export.export)
    status: str
    rule: str | None = None
    detail: str = ""
    #: the index in the case's sizes where running or comparing failed
    size: int | None = None
    #: dynamo-onnx: the line of the case file its error finding names (None: no user line)
    line: int | None = None
    #: dynamo-onnx: the rule ids of its warnings on a successful export
    warnings: list[str] = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------------------
# In the worker processes
# --------------------------------------------------------------------------------------


def _tensors(value: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    return [leaf.detach() for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def _load(case: compat_models.Case, directory: Path) -> tuple[Any, Path]:
    path = directory / f"{case.name}.py"
    path.write_text(case.source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(case.name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def _eager(module: Any, size: dict[str, int]) -> list[Any]:
    import torch

    torch.manual_seed(0)
    model = module.Model().eval()
    args, kwargs = module.inputs(size)
    return [t.clone() for t in _tensors(model(*args, **kwargs))]


def _first_line(error: BaseException) -> str:
    message = str(error).strip()
    if "## Exception summary" in message:
        message = message.split("## Exception summary", 1)[1]
    text = [line.strip() for line in message.splitlines() if line.strip()]
    return (" ".join(text[:3]) if text else type(error).__name__)[:300]


def _rule_of(error: BaseException) -> str:
    """dynamo-onnx's rule id, or for torch.onnx the error's class (and its cause's)."""
    rule = getattr(error, "rule_id", None)
    if rule:
        return str(rule)
    cause = error.__cause__ or error.__context__
    if cause is not None and type(error).__name__ in ("TorchExportError", "ConversionError"):
        return f"{type(error).__name__}({type(cause).__name__})"
    return type(error).__name__


def _user_line(error: BaseException, path: Path) -> int | None:
    """The line of the case file that dynamo-onnx's error findings name, if one does."""
    diagnostics = getattr(error, "diagnostics", None)
    for finding in getattr(diagnostics, "findings", ()):
        if finding.level.name != "ERROR":
            continue
        for location in finding.locations:
            if Path(location.path).name == path.name:
                return location.line
    return None


def _entered(error: BaseException, exporter: Any) -> bool:
    """Whether ``error`` went through the exporter's code: a case's own
    ``torch.export.export(...)`` call can fail before either exporter is called."""
    package = str(Path(exporter.__file__).parent)
    frames = traceback.extract_tb(error.__traceback__)
    return any(frame.filename.startswith(package) for frame in frames)


class _Given(Exception):
    """What :class:`_Probe` raises: the first argument the case's ``export`` passed on."""

    def __init__(self, model: Any) -> None:
        super().__init__("given")
        self.model = model


class _Probe:
    """An exporter that exports nothing: it raises what the case's ``export`` gives it, so
    the harness sees the ExportedProgram a case makes without standing between the case and
    the real exporter (whose error findings locate the line that called it)."""

    __name__ = "compat.probe"

    def export(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        raise _Given(model)


def given_program(module: Any, size: dict[str, int]) -> Any:
    """The ``torch.export``ed program the case gives the exporter, or None (it gives a
    module, or its own ``torch.export.export`` fails: the exporters' runs say so)."""
    import torch

    torch.manual_seed(0)
    args, kwargs = module.inputs(size)
    try:
        module.export(_Probe(), module.Model().eval(), args, kwargs)
    except _Given as given:
        return given.model if isinstance(given.model, torch.export.ExportedProgram) else None
    except Exception:
        return None
    return None


def accepts(program: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether ``program`` (an ExportedProgram) takes inputs of these sizes: a dimension
    torch.export fixed (a ``Dim.AUTO`` it specialized) is static, a symbol stays in its
    range. Read from the program's placeholders and ``range_constraints``, as its own guards
    check them: a size it refuses is outside what the user exported, whatever an ONNX model
    of it then does."""
    import torch
    import torch.utils._pytree as pytree

    spec = program.call_spec.in_spec
    if spec is not None and spec.num_children == 2 and kwargs:
        # the program flattens keyword arguments in its signature's order
        order = spec.children_specs[1].context or []
        kwargs = {key: kwargs[key] for key in order if key in kwargs}
    leaves = pytree.tree_leaves((tuple(args), kwargs))
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    wanted = [placeholders[name].meta.get("val") for name in program.graph_signature.user_inputs]
    for leaf, want in zip(leaves, wanted):
        if not (isinstance(leaf, torch.Tensor) and isinstance(want, torch.Tensor)):
            continue
        if leaf.dim() != want.dim():
            return False
        for size, dim in zip(leaf.shape, want.shape):
            # a specialized Dim.AUTO can stay a SymInt whose expression is a number
            expr = dim.node.expr if isinstance(dim, torch.SymInt) else dim
            if getattr(expr, "is_number", True):
                if size != int(expr):
                    return False
                continue
            bounds = program.range_constraints.get(expr)
            if bounds is not None and not bounds.lower <= size <= bounds.upper:
                return False
    return True


def _compare(actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """Why ``actual`` is not eager's ``expected``, or None when it is."""
    import torch

    if len(actual) != len(expected):
        return f"{len(actual)} outputs, eager has {len(expected)}"
    for index, (got, want) in enumerate(zip(actual, expected)):
        if got.shape != want.shape or got.dtype != want.dtype:
            return (
                f"output {index}: {str(got.dtype)[6:]}{list(got.shape)}, "
                f"eager {str(want.dtype)[6:]}{list(want.shape)}"
            )
        try:
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4, equal_nan=True)
        except AssertionError as error:
            lines = [line for line in str(error).splitlines() if line.strip()]
            return f"output {index}: " + " ".join(lines[:3])[:300]
    return None


def _run_exporter(
    exporter: str,
    module: Any,
    path: Path,
    sizes: Sequence[dict[str, int]],
    expected: Sequence[Sequence[Any]],
    timeout: int,
) -> Outcome:
    import torch

    import dynamo_onnx

    onnx = dynamo_onnx if exporter == "dynamo_onnx" else torch.onnx
    torch.manual_seed(0)
    model = module.Model().eval()
    args, kwargs = module.inputs(sizes[0])
    try:
        with quiet(), time_limit(timeout):
            try:
                program = module.export(onnx, model, args, kwargs)
            except Timeout:
                raise
            except Exception as error:  # every failure is a data point here
                status = "export-failed" if _entered(error, onnx) else "caller-failed"
                line = _user_line(error, path) if exporter == "dynamo_onnx" else None
                return Outcome(status, _rule_of(error), _first_line(error), line=line)
            found = []
            if exporter == "dynamo_onnx":
                found = sorted(
                    {f.rule.id for f in program.diagnostics.findings if f.level.name == "WARNING"}
                )
            for index, (size, want) in enumerate(zip(sizes, expected)):
                args, kwargs = module.inputs(size)
                try:
                    got = _tensors(program(*args, **kwargs))
                except Timeout:
                    raise
                except Exception as error:
                    rule = type(error).__name__
                    return Outcome("run-failed", rule, _first_line(error), index, warnings=found)
                problem = _compare(got, want)
                if problem is not None:
                    return Outcome("mismatch", None, problem, index, warnings=found)
    except Timeout as error:
        return Outcome("timeout", None, str(error))
    return Outcome("match", warnings=found)


def verdict_of(ours: Outcome, theirs: Outcome) -> tuple[str, str | None]:
    """The case's verdict, and why it is a bug when it is one."""
    if "caller-failed" in (ours.status, theirs.status):
        return "invalid", None  # the case's own code failed before an exporter ran
    if ours.status == "match" and theirs.status == "not-run":
        return "ours-match", None  # --reference on-failure: torch.onnx had nothing to decide
    good_ours, good_theirs = ours.status == "match", theirs.status == "match"
    verdict = (
        "agree"
        if good_ours and good_theirs
        else "ours-only"
        if good_theirs
        else "torch-only"
        if good_ours
        else "both-fail"
    )
    bug = None
    if verdict == "ours-only":
        bug = f"dynamo-onnx {ours.status}, torch.onnx matches eager"
    if ours.status == "export-failed" and ours.line is None:
        generic = " (a generic rule)" if ours.rule in GENERIC_RULES else ""
        bug = f"{ours.rule}{generic} names no line of the user's code"
    return verdict, bug


def check_case(
    seed: int, index: int, timeout: int, directory: str, reference: str = "always"
) -> dict[str, Any]:
    """One case with both exporters (with ``reference="on-failure"``, torch.onnx only when
    dynamo-onnx does not match eager): its row of docs/compat.json."""
    case = compat_models.generate(seed, index)
    # present while the case runs: after a worker dies, the parent knows which case it ran
    started = Path(directory) / f"{case.name}.started"
    started.touch()
    row: dict[str, Any] = {
        "index": index,
        "family": case.family,
        "title": case.title,
        "form": case.form,
        "dynamic": list(case.dynamic),
    }
    sizes = case.sizes()
    try:
        with quiet():
            module, path = _load(case, Path(directory))
            # a size the case's own ExportedProgram refuses is no size to compare at
            program = given_program(module, sizes[0])
            if program is not None:
                row["outside"] = [
                    i for i, size in enumerate(sizes) if not accepts(program, *module.inputs(size))
                ]
                sizes = [size for i, size in enumerate(sizes) if i not in row["outside"]]
            expected = [_eager(module, size) for size in sizes]
    except Exception as error:  # the generator made a model eager rejects
        row.update(verdict="invalid", detail=_first_line(error), source=case.source)
        started.unlink()
        return row
    names = [f"out{i}" for i in range(len(expected[0]))]
    source = case.source.replace(compat_models.OUTPUT_NAMES_LINE, f"OUTPUT_NAMES = {names!r}", 1)
    path.write_text(source, encoding="utf-8")
    module.OUTPUT_NAMES = names
    outcomes: dict[str, Outcome] = {}
    # torch.onnx first: a crash in ours still has torch's outcome; on-failure, ours first
    order = ("torch_onnx", "dynamo_onnx") if reference == "always" else EXPORTERS
    for exporter in order:
        if reference == "on-failure" and exporter == "torch_onnx":
            if outcomes["dynamo_onnx"].status == "match":
                outcomes[exporter] = Outcome("not-run")
                continue
        done = {e: dataclasses.asdict(o) for e, o in outcomes.items()}
        started.write_text(json.dumps({"stage": exporter, "done": done}), encoding="utf-8")
        outcomes[exporter] = _run_exporter(exporter, module, path, sizes, expected, timeout)
    outcomes = {e: outcomes[e] for e in EXPORTERS}
    verdict, bug = verdict_of(outcomes["dynamo_onnx"], outcomes["torch_onnx"])
    row.update({e: dataclasses.asdict(o) for e, o in outcomes.items()})
    row.update(verdict=verdict, bug=bug)
    if verdict != "agree" or bug:
        row["source"] = source
    path.unlink(missing_ok=True)
    started.unlink()
    return row


def _worker_init() -> None:
    """One thread per worker; the exporters' output to /dev/null, the results come back as
    data."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


# --------------------------------------------------------------------------------------
# In the parent: schedule, summarize, write
# --------------------------------------------------------------------------------------


#: Cases per pool: a fresh pool of workers for each batch keeps their memory in check (the
#: executor's own max_tasks_per_child broke the pool on Python 3.11).
BATCH = 100


def run(
    seed: int,
    indices: Sequence[int],
    jobs: int,
    timeout: int = 60,
    progress: bool = False,
    reference: str = "always",
) -> list[dict[str, Any]]:
    """Every case on ``jobs`` processes, ``BATCH * jobs`` cases per pool of workers (``jobs=0``:
    in this process, one after the other: no worker to start, and a debugger stops in the
    case; a crash takes this process down); torch.onnx on every case, or with
    ``reference="on-failure"`` on those dynamo-onnx does not match."""
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, not {reference!r}")
    if jobs == 0:
        with tempfile.TemporaryDirectory(prefix="compat-") as directory:
            return [check_case(seed, i, timeout, directory, reference) for i in indices]
    results: dict[int, dict[str, Any]] = {}
    started = time.monotonic()
    size = BATCH * jobs
    with tempfile.TemporaryDirectory(prefix="compat-") as directory:
        for first in range(0, len(indices), size):
            batch = list(indices[first : first + size])
            for row in _run_batch(seed, batch, jobs, timeout, Path(directory), reference):
                results[row["index"]] = row
                if progress and (row["verdict"] != "agree" or row.get("bug")):
                    print(_line(row), flush=True)
            if progress:
                elapsed = time.monotonic() - started
                print(f"{len(results)}/{len(indices)} cases, {elapsed:.0f} s", flush=True)
    return [results[i] for i in indices]


def _run_batch(
    seed: int, indices: list[int], jobs: int, timeout: int, directory: Path, reference: str
) -> Iterator[dict[str, Any]]:
    """The rows of ``indices``. When a worker dies, the pending cases run again in a new
    pool; those that were running (their ``.started`` file is left) are retried once, then
    reported as a crash."""
    attempts: collections.Counter[int] = collections.Counter()
    done: set[int] = set()
    context = multiprocessing.get_context("spawn")
    pending = list(indices)
    while pending:
        # a case that was running when a worker died runs again alone: a crash then is its own
        suspects = [i for i in pending if attempts[i]]
        group, workers = (suspects[:1], 1) if suspects else (pending, jobs)
        with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=context, initializer=_worker_init
        ) as pool:
            futures = {
                pool.submit(check_case, seed, i, timeout, str(directory), reference): i
                for i in group
            }
            for future in concurrent.futures.as_completed(futures):
                index = futures[future]
                try:
                    row = future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    marker = directory / f"case_{seed}_{index}.started"
                    if not marker.exists():
                        continue  # waiting when another case killed the worker: run again
                    stage = json.loads(marker.read_text(encoding="utf-8") or "{}")
                    marker.unlink()
                    attempts[index] += 1
                    if attempts[index] < 2:
                        continue
                    row = _crashed(seed, index, stage)
                except Exception as error:
                    row = _crashed(seed, index, {"detail": _first_line(error)})
                done.add(index)
                yield row
        pending = [i for i in pending if i not in done]


def _line(row: dict[str, Any]) -> str:
    """A disagreement as one line of progress output."""
    ours = row.get("dynamo_onnx", {})
    bug = " BUG" if row.get("bug") else ""
    detail = ours.get("detail", row.get("detail", ""))
    return (
        f"case {row['index']} {row['verdict']}{bug} {row['family']} / {row['form']}: "
        f"{ours.get('status')} {ours.get('rule')} {detail}"
    )[:300]


def _crashed(seed: int, index: int, stage: dict[str, Any]) -> dict[str, Any]:
    """The row of a case whose worker died twice (a segmentation fault in ONNX Runtime...):
    the exporter that was running crashed, the one that ran before keeps its outcome."""
    case = compat_models.generate(seed, index)
    crashed = stage.get("stage")
    detail = stage.get("detail") or f"the worker process died while running {crashed}"
    outcomes = {e: dataclasses.asdict(Outcome("not-run")) for e in EXPORTERS}
    outcomes.update(stage.get("done", {}))
    if crashed in EXPORTERS:
        outcomes[crashed] = dataclasses.asdict(Outcome("crash", None, detail))
    else:
        outcomes = {e: dataclasses.asdict(Outcome("crash", None, detail)) for e in EXPORTERS}
    ours, theirs = (Outcome(**outcomes[e]) for e in EXPORTERS)
    verdict, bug = verdict_of(ours, theirs)
    return {
        "index": index,
        "family": case.family,
        "title": case.title,
        "form": case.form,
        "dynamic": list(case.dynamic),
        **outcomes,
        "verdict": verdict,
        "bug": bug,
        "source": case.source,
    }


def _signature(outcome: dict[str, Any]) -> str:
    """What a failure says, without the sizes and names that differ between cases."""
    detail = re.sub(r"(?<![A-Za-z0-9])\d+", "N", outcome.get("detail") or "")  # DO110 stays
    detail = re.sub(r"case_N_N", "case", detail)
    return f"{outcome['status']} {outcome.get('rule') or ''}: {detail[:120]}".strip()


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures: verdicts overall, by family and by call form, and the distinct bugs."""
    valid = [r for r in rows if r["verdict"] != "invalid"]
    by_family: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_form: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in valid:
        by_family[row["family"]][row["verdict"]] += 1
        by_form[row["form"]][row["verdict"]] += 1
    bugs: dict[str, list[int]] = collections.defaultdict(list)
    torch_only: dict[str, list[int]] = collections.defaultdict(list)
    both: dict[str, list[int]] = collections.defaultdict(list)
    warned: dict[str, list[int]] = collections.defaultdict(list)
    for row in valid:
        ours, theirs = row["dynamo_onnx"], row["torch_onnx"]
        if row["bug"]:
            bugs[f"{row['family']}: {_signature(ours)}"].append(row["index"])
        elif row["verdict"] == "torch-only":
            torch_only[f"{row['family']}: {_signature(theirs)}"].append(row["index"])
        elif row["verdict"] == "both-fail":
            both[f"{row['family']}: {_signature(ours)}"].append(row["index"])
        if row["verdict"] in ("agree", "ours-match") and ours.get("warnings"):
            warned[f"{row['family']} {row['title']}: {', '.join(ours['warnings'])}"].append(
                row["index"]
            )
    counts = collections.Counter(r["verdict"] for r in rows)
    return {
        "cases": len(rows),
        "verdicts": {v: counts[v] for v in VERDICTS},
        "bugs": sum(1 for r in valid if r["bug"]),
        "models": len({(r["family"], r["title"]) for r in valid}),
        "forms": len({r["form"] for r in valid}),
        "by_family": {k: dict(v) for k, v in sorted(by_family.items())},
        "by_form": {k: dict(v) for k, v in sorted(by_form.items())},
        "bug_groups": dict(sorted(bugs.items())),
        "torch_only_groups": dict(sorted(torch_only.items())),
        "both_fail_groups": dict(sorted(both.items())),
        "agree_with_warnings": dict(sorted(warned.items())),
    }


def _cpu_seconds() -> float:
    """User and system time of this process and its finished workers."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    packages = ("torch", "onnxscript", "onnx-ir", "onnx", "onnxruntime", "dynamo-onnx")
    return {p: version(p) for p in packages}


def _groups(title: str, groups: dict[str, list[int]], limit: int = 8) -> list[str]:
    if not groups:
        return [f"### {title}: none", ""]
    lines = [f"### {title}", "", "| cases | what happens | e.g. |", "|---:|---|---|"]
    for key, indices in sorted(groups.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(str(i) for i in indices[:limit])
        text = key.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {len(indices)} | {text} | {shown} |")
    return [*lines, ""]


def later_run(run: dict[str, Any]) -> dict[str, Any]:
    """What docs/compat.md keeps of a smaller run beside the full one (``--add-run``): its
    circumstances, verdicts and bug groups, with the notes said of it."""
    config, summary = run["config"], run["summary"]
    return {
        "date": run["date"],
        "machine": run["machine"],
        "seconds": run["seconds"],
        "cpu_seconds": run.get("cpu_seconds", 0),
        "seed": config["seed"],
        "start": config["start"],
        "cases": summary["cases"],
        "reference": config.get("reference", "always"),
        "verdicts": summary["verdicts"],
        "bugs": summary["bugs"],
        "bug_groups": summary["bug_groups"],
        "notes": run.get("notes", []),
    }


def _later_runs(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The section of the smaller runs made since the full one, each in a row."""
    if not runs:
        return []
    columns = ("agree", "ours-match", "ours-only", "torch-only", "both-fail", "invalid")
    lines = [
        "",
        "## Later runs",
        "",
        "Smaller runs made since the run above (`--reference on-failure`: torch.onnx only "
        "where dynamo-onnx does not match eager), kept beside it with `--add-run`.",
        "",
        "| date | seed | cases | reference | " + " | ".join(columns) + " | bugs | time |",
        "|---|---:|---|---|" + "---:|" * len(columns) + "---:|---|",
    ]
    for run in runs:
        first, count = run["start"], run["cases"]
        counts = " | ".join(str(run["verdicts"].get(v, 0)) for v in columns)
        lines.append(
            f"| {run['date']} | {run['seed']} | {first} to {first + count - 1} | "
            f"{run['reference']} | {counts} | {run['bugs']} | {run['seconds']:.0f} s "
            f"({run['cpu_seconds']:.0f} s of CPU), {run['machine']} |"
        )
    lines.append("")
    for run in runs:
        for group, indices in run["bug_groups"].items():
            text = group.replace("|", "\\|").replace("\n", " ")
            lines.append(f"- seed {run['seed']}, cases {indices}: {text}")
        lines += [f"- seed {run['seed']}: {note}." for note in run["notes"]]
    return lines


def markdown(report: dict[str, Any]) -> str:
    """docs/compat.md: what runs, the figures, and every group of disagreements."""
    summary = report["summary"]
    verdicts = summary["verdicts"]
    valid = summary["cases"] - verdicts["invalid"]
    lines = [
        "# Differential test: dynamo-onnx against torch.onnx",
        "",
        "Written by `make compat` (`benchmarks/compat.py`); do not edit by hand.",
        f"Run on {report['date']}, {report['machine']}, in {report['seconds']:.0f} s "
        f"({report.get('cpu_seconds', 0):.0f} s of CPU) "
        f"(seed {report['config']['seed']}, {summary['cases']} cases); "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        + ".",
        # rows replaced since by a run of that case alone (``--case N``), then ``--render``
        *(f"Since: {note}." for note in report.get("notes", [])),
        "",
        "## What it runs",
        "",
        "Each case is a small Python file generated from the seed (`benchmarks/compat_models.py`):"
        " a model from one family (elementwise, reductions, matmul/linear, conv and pooling, "
        "indexing, gather and scatter, reshape/view/permute/cat/split, normalization, "
        "`F.scaled_dot_product_attention` and `nn.MultiheadAttention`, embeddings, `torch.cond`, "
        "`while_loop`, `scan` and `map`, registered buffers, in-place mutations of buffers and "
        "inputs (through views too), `None`, dict, list and nested outputs, keyword and nested "
        "inputs, a transformer block) and the export call a user writes: positional or "
        "`kwargs=`, `input_names`/`output_names`, `dynamic_axes` (dict or list, with or without "
        "`input_names`), `dynamic_shapes` as a dict by parameter name, a tuple by position or "
        "nested (`Dim`, `Dim(min, max)`, `Dim.AUTO`, `Dim.DYNAMIC`, names), `opset_version` 17 "
        "to 23, a `torch.export.export`ed program, and `dynamo_onnx.dynamo_export` (with "
        "`ExportOptions(dynamic_shapes=True)` or not; torch.onnx gets `Dim.AUTO` on every "
        "dimension for the latter).",
        "",
        "The case's `export(onnx, model, args, kwargs)` runs with `onnx` = `dynamo_onnx` and "
        "= `torch.onnx` (`dynamo=True`), each in a worker process whose output goes to "
        "/dev/null, with a time limit. Each model runs in ONNX Runtime at the example size "
        "and at a second size of every dimension asked dynamic, and is compared with eager "
        "(rtol 1e-3, atol 1e-4, shapes and dtypes exact); a size the case's own "
        "`torch.export.export`ed program refuses (a `Dim.AUTO` torch.export fixed at its "
        "example size: the program's guard, and dynamo-onnx's static dimension, reject it) is "
        "not compared, for either exporter. **agree**: both match eager; "
        "**ours-only**: dynamo-onnx fails to export, to run, or differs where torch.onnx "
        "matches (a bug); **torch-only**: the reverse; **both-fail**. A failed dynamo-onnx "
        "export whose error names no line of the case file is a bug too. `python "
        "benchmarks/compat.py --case N` prints a case's file (the repro) and its row; "
        "`--reference on-failure` runs torch.onnx only where dynamo-onnx does not match "
        "(verdict **ours-match** otherwise); "
        "`make test` runs a fixed sample (tests/test_compat.py).",
        "",
        "## Figures",
        "",
        "| | cases |",
        "|---|---:|",
        f"| tried (models x call forms): {summary['models']} distinct models, "
        f"{summary['forms']} call forms | {valid} |",
        f"| agree | {verdicts['agree']} |",
        *(
            [f"| dynamo-onnx matches, torch.onnx not run (`--reference on-failure`) | {n} |"]
            if (n := verdicts.get("ours-match", 0))
            else []
        ),
        f"| **ours-only failures** | **{verdicts['ours-only']}** |",
        f"| torch.onnx-only failures | {verdicts['torch-only']} |",
        f"| both fail | {verdicts['both-fail']} |",
        f"| bugs (ours-only, or an error with no user line) | {summary['bugs']} |",
        f"| not compared: eager, or the case's own `torch.export.export`, rejects the model | {verdicts['invalid']} |",
        "",
    ]
    columns = [*VERDICTS[:4], *(["ours-match"] if verdicts.get("ours-match") else [])]
    for title, groups in (("call form", summary["by_form"]), ("family", summary["by_family"])):
        lines += [f"| {title} | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
        for name, counts in groups.items():
            lines.append(f"| {name} | " + " | ".join(str(counts.get(v, 0)) for v in columns) + " |")
        lines.append("")
    lines.pop()
    lines += _later_runs(report.get("later_runs", []))
    lines += ["", "## Disagreements", ""]
    lines += _groups("Bugs (ours-only failures, errors with no user line)", summary["bug_groups"])
    lines += _groups("torch.onnx-only failures", summary["torch_only_groups"])
    lines += _groups("Both fail (dynamo-onnx's outcome)", summary["both_fail_groups"])
    lines += _groups("Agree, with dynamo-onnx warnings (rule ids)", summary["agree_with_warnings"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="how many cases")
    parser.add_argument("--start", type=int, default=0, help="index of the first case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 2, help="worker processes; 0: this one"
    )
    parser.add_argument("--timeout", type=int, default=60, help="seconds per export and run")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "compat.json")
    parser.add_argument("--markdown", type=Path, default=ROOT / "docs" / "compat.md")
    parser.add_argument("--case", type=int, help="print this case's file and row, write nothing")
    parser.add_argument(
        "--reference",
        choices=REFERENCES,
        default="always",
        help="run torch.onnx on every case, or only where dynamo-onnx does not match eager "
        "(finds the same bugs in about a sixth of the time; no agree/torch-only figures)",
    )
    parser.add_argument(
        "--render", action="store_true", help="recount --json and rewrite both files, run nothing"
    )
    parser.add_argument(
        "--add-run",
        type=Path,
        help="keep this smaller run's json in --json's later runs (and its --note), run nothing",
    )
    parser.add_argument("--note", action="append", default=[], help="with --add-run: a note")
    options = parser.parse_args(argv)
    if options.add_run:
        report = json.loads(options.json.read_text(encoding="utf-8"))
        smaller = json.loads(options.add_run.read_text(encoding="utf-8"))
        smaller["notes"] = [*smaller.get("notes", []), *options.note]
        report.setdefault("later_runs", []).append(later_run(smaller))
        atomic_write_text(options.json, rows_json(report, "cases"))
        atomic_write_text(options.markdown, markdown(report))
        return 0
    if options.render:
        report = json.loads(options.json.read_text(encoding="utf-8"))
        report["summary"] = summarize(report["cases"])
        atomic_write_text(options.json, rows_json(report, "cases"))
        atomic_write_text(options.markdown, markdown(report))
        return 0
    if options.case is not None:
        print(compat_models.generate(options.seed, options.case).source)
        [row] = run(options.seed, [options.case], 1, options.timeout, reference=options.reference)
        row.pop("source", None)
        print(json.dumps(row, indent=1))
        return 0
    started = time.monotonic()
    indices = range(options.start, options.start + options.cases)
    rows = run(
        options.seed,
        indices,
        options.jobs,
        options.timeout,
        progress=True,
        reference=options.reference,
    )
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {options.jobs} processes",
        "seconds": time.monotonic() - started,
        # the workers' CPU time: what the run costs on idle cores, whatever else ran meanwhile
        "cpu_seconds": _cpu_seconds(),
        "versions": _versions(),
        "config": {
            "seed": options.seed,
            "start": options.start,
            "timeout": options.timeout,
            "reference": options.reference,
        },
        "summary": summarize(rows),
        "cases": rows,
    }
    atomic_write_text(options.json, rows_json(report, "cases"))
    atomic_write_text(options.markdown, markdown(report))
    summary = report["summary"]
    print(
        f"{summary['cases']} cases: "
        + ", ".join(f"{v} {n}" for v, n in summary["verdicts"].items())
        + f"; bugs {summary['bugs']}; {report['seconds']:.0f} s, "
        f"{report['cpu_seconds']:.0f} s of CPU"
    )
    return 1 if summary["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
