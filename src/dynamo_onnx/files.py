"""The one way dynamo-onnx writes a file: staged beside the destination, renamed when complete.

Every file the project writes (the ONNX model and its ``.data``, the files a model family
writes beside it, the SARIF and markdown reports, the command line's outputs) goes through
:func:`staging`, so a failed or interrupted write never leaves half a file and never
destroys an earlier one, and every file gets the permissions any file the user creates
gets: ``0666`` less the umask.

The permissions come from how the staged file is created, not from a ``chmod`` after it:
it is created with ``open()`` (``O_CREAT``, mode ``0666``) inside a private temporary
directory, so the kernel applies the process's umask as it does for any new file. Nothing
reads or changes the umask (``os.umask`` can only be read by setting it, which another
thread would see), and ``mkstemp``'s private ``0600`` never reaches a destination.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator

__all__ = ["Staging", "atomic_write_bytes", "atomic_write_text", "staging"]


class Staging:
    """A private directory beside the destinations: files are written at :meth:`path` and
    moved into place, each with one atomic rename, by :meth:`commit`."""

    def __init__(self, directory: pathlib.Path, private: pathlib.Path) -> None:
        self.directory = directory
        self._private = private

    def path(self, name: str) -> pathlib.Path:
        """Where to write the file that :meth:`commit` will put at ``directory / name``."""
        return self._private / name

    def commit(self, *names: str) -> None:
        """Rename the staged files into the destination directory, in the order given (a
        file another one refers to goes first: a model's ``.data`` before the model)."""
        for name in names:
            os.replace(self._private / name, self.directory / name)


@contextlib.contextmanager
def staging(directory: str | os.PathLike[str], label: str = "") -> Iterator[Staging]:
    """A :class:`Staging` in ``directory``; whatever was not committed is removed on exit,
    on success and on failure alike. ``label`` names the temporary directory (``.label.*``)
    so that a leftover of a killed process says what it was."""
    directory = pathlib.Path(os.fspath(directory))
    with tempfile.TemporaryDirectory(dir=directory, prefix=f".{label}.") as private:
        yield Staging(directory, pathlib.Path(private))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path``: readers see the old file or the new one, never half."""
    path = pathlib.Path(os.fspath(path))
    with staging(path.parent, path.name) as stage:
        stage.path(path.name).write_bytes(data)
        stage.commit(path.name)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends on every platform) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))
