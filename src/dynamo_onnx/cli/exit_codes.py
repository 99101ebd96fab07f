"""The command's exit codes, and the errors a user can cause that end in them.

Whatever a user can cause ends in a :class:`CommandError`, which ``main`` prints as
``dynamo-onnx COMMAND: [DOnnn name] message`` and the rule's fix, and turns into its exit
code: no traceback.
"""

from __future__ import annotations

from dynamo_onnx.diagnostics.context import rule_text
from dynamo_onnx.rules import catalog

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_WARNINGS = 0, 1, 2, 3
#: Interrupted by SIGINT (Ctrl-C): 128 + 2, what a shell reports for it.
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """\
exit codes:
  0  success: exported, or the gate passed
  1  failure: the export failed, a file or standard output could not be written
     (DO902), or the gate found results at or above --fail-on
  2  usage error: bad options or option values (DO109), MODULE:FACTORY not found or
     raising (DO140), an unreadable SARIF log (DO903), a passed gate's --output or job
     summary that cannot be written (DO902)
  3  exported, but failed under --warnings-as-errors (the model is still written)
  130  interrupted (Ctrl-C): the reports hold the findings so far (DO143)
"""


class CommandError(Exception):
    """Something the user can cause, as its rule's message and the command's exit code.

    :func:`main` is the one place that prints it (``[DOnnn name] message`` and the fix)
    and returns its code; nothing a user can cause reaches them as a traceback."""

    def __init__(self, rule_id: str, code: int, detail: str = "", **fields: object) -> None:
        self.rule = catalog().get(rule_id)
        self.code, self.fields, self.detail = code, fields, detail
        super().__init__(rule_text(self.rule, **fields))

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n{self.detail}" if self.detail else text


class UsageError(CommandError):
    """A command-line value the command cannot take (DO109, exit code 2): ``option`` (the
    option or the value given) ``problem``; ``allowed``."""

    def __init__(self, option: str, problem: str, allowed: str, detail: str = "") -> None:
        super().__init__(
            "invalid-option", EXIT_USAGE, detail, option=option, problem=problem, allowed=allowed
        )


class UnreadableLogError(CommandError):
    """A SARIF log ``gate`` or ``report`` cannot read (DO903, exit code 2)."""

    def __init__(self, path: str, cause: str) -> None:
        super().__init__("unreadable-sarif-log", EXIT_USAGE, path=path, cause=cause)
