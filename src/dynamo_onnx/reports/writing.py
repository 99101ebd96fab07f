"""Writing reports: atomic text files with the user's permissions, and the report files of an
export (``<artifacts_dir>/<subject>.sarif`` and ``.md``)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile

__all__ = ["atomic_write_text", "report_paths"]


def _umask() -> int:
    # os.umask can only be read by setting it; set it back at once.
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half.

    The file gets the permissions any file the user creates gets (``0666`` less the umask),
    not ``mkstemp``'s private ``0600``.
    """
    path = pathlib.Path(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def report_paths(artifacts_dir: str | os.PathLike[str], subject: str) -> tuple[str, str]:
    """``<artifacts_dir>/<subject>.sarif`` and ``.md``."""
    base = pathlib.Path(artifacts_dir) / subject
    return f"{base}.sarif", f"{base}.md"
