"""Does onnxruntime-genai run a folder? Load it and generate one token: a folder that only
looks like one of its folders (a type it does not know, names its type does not read, an
id outside the vocabulary) fails here with genai's own message, not later in the user's
application.

A function of the folder's path, so that a caller may check another folder than the one
it wrote (a one-layer copy of a checkpoint too large to load twice).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence

__all__ = ["MODULE", "RUNTIME", "generation_problem", "unavailable"]

#: The runtime the check asks, as findings name it.
RUNTIME = "onnxruntime-genai"
#: Its Python module (an optional dependency: ``pip install onnxruntime-genai``).
MODULE = "onnxruntime_genai"


def unavailable() -> str | None:
    """Why onnxruntime-genai cannot be asked (None when it can): not installed, or
    installed but failing to import (a wheel without its native library). Imported, not
    looked up: a module that is found but does not import checks nothing either."""
    try:
        importlib.import_module(MODULE)
    except ImportError as exc:
        return f"`import {MODULE}` fails ({str(exc).strip().rstrip('.') or type(exc).__name__})"
    return None


def generation_problem(folder: str | os.PathLike[str], prompt: Sequence[int]) -> str | None:
    """onnxruntime-genai's message when it cannot load ``folder`` or generate a token after
    ``prompt``; None when it generates one. The caller has asked :func:`unavailable`
    first."""
    import numpy as np

    og = importlib.import_module(MODULE)
    try:
        model = og.Model(os.fspath(folder))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + 1)
        generator = og.Generator(model, params)
        generator.append_tokens(np.asarray([prompt], dtype=np.int32))
        if not generator.is_done():
            generator.generate_next_token()
    except Exception as exc:  # genai raises RuntimeError or its own types
        return (str(exc).strip() or type(exc).__name__).rstrip(".")
    return None
