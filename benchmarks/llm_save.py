"""The streamed save alone (issue 44's "The save"): ``export_llm`` of a checkpoint folder
captured once, then its save timed several times in the same process, ``ir.save`` (the save
before ``io/data_file.py``) and ours alternating, each with its wall time, its user and
system CPU time, and the sha1 of the ``.data`` file written (they must be equal).

    python benchmarks/llm_save.py /tmp/stream/llama13 --precision fp32 --modes ir,1,2,ir,1,2

A mode is ``ir`` (``ir.save``) or the number of tensors made ahead of the write (ours).
The checkpoints are ``benchmarks/llm_memory.py``'s.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx_ir as ir

import dynamo_onnx
from dynamo_onnx.io import data_file, onnx_file
from dynamo_onnx.program import ONNXProgram


class _Done(Exception):
    """Raised from the save to stop ``export_llm`` once the saves were timed."""


def _sha1(path: Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()[:12]


def _time_save(model: ir.Model, mode: str, folder: Path) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.sync()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if mode == "ir":
        ir.save(model, folder / "model.onnx", external_data="model.onnx.data")
    else:
        onnx_file.SAVE_TENSORS_AHEAD = int(mode)  # read by the save at each call
        onnx_file._save_with_data_file(
            model,
            folder / "model.onnx",
            "model.onnx.data",
            data_file.external_values(model, onnx_file.EXTERNAL_THRESHOLD) or [],
            None,
        )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    data = folder / "model.onnx.data"
    row = {
        "mode": mode,
        "wall_s": round(wall, 2),
        "user_s": round(after.ru_utime - before.ru_utime, 2),
        "sys_s": round(after.ru_stime - before.ru_stime, 2),
        "bytes": data.stat().st_size,
        "sha1": _sha1(data),
        "load": round(os.getloadavg()[0], 1),
    }
    shutil.rmtree(folder, ignore_errors=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--modes", default="ir,1,ir,1")
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    args = parser.parse_args()
    work = Path(args.workdir) / "llm_save"

    def timed(program: ONNXProgram, *_: Any, **__: Any) -> None:
        for mode in args.modes.split(","):
            print(_time_save(program.model, mode, work / "out"), flush=True)
        raise _Done

    ONNXProgram.save = timed  # type: ignore[method-assign]
    try:
        dynamo_onnx.export_llm(args.checkpoint, work / "unused", precision=args.precision)
    except _Done:
        pass


if __name__ == "__main__":
    main()
