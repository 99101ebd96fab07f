"""The call the user most likely meant, written out for an error whose inputs do not fit
``forward``: the ``inputs-do-not-match-forward`` finding's ``call``.

Built from ``forward``'s parameters alone (no capture), in the form of the function that
was called (``dynamo_onnx.export`` or ``dynamo_export``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

__all__ = ["right_call"]


def _placeholder(value: Any) -> str:
    return f"<{type(value).__name__}>"


def right_call(
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    unexpected: list[str],
    via_export: bool,
) -> str:
    """The call the user most likely meant, written out from ``forward``'s parameters: each
    input given where it fits (``<Tensor>``), each missing required one by its name, inputs
    that fit no parameter left out; in the form of the function that was called."""
    given = kwargs.get("args")
    if not args and "args" in unexpected and given is not None:
        args = given if isinstance(given, tuple) else (given,)
    rest = list(args)
    kept = {k: v for k, v in kwargs.items() if k not in unexpected}
    positional: list[str] = []
    keywords: list[tuple[str, str]] = []
    in_order = True  # False once a defaulted parameter is skipped: the rest go by name
    for param in signature.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            positional += [_placeholder(a) for a in rest]
            rest = []
        elif param.kind is param.VAR_KEYWORD:
            keywords += [(k, _placeholder(v)) for k, v in kept.items()]
            kept = {}
        elif param.kind is not param.KEYWORD_ONLY and rest:
            positional.append(_placeholder(rest.pop(0)))
        elif param.name in kept:
            text = _placeholder(kept.pop(param.name))
            if in_order and param.kind is not param.KEYWORD_ONLY:
                positional.append(text)
            else:
                keywords.append((param.name, text))
        elif param.default is param.empty:
            if in_order and param.kind is not param.KEYWORD_ONLY:
                positional.append(param.name)
            else:
                keywords.append((param.name, param.name))
        else:
            in_order = False
    options = [f"{k}={kwargs[k]!r}" for k in ("opset_version",) if k in kwargs]
    inputs = ", ".join(positional)
    export_call = f"dynamo_onnx.export(model, ({inputs}{',' if len(positional) == 1 else ''})"
    if keywords:
        export_call += ", kwargs={" + ", ".join(f'"{k}": {v}' for k, v in keywords) + "}"
    export_call += "".join(f", {o}" for o in options) + ")"
    if via_export:
        return export_call
    call = "dynamo_onnx.dynamo_export(" + ", ".join(
        ["model", *positional, *(f"{k}={v}" for k, v in keywords)]
    )
    call += ")"
    return f"{call}, or {export_call}" if options else call
