"""Run the dynamo-onnx command in the test's own process, as ``python -m dynamo_onnx.cli``
runs it in a fresh one: the command's tests pay torch's import once per worker, not once per
call (a fresh process spends most of its time importing torch before the export starts).

What a fresh process gives for free is scoped to the call and restored after it: the working
directory, the variables of ``env``, ``sys.path``, the modules the command imported from the
working directory (``models.py``, ``ops.py``: the next call, in another directory, imports its
own), the warnings filters, and standard output and error (at the Python level). What only a
real process shows stays in subprocess tests (tests/test_cli.py keeps them): the entry point
itself, output written by C++ at the file-descriptor level, a terminal, a full device or a
closed pipe on standard output, and which modules a fresh process loads."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import linecache
import os
import pathlib
import sys
import warnings
from collections.abc import Iterator, Mapping

from dynamo_onnx.cli import main


@dataclasses.dataclass(frozen=True)
class Completed:
    """What ``subprocess.run(..., capture_output=True, text=True)`` returns, for one call."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _forget_modules_under(directory: pathlib.Path) -> None:
    """Drop the modules loaded from ``directory``, as a process that ends forgets them."""
    prefix = str(directory) + os.sep
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.abspath(path).startswith(prefix):
            del sys.modules[name]


def _exit_code(code: object, stderr: io.StringIO) -> int:
    """The exit code of ``sys.exit(code)``, as the interpreter turns it into one."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    stderr.write(f"{code}\n")
    return 1


def run_cli(
    cwd: os.PathLike[str] | str, *args: str, env: Mapping[str, str] | None = None
) -> Completed:
    """``dynamo-onnx ARGS`` in ``cwd``: its exit code and what it printed. An exception the
    command lets escape propagates (a fresh process would print a traceback): the test fails
    on it either way."""
    directory = pathlib.Path(cwd).resolve()
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_path, saved_cwd = list(sys.path), os.getcwd()
    os.chdir(directory)
    try:
        with (
            _environment(env or {}),
            warnings.catch_warnings(),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse: --help, a bad option
                code = _exit_code(exit_.code, stderr)
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        _forget_modules_under(directory)
        linecache.checkcache()
    return Completed(tuple(args), code, stdout.getvalue(), stderr.getvalue())
