"""The ``dynamo-onnx`` command: ``export``, ``export-llm``, ``rules``, ``report`` and ``gate``.

Exit codes (also in ``--help`` and docs/ci.md):

* 0: success (exported; gate passed);
* 1: the operation failed (the export failed; the gate found results at or above the level;
  a file or standard output could not be written: DO902);
* 2: usage error (bad options or values: DO109; an unreadable log: DO903; a passed gate's
  file that cannot be written: DO902, so that the gate's 1 always means findings);
* 3: exported, but failed under ``--warnings-as-errors`` (the model is still written);
* 130: interrupted (Ctrl-C): one line on stderr, the reports asked for written with the
  findings so far and DO143, no model file.

Whatever a user can cause ends in a :class:`~dynamo_onnx.cli.exit_codes.CommandError`, which
:func:`main` prints as ``dynamo-onnx COMMAND: [DOnnn name] message`` and the rule's fix, and
turns into its exit code: no traceback. A reader that stops early (``| head``) is not an
error.

This module holds :func:`main` and the parser's assembly; each command is a module of this
package with its ``add_parser`` and ``run`` (a new command is a new module, added to
``COMMANDS``). The modules that only read logs and the catalog (``rules``, ``report``,
``gate``) import no torch: the exporting ones import it when they run.
"""

from __future__ import annotations

import argparse
import gc
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from dynamo_onnx.cli import export, export_llm, gate, report, rules
from dynamo_onnx.cli.exit_codes import EXIT_CODES_HELP, EXIT_INTERRUPTED, EXIT_OK, CommandError
from dynamo_onnx.cli.output import emit

__all__ = ["console_main", "main"]

#: The commands, in the order ``--help`` lists them.
COMMANDS = (export, export_llm, rules, report, gate)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynamo-onnx",
        description="A diagnostics-first PyTorch to ONNX exporter.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print the versions of dynamo-onnx, torch, onnx, onnxscript and onnxruntime",
    )
    commands = parser.add_subparsers(dest="command")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def _versions() -> str:
    from dynamo_onnx.versions import package_version, tool_versions

    tools = ", ".join(f"{name} {version}" for name, version in tool_versions().items())
    return f"dynamo-onnx {package_version()} ({tools})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    # torch's own deprecation chatter is not the user's concern on a terminal.
    warnings.filterwarnings("ignore", category=FutureWarning)
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 on bad options
    try:
        if args.version:
            emit(_versions())
            return EXIT_OK
        if args.command is None:
            parser.error("give a command (export, export-llm, rules, report, gate) or --version")
        return int(args.func(args))
    except CommandError as exc:
        command = f"dynamo-onnx {args.command}" if args.command else "dynamo-onnx"
        print(f"{command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:  # Ctrl-C outside an export (a second one while reporting)
        command = f"dynamo-onnx {args.command}" if args.command else "dynamo-onnx"
        print(f"{command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def console_main() -> NoReturn:
    """The ``dynamo-onnx`` command (and ``python -m dynamo_onnx.cli``): :func:`main`, then the
    process ends.

    Before it ends, the objects the export left (torch's and sympy's, millions of them) are
    frozen out of the garbage collector: the interpreter's final collections would walk
    them all (a sizeable share of a small export's command: docs/performance.md) to free
    memory the process gives back on exit anyway. Only here: :func:`main` called in a caller's process leaves
    its collector alone."""
    code = main()
    gc.freeze()
    sys.exit(code)
