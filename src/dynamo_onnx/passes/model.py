"""The user's model as torch.export sees it: a module, its ``forward`` and where its code is.
Shared by the passes that read the model (validate, capture, dynamic shapes)."""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.io.caches import CacheInputs, output_parts

__all__ = ["as_module", "code_location", "describe_value", "flat_forward", "forward_signature"]


class _CallableModule(torch.nn.Module):
    """Lets torch.export capture a plain callable, which it only accepts as a module."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self._fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)


def as_module(model: Any) -> torch.nn.Module:
    """The model as an ``nn.Module``.

    A Python function becomes the ``forward`` of a module itself (its code renamed
    ``forward``): torch records in ``stack_trace`` only frames of functions named
    ``forward``, so calling the function from a wrapper's forward would lose every line of
    the user's function. Other callables are called from a wrapper.
    """
    if isinstance(model, torch.nn.Module):
        return model
    if isinstance(model, types.FunctionType):
        code = model.__code__.replace(co_name="forward")
        forward = types.FunctionType(
            code, model.__globals__, "forward", model.__defaults__, model.__closure__
        )
        forward.__kwdefaults__ = model.__kwdefaults__
        forward.__annotations__ = model.__annotations__
        module_type = type(model.__name__, (torch.nn.Module,), {"forward": staticmethod(forward)})
        return module_type()
    return _CallableModule(model)


def forward_signature(model: Any) -> inspect.Signature | None:
    """The signature of the model's ``forward`` (None for builtins without one)."""
    try:
        return inspect.signature(as_module(model).forward)
    except (TypeError, ValueError):
        return None


def code_location(model: Any) -> Location | None:
    """Where the model's code starts: its class's ``forward``, or the function itself."""
    try:
        code_owner = type(model).forward if isinstance(model, torch.nn.Module) else model
        path = inspect.getsourcefile(code_owner)
        _, line = inspect.getsourcelines(code_owner)
    except (TypeError, OSError, AttributeError):  # builtins, ScriptModules, no source
        return None
    return Location(path, line, getattr(code_owner, "__name__", None)) if path else None


def describe_value(value: Any) -> str:
    """``an int (42)``: what a value is, for messages about bad input."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name} ({text})"


@contextlib.contextmanager
def flat_forward(module: torch.nn.Module, inputs: CacheInputs) -> Iterator[None]:
    """While the block runs, ``module.forward`` takes the flat inputs (caches as tensors)
    and returns a dict of tensors (caches as ``present.<i>.key``...): the model is called
    with caches rebuilt from the tensors. Only this object's attribute is set, and removed
    afterwards; its class, and transformers, are untouched. The function is named
    ``forward`` because torch records only frames of that name in a node's stack."""
    original = module.forward
    own = module.__dict__.get("forward")

    def forward(**flat: Any) -> dict[str, Any]:
        return dict(output_parts(original(**inputs.model_inputs(flat))))

    forward.__signature__ = inputs.forward_signature()  # type: ignore[attr-defined]
    module.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is None:
            del module.__dict__["forward"]
        else:
            module.forward = own  # type: ignore[method-assign]
