"""Plain data for findings: levels, source locations, and the findings themselves."""

from __future__ import annotations

import dataclasses
import enum
import functools
import linecache
import logging
import re
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from dynamo_onnx.rules import Rule

__all__ = ["Level", "Location", "Finding", "frame_locations", "parse_stack_trace"]


class Level(enum.IntEnum):
    """Finding levels, valued as :mod:`logging` levels so they compare with them.

    ``NONE`` is informational detail rendered only at DEBUG verbosity (SARIF level "none").
    """

    NONE = logging.DEBUG
    NOTE = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR

    @classmethod
    def from_name(cls, name: str) -> Level:
        """``"note"`` -> ``Level.NOTE``; the names are SARIF's level names."""
        return cls[name.upper()]

    @property
    def sarif(self) -> str:
        """The SARIF ``level`` string."""
        return self.name.lower()


@dataclasses.dataclass(frozen=True)
class Location:
    """A place in a source file: an absolute path, a 1-based line, and what is there."""

    path: str
    line: int
    function: str | None = None
    column: int | None = None

    @property
    def snippet(self) -> str | None:
        """The text of the source line, read from disk (cached by :mod:`linecache`, which is
        refreshed first: a model edited and re-exported in one session shows its new line)."""
        linecache.checkcache(self.path)
        text = linecache.getline(self.path, self.line)
        return text.rstrip("\n") if text else None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def frame_locations(frames: Iterable[traceback.FrameSummary]) -> tuple[Location, ...]:
    """Python's frames as locations, innermost first (as :func:`first_user_frame` takes
    them): ``traceback.extract_tb`` and ``extract_stack`` give them outermost first. The one
    place a traceback becomes locations (an exception's: ``context.exception_frames``)."""
    return tuple(Location(fs.filename, fs.lineno or 1, fs.name) for fs in reversed(list(frames)))


def stack_locations() -> tuple[Location, ...]:
    """The caller's Python stack as locations, innermost first (its own frame left out):
    where a log record about a guard was emitted, for the user's line among them."""
    return frame_locations(traceback.extract_stack()[:-1])


# `  File "/path/x.py", line 12, in forward`
_FRAME_RE = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')


@functools.lru_cache(maxsize=4096)
def parse_stack_trace(text: str) -> tuple[Location, ...]:
    """Parse a Python traceback text into frames, innermost (most recent call) first.

    FX nodes carry such a text in ``node.meta["stack_trace"]``. Many nodes share one text,
    hence the cache: the frames are immutable.
    """
    frames = [
        Location(m["path"], int(m["line"]), (m["func"] or "").strip() or None)
        for m in map(_FRAME_RE.match, text.splitlines())
        if m is not None
    ]
    frames.reverse()
    return tuple(frames)


@dataclasses.dataclass
class Finding:
    """One rule-coded observation made during export.

    ``locations[0]`` is the primary location: the first frame of user code. ``stack`` is
    the Python stack, innermost first. ``properties`` carry structured facts (the operator,
    the FX node, the module path, dtypes...) for renderers and tools.
    """

    rule: Rule
    level: Level
    message: str
    pass_name: str
    locations: list[Location] = dataclasses.field(default_factory=list)
    stack: list[Location] = dataclasses.field(default_factory=list)
    related: list[Location] = dataclasses.field(default_factory=list)
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)
    markdown: str | None = None

    @property
    def primary(self) -> Location | None:
        return self.locations[0] if self.locations else None

    def __str__(self) -> str:
        where = f" ({self.primary})" if self.primary else ""
        return f"{self.level.name} {self.rule.id} {self.rule.name}: {self.message}{where}"


def first_user_frame(
    frames: Sequence[Location], library_prefixes: Iterable[str]
) -> Location | None:
    """The innermost frame whose file is not under any of ``library_prefixes``; without one,
    the innermost frame of code with no file (``<stdin>``, ``<string>``), but never code the
    interpreter or torch generated (``<frozen ...>``, ``<eval_with_key>``)."""
    prefixes = tuple(library_prefixes)
    pseudo = None
    for frame in frames:
        if frame.path.startswith("<"):
            if pseudo is None and not frame.path.startswith(_GENERATED):
                pseudo = frame
        elif not frame.path.startswith(prefixes):
            return frame
    return pseudo


#: Pseudo-files of generated code, never the user's: the interpreter's, torch.fx's.
_GENERATED = ("<frozen", "<eval_with_key", "<torch", "<built-in")
