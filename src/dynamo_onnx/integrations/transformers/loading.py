"""What every loader of a Hugging Face folder shares: why a path is no saved model before
transformers is asked, transformers' reason in one line, and its output silenced while it
loads. The causal-LM folder (``hf_folder``), its streamed twin (``streamed``) and the
Whisper folder (``whisper_folder``) refuse a bad path with the same words (DO507).
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
from collections.abc import Iterator
from typing import Any

__all__ = ["first_line", "folder_problem", "quiet_loading"]


def folder_problem(path: pathlib.Path) -> str | None:
    """Why ``path`` cannot be a saved model, before transformers is asked."""
    if not path.exists():
        return "it does not exist"
    if not path.is_dir():
        return "it is a file, not a folder"
    if not (path / "config.json").is_file():
        found = sorted(p.name for p in path.iterdir())[:6]
        return "it has no config.json (it holds " + (", ".join(found) or "nothing") + ")"
    return None


def first_line(exc: BaseException) -> str:
    """An exception's first line, as a finding's cause (no trailing period or colon)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].rstrip(".:")


@contextlib.contextmanager
def quiet_loading(transformers: Any) -> Iterator[None]:
    """transformers' "Loading weights" bar and its warnings ("Model config: eos_token_id must
    be ... within the vocabulary") off while loading: what a library prints is not the
    exporter's output, and it says it again whenever the user loads the model. Its
    verbosity and bar are as the caller had them afterwards."""
    utils = transformers.utils.logging
    enabled, verbosity = utils.is_progress_bar_enabled(), utils.get_verbosity()
    utils.disable_progress_bar()
    utils.set_verbosity(logging.ERROR)
    try:
        yield
    finally:
        utils.set_verbosity(verbosity)
        if enabled:
            utils.enable_progress_bar()
