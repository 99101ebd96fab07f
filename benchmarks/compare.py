"""dynamo-onnx against ``torch.onnx.export(..., dynamo=True)``, measured in the same run.

For every model and exporter, each repeat runs in a fresh process (so import costs, caches
and peak RSS are the same for both) and measures:

- export wall time, capture through serialization, without optimize on either side
  (and, for dynamo-onnx, the time of each pass), both at opset ``OPSET`` (torch.onnx's
  default);
- save time (each exporter's default: inline weights below 2 GB), peak RSS of the process (``ru_maxrss``);
- ONNX node count and max |ONNX Runtime - eager| of the optimized model;
- ONNX Runtime latency of both optimized models, measured in one more process that runs
  them in turns (ours, theirs, theirs, ours, ...) so that both see the same machine load,
  in two rounds that create the sessions in both orders;
- for dynamo-onnx, what rendering the reports costs: in two more fresh processes (INFO and
  DEBUG), the export, then writing its SARIF log and markdown report at that level, timed
  in the same process so that the ratio does not depend on the machine's load between
  processes. (Findings are always recorded; the levels only change what is rendered.)
  Each repeat runs all of a model's processes back to back;
- with GPT-2 in the run, GPT-2's export (``optimize=False``) against
  ``torch.export.export(strict=False)`` alone and against ``torch.onnx.export(dynamo=True,
  optimize=False)``, each in fresh processes, alternating (``llm_genai.gpt2_overhead``, as
  ``make bench-llm`` measures it): what the exporter adds to capture, in wall and CPU
  seconds, with our export's split by pass.

The figures are medians over the repeats; each has the ratio ours / torch.onnx next to it,
since these machines are shared and only ratios from one run compare. Results go to a JSON
file and a markdown table (``docs/performance.md`` shows the latest).

    python benchmarks/compare.py [--models gpt2-124m,bert-base] [--repeats 3]
        [--json benchmarks/results/results.json] [--markdown benchmarks/results/results.md]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXPORTERS = ("dynamo-onnx", "torch.onnx")
LATENCY_RUNS = 20
#: Both exporters target torch.onnx's default opset, so both may use its operators (``Gelu``).
OPSET = 20

#: metric -> (column title, format); smaller is better for every one
METRICS: dict[str, tuple[str, str]] = {
    "export_s": ("export s", "{:.2f}"),
    "save_s": ("save s", "{:.2f}"),
    "peak_rss_mib": ("peak RSS MiB", "{:.0f}"),
    "nodes": ("ONNX nodes", "{:.0f}"),
    "latency_ms": ("ORT ms (optimized)", "{:.2f}"),
    "max_abs_diff": ("max abs diff", "{:.1e}"),
}


#: The passes shown one by one in the profile (the others are summed).
_PROFILE = (
    "validate",
    "capture",
    "decomposition",
    "translation",
    "finalize",
    "opset-conversion",
    "weight-check",
    "load-check",
)


# -- one measurement, in its own process -----------------------------------------------------


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _count_nodes(model: Any) -> int:
    """Nodes of the graph, its subgraphs and its functions, as ONNX Runtime would see them."""
    import onnx_ir as ir

    total = sum(1 for _ in ir.traversal.RecursiveGraphIterator(model.graph))
    for function in model.functions.values():
        total += sum(1 for _ in ir.traversal.RecursiveGraphIterator(function))
    return total


def _weights_nbytes(model: Any) -> int:
    return sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )


def _flatten(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flatten(v)]
    return []


def _session(path: Path) -> Any:
    from dynamo_onnx.io.sessions import inference_session

    # the machine is shared: one thread is the stable figure
    return inference_session(path, threads=1)


def latencies(workdir: str) -> dict[str, float]:
    """Median ms per run of each exporter's model in ``workdir``, run in alternating turns.

    The session created first runs about 1 % slower, whichever model it holds (an A/A test
    with the same file under both names shows it), so there are two rounds: one creates
    ours first, the other theirs.
    """
    import numpy as np

    feeds_file = np.load(Path(workdir) / "feeds.npz")
    times: dict[str, list[float]] = {e: [] for e in EXPORTERS}
    for creation_order in (EXPORTERS, EXPORTERS[::-1]):
        sessions = {e: _session(Path(workdir) / f"{e}.onnx") for e in creation_order}
        feeds = {}
        for exporter, session in sessions.items():
            names = [i.name for i in session.get_inputs()]
            feeds[exporter] = {n: feeds_file[f"arg{i}"] for i, n in enumerate(names)}
            session.run(None, feeds[exporter])  # warm-up
        for turn in range(LATENCY_RUNS // 2):
            for exporter in EXPORTERS if turn % 2 == 0 else EXPORTERS[::-1]:
                start = time.perf_counter()
                sessions[exporter].run(None, feeds[exporter])
                times[exporter].append((time.perf_counter() - start) * 1000)
        del sessions
    return {e: statistics.median(t) for e, t in times.items()}


def measure(model_name: str, exporter: str, diagnostics: str, workdir: str) -> dict[str, Any]:
    """Export one model with one exporter; called in a fresh process by :func:`main`.

    The optimized model (for the latency process) and the inputs go to ``workdir``.
    """
    warnings.filterwarnings("ignore")
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    from models import MODELS

    torch.manual_seed(0)
    model, args = MODELS[model_name]()
    kwargs: dict[str, Any] = {}
    if args and isinstance(args[-1], dict):  # keyword inputs (a cache): no latency, no diff
        args, kwargs = args[:-1], args[-1]
    with torch.no_grad():  # on a copy: a cache grows when the model is called
        expected = [t.numpy() for t in _flatten(model(*args, **copy.deepcopy(kwargs)))]
    result: dict[str, Any] = {"model": model_name, "exporter": exporter}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        start = time.perf_counter()
        if diagnostics == "defaults":  # each exporter as a user calls it, with no options
            if exporter == "torch.onnx":
                program = torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, verbose=False)
            else:
                import dynamo_onnx

                program = dynamo_onnx.export(model, args, kwargs=kwargs)
            result["export_s"] = time.perf_counter() - start
            result["nodes"] = _count_nodes(program.model)
            return result
        if exporter == "torch.onnx":
            program = torch.onnx.export(
                model,
                args,
                kwargs=kwargs,
                dynamo=True,
                optimize=False,
                verbose=False,
                opset_version=OPSET,
            )
        else:
            import dynamo_onnx

            level = {"off": 20, "info": 20, "debug": 10}[diagnostics]
            options = dynamo_onnx.DiagnosticOptions(verbosity_level=level)
            program = dynamo_onnx.export(
                model,
                args,
                kwargs=kwargs,
                opset_version=OPSET,
                diagnostic_options=options,
                optimize=False,
            )
            result["passes_s"] = {p.name: p.duration_s for p in program.diagnostics.passes}
        result["export_s"] = time.perf_counter() - start
        if diagnostics != "off":
            # What export(..., report=True) adds: both reports from one SARIF log.
            start = time.perf_counter()
            program.diagnostics.save_reports(Path(tmp) / "m.sarif", Path(tmp) / "m.md")
            result["report_s"] = time.perf_counter() - start
            result["report_ratio"] = result["report_s"] / result["export_s"]
            return result
        # As many bytes as the weights, written plainly to a new file just before the save
        # (16 MiB at a time, so that the process's peak does not grow; the file is kept):
        # what the disk and the kernel charge for that many bytes. The first large write of
        # a process pays the kernel's page reclaim (about 0.8 s for 500 MB here); this one
        # does, so both exporters' saves are measured after it, alike.
        chunk = np.ones(16 * 2**20, dtype=np.uint8)
        remaining = _weights_nbytes(program.model)
        start = time.perf_counter()
        with open(Path(tmp) / "plain.bin", "wb") as file:
            while remaining > 0:
                file.write(chunk.data[: min(remaining, chunk.nbytes)])
                remaining -= chunk.nbytes
        result["copy_s"] = time.perf_counter() - start
        del chunk
        start = time.perf_counter()
        program.save(path)  # each exporter's default: one file below 2 GB of weights
        result["save_s"] = time.perf_counter() - start
        result["peak_rss_mib"] = _peak_rss_mib()
        result["file_mib"] = path.stat().st_size / 2**20
        program.optimize()
        result["nodes"] = _count_nodes(program.model)
        if kwargs:
            return result
        optimized = Path(workdir) / f"{exporter}.onnx"
        program.save(optimized, external_data=True)
        del program
        np.savez(Path(workdir) / "feeds.npz", **{f"arg{i}": a.numpy() for i, a in enumerate(args)})
        session = _session(optimized)
        names = [i.name for i in session.get_inputs()]
        outputs = session.run(None, {n: a.numpy() for n, a in zip(names, args)})
        result["max_abs_diff"] = max(
            float(np.abs(np.asarray(o, dtype=np.float64) - e).max())
            for o, e in zip(outputs, expected)
        )
    return result


def imports() -> dict[str, float]:
    """What a fresh process pays before its first export: torch, then ``import dynamo_onnx``
    (the package: options, errors, no torch-bound module), then the first ``export`` (the
    exporter, the passes, onnx, onnxscript, onnx_ir), then torch_lib's table (the registry
    the first export builds). In a fresh process, run by :func:`main`."""
    start = time.perf_counter()
    import torch  # noqa: F401

    after_torch = time.perf_counter()
    import dynamo_onnx

    after_package = time.perf_counter()
    dynamo_onnx.export  # noqa: B018 - the lazy import of the exporter
    after_exporter = time.perf_counter()
    dynamo_onnx.OnnxRegistry()
    after_registry = time.perf_counter()
    return {
        "torch_s": after_torch - start,
        "package_s": after_package - after_torch,
        "exporter_s": after_exporter - after_package,
        "registry_s": after_registry - after_exporter,
    }


# -- the run ---------------------------------------------------------------------------------


def _subprocess(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"error": "\n".join(done.stderr.strip().splitlines()[-15:])}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_worker(model: str, exporter: str, diagnostics: str, workdir: str) -> dict[str, Any]:
    result = _subprocess("--worker", model, exporter, diagnostics, workdir)
    return {"model": model, "exporter": exporter, **result}


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if "error" not in r]
    summary: dict[str, Any] = {key: _median(good, key) for key in METRICS}
    for key in ("copy_s", "file_mib"):
        summary[key] = _median(good, key)
    if good and "passes_s" in good[0]:
        names = good[0]["passes_s"]
        summary["passes_s"] = {n: statistics.median(r["passes_s"][n] for r in good) for n in names}
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        summary["error"] = errors[0]
    return summary


def _machine() -> dict[str, Any]:
    import onnxruntime
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "platform": platform.platform(),
    }


def run(models: list[str], repeats: int, log: Any = sys.stderr) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": _machine(),
        "repeats": repeats,
        "opset": OPSET,
        "models": {},
    }
    sys.path.insert(0, str(HERE))
    from workers import compile_bytecode

    compile_bytecode()  # the exporter as installed: see workers.compile_bytecode
    for model in models:
        runs: dict[str, list[dict[str, Any]]] = {e: [] for e in EXPORTERS}
        defaults: dict[str, list[dict[str, Any]]] = {e: [] for e in EXPORTERS}
        levels: dict[str, list[dict[str, Any]]] = {"info": [], "debug": []}
        for i in range(repeats):
            with tempfile.TemporaryDirectory() as workdir:
                # Alternate who goes first, so that a drift in machine load favours no one.
                for exporter in EXPORTERS if i % 2 == 0 else EXPORTERS[::-1]:
                    runs[exporter].append(_run_worker(model, exporter, "off", workdir))
                if all("error" not in runs[e][-1] for e in EXPORTERS):
                    timing = _subprocess("--latency", workdir)
                    for exporter in EXPORTERS:
                        runs[exporter][-1]["latency_ms"] = timing.get(exporter)
                for level, level_runs in levels.items():
                    level_runs.append(_run_worker(model, "dynamo-onnx", level, workdir))
                for exporter in EXPORTERS if i % 2 == 0 else EXPORTERS[::-1]:
                    defaults[exporter].append(_run_worker(model, exporter, "defaults", workdir))
            for exporter in EXPORTERS:
                print(
                    f"{model:16} {exporter:12} run {i + 1}/{repeats}: {_brief(runs[exporter][-1])}",
                    file=log,
                )
            print(
                f"{model:16} reports: "
                + ", ".join(f"{lv} {_brief_report(rs[-1])}" for lv, rs in levels.items()),
                file=log,
            )
        entry: dict[str, Any] = {e: _summary(runs[e]) for e in EXPORTERS}
        entry["reports"] = {
            level: {
                key: _median([r for r in rs if "error" not in r], key)
                for key in ("export_s", "report_s", "report_ratio")
            }
            for level, rs in levels.items()
        }
        entry["defaults"] = {
            e: {
                key: _median([r for r in defaults[e] if "error" not in r], key)
                for key in ("export_s", "nodes")
            }
            for e in EXPORTERS
        }
        results["models"][model] = entry
    if "gpt2-124m" in models:  # issue 35's target: the plain export against capture alone
        from llm_genai import gpt2_overhead  # the same workers as bench-llm

        results["gpt2_torch_export"] = gpt2_overhead(repeats, log)
    import_runs = [_subprocess("--imports") for _ in range(repeats)]
    results["imports"] = {
        key: _median([r for r in import_runs if "error" not in r], key)
        for key in ("torch_s", "package_s", "exporter_s", "registry_s")
    }
    return results


def _brief_report(run: dict[str, Any]) -> str:
    if "error" in run:
        return "FAILED: " + run["error"].splitlines()[-1]
    return f"export {run['export_s']:.2f} s, reports {run['report_s']:.2f} s"


def _brief(run: dict[str, Any]) -> str:
    if "error" in run:
        return "FAILED: " + run["error"].splitlines()[-1]
    return ", ".join(f"{k}={run[k]:.3g}" for k in METRICS if run.get(k) is not None)


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "n/a"
    return f"{ours / theirs:.2f}×"


def markdown(results: dict[str, Any]) -> str:
    """The results as markdown: one table of figures and ratios, one of diagnostics cost."""
    m = results["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, torch {m['torch']}, "
        f"onnxruntime {m['onnxruntime']}. Both export at opset {results.get('opset', OPSET)}. "
        f"Medians of {results['repeats']} fresh-process runs per exporter; ORT latency of "
        "the optimized models, one thread, both models run in turns in one process; "
        "ratio = dynamo-onnx / torch.onnx (below 1 is better).",
        "",
        "| model | "
        + " | ".join(f"{title} (ours / torch.onnx, ratio)" for title, _ in METRICS.values())
        + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    for model, entry in results["models"].items():
        ours, theirs = entry["dynamo-onnx"], entry["torch.onnx"]
        cells = []
        for key, (_, fmt) in METRICS.items():
            a, b = ours.get(key), theirs.get(key)
            text_a = fmt.format(a) if a is not None else "failed"
            text_b = fmt.format(b) if b is not None else "failed"
            ratio = "" if key == "max_abs_diff" else f", {_ratio(a, b)}"
            cells.append(f"{text_a} / {text_b}{ratio}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Our export time by pass (median seconds; outside the passes: the median export "
        "less the passes' medians, i.e. the exporter's imports before the first pass and the "
        "pipeline's end after the last), and what writing the SARIF log and the markdown "
        "report adds to the export (median seconds, and median of the per-process ratio "
        "report time / export time):",
        "",
        "| model | "
        + " | ".join(_PROFILE)
        + " | other passes | outside the passes | export | reports at INFO | reports at DEBUG |",
        "|---|" + "---|" * (len(_PROFILE) + 5),
    ]
    for model, entry in results["models"].items():
        ours = entry["dynamo-onnx"]
        passes = ours.get("passes_s", {})
        cells = [f"{passes[p]:.2f}" if p in passes else "-" for p in _PROFILE]
        others = [t for p, t in passes.items() if p not in _PROFILE]
        cells.append(f"{sum(others):.2f}" if others else "-")
        # the exporter's imports before the first pass, the pipeline's end after the last
        outside = ours["export_s"] - sum(passes.values()) if ours.get("export_s") else None
        cells.append(f"{outside:.2f}" if outside is not None and passes else "-")
        cells.append(f"{ours['export_s']:.2f}" if ours.get("export_s") else "failed")
        for level in ("info", "debug"):
            r = entry["reports"][level]
            if r.get("report_s") is None:
                cells.append("failed")
            else:
                cells.append(f"+{r['report_s']:.2f} (+{r['report_ratio'] * 100:.1f} %)")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Both exporters at their defaults, as a user calls them (`dynamo_onnx.export(model, "
        "args)` and `torch.onnx.export(model, args, dynamo=True)`: opset 20, optimized), "
        "median export seconds and nodes:",
        "",
        "| model | export s (ours / torch.onnx, ratio) | ONNX nodes (ours / torch.onnx) |",
        "|---|---|---|",
    ]
    for model, entry in results["models"].items():
        ours, theirs = entry["defaults"]["dynamo-onnx"], entry["defaults"]["torch.onnx"]
        a, b = ours.get("export_s"), theirs.get("export_s")
        time_cell = (
            f"{a:.2f} / {b:.2f}, {_ratio(a, b)}" if a is not None and b is not None else "failed"
        )
        nodes = f"{ours.get('nodes') or 'failed'} / {theirs.get('nodes') or 'failed'}"
        lines.append(f"| {model} | {time_cell} | {nodes} |")
    lines += [
        "",
        "Saving against a plain write of as many bytes to a new file (16 MiB `write`s, timed "
        "in the same process just before the save, its file kept; it pays the kernel's cost "
        "of a process's first large write, so both saves are measured after it): how close "
        "each exporter's save is to what the disk and the kernel allow.",
        "",
        "| model | file MiB | save s (ours / torch.onnx) | plain write s | ours / plain | torch.onnx / plain |",
        "|---|---|---|---|---|---|",
    ]
    for model, entry in results["models"].items():
        ours, theirs = entry["dynamo-onnx"], entry["torch.onnx"]
        size, copy_s = ours.get("file_mib"), ours.get("copy_s")
        if size is None or copy_s is None or ours.get("save_s") is None:
            lines.append(f"| {model} | failed | | | | |")
            continue
        their_save = theirs.get("save_s")
        their_copy = theirs.get("copy_s")
        lines.append(
            f"| {model} | {size:.0f} | {ours['save_s']:.2f} / "
            + (f"{their_save:.2f}" if their_save is not None else "failed")
            + f" | {copy_s:.2f} | {_ratio(ours['save_s'], copy_s)} | "
            + (_ratio(their_save, their_copy) if their_save and their_copy else "n/a")
            + " |"
        )
    imported = results.get("imports", {})
    if imported.get("torch_s") is not None:
        lines += [
            "",
            "Imports in a fresh process (median seconds): `import torch`, then "
            "`import dynamo_onnx`, the first use of `dynamo_onnx.export` (the exporter, onnx, "
            "onnxscript, onnx_ir), and the first registry (torch_lib's functions):",
            "",
            "| import torch | import dynamo_onnx | + exporter | + registry | dynamo-onnx beyond torch |",
            "|---|---|---|---|---|",
            f"| {imported['torch_s']:.2f} | {imported['package_s']:.2f} | "
            f"{imported['exporter_s']:.2f} | {imported['registry_s']:.2f} | "
            f"{imported['package_s'] + imported['exporter_s'] + imported['registry_s']:.2f} |",
        ]
    gpt2 = results.get("gpt2_torch_export")
    if gpt2:
        from llm_genai import gpt2_line  # bench-llm's line, the same figures

        lines += ["", gpt2_line(gpt2)]
    errors = [
        (model, exporter, entry[exporter]["error"])
        for model, entry in results["models"].items()
        for exporter in EXPORTERS
        if "error" in entry[exporter]
    ]
    if errors:
        lines += ["", "Failures:", ""]
        lines += [
            f"- {model}, {exporter}: `{err.splitlines()[-1]}`" for model, exporter, err in errors
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(measure(*sys.argv[2:6])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--latency":
        print(json.dumps(latencies(sys.argv[2])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--imports":
        print(json.dumps(imports()))
        return
    sys.path.insert(0, str(HERE))
    from models import MODELS

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(HERE / "results" / "results.json"))
    parser.add_argument("--markdown", default=str(HERE / "results" / "results.md"))
    args = parser.parse_args()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
    results = run(args.models.split(","), args.repeats)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    Path(args.markdown).write_text(table)
    print(table)


if __name__ == "__main__":
    main()
