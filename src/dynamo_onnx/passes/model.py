"""The user's model as torch.export sees it: a module, its ``forward`` and where its code is.
Shared by the passes that read the model (validate, capture, dynamic shapes)."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from dynamo_onnx.diagnostics import Location
from dynamo_onnx.diagnostics.findings import first_user_frame
from dynamo_onnx.fake import is_fake
from dynamo_onnx.integrations import FamilyInputs

__all__ = [
    "EagerRun",
    "as_module",
    "buffers_restored",
    "code_location",
    "describe_value",
    "eager_run",
    "flat_forward",
    "forward_signature",
    "return_location",
    "runs_eagerly",
]


@contextlib.contextmanager
def buffers_restored(buffers: list[torch.Tensor]) -> Iterator[None]:
    """Put ``buffers`` back as they were after the block: an eager run the exporter makes
    (verification's reference, capture's eager check) must not change the caller's model
    (BatchNorm's running statistics in training mode, counters). Buffers are small;
    weights are not copied (a forward that writes its weights is a DO121 finding)."""
    saved = [(b, b.detach().clone()) for b in buffers]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                if buffer.shape == value.shape:
                    buffer.copy_(value)


def runs_eagerly(module: torch.nn.Module) -> bool:
    """Whether the model can run in eager PyTorch: not with weights that have no data (on
    the meta device)."""
    return not any(is_fake(t) for t in (*module.parameters(), *module.buffers()))


@dataclasses.dataclass(frozen=True)
class EagerRun:
    """What ``module(*args, **kwargs)`` did in eager PyTorch: its output or its exception
    (both None: it could not be run, its weights have no data)."""

    output: Any = None
    error: BaseException | None = None


def eager_run(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> EagerRun:
    """Run the model once in eager PyTorch, without gradients, its buffers put back."""
    if not runs_eagerly(module):
        return EagerRun()
    try:
        with buffers_restored(list(module.buffers())), torch.no_grad():
            return EagerRun(output=module(*args, **kwargs))
    except Exception as exc:  # the model's own failure is the answer
        return EagerRun(error=exc)


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
    """Where the model's code starts: its class's ``forward``, or the function itself. A
    decorated ``forward`` (a library's decorator renaming a deprecated keyword) is unwrapped:
    ``getsourcefile`` would name the decorator's file, ``getsourcelines`` the function's line."""
    try:
        code_owner = type(model).forward if isinstance(model, torch.nn.Module) else model
        code_owner = inspect.unwrap(code_owner)
        path = inspect.getsourcefile(code_owner)
        _, line = inspect.getsourcelines(code_owner)
    except (TypeError, OSError, AttributeError):  # builtins, ScriptModules, no source
        return None
    return Location(path, line, getattr(code_owner, "__name__", None)) if path else None


def model_anchor(
    model: Any, library_prefixes: Sequence[str], call_site: Location | None
) -> Location | None:
    """The line findings about the whole model point at: where its code starts, when that
    is the user's; for a model whose code is torch's or ours (a bare ``nn.Linear``, an
    ``nn.Sequential`` of built-ins) the line that called the exporter instead, never a
    frame inside a library."""
    location = code_location(model)
    if location is None or first_user_frame([location], library_prefixes) is None:
        return call_site
    return location


def return_location(model: Any) -> Location | None:
    """The line of the model's ``return`` when its ``forward`` (or the function) has exactly
    one; else where its code starts (:func:`code_location`)."""
    start = code_location(model)
    try:
        code_owner = type(model).forward if isinstance(model, torch.nn.Module) else model
        lines, first = inspect.getsourcelines(inspect.unwrap(code_owner))
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (TypeError, OSError, AttributeError, SyntaxError):
        return start
    if (
        start is None
        or not tree.body
        or not isinstance(function := tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef))
    ):
        return start
    returns = [node for node in _own_nodes(function) if isinstance(node, ast.Return)]
    if len(returns) != 1:
        return start
    return Location(start.path, first + returns[0].lineno - 1, start.function)


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions or classes defined in it."""
    for child in ast.iter_child_nodes(function):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield child
        yield from _own_nodes(child)


def describe_value(value: Any) -> str:
    """``an int (42)``: what a value is, for messages about bad input."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name} ({text})"


@contextlib.contextmanager
def flat_forward(module: torch.nn.Module, inputs: FamilyInputs) -> Iterator[None]:
    """While the block runs, ``module.forward`` takes the flat inputs (a model family's
    values as their tensors) and returns a dict of tensors named as the family names them:
    the model is called with the values rebuilt from the tensors. Only this object's
    attribute is set, and removed afterwards; its class, and its library, are untouched.
    The function is named ``forward`` because torch records only frames of that name in a
    node's stack."""
    original = module.forward
    own = module.__dict__.get("forward")

    def forward(**flat: Any) -> dict[str, Any]:
        return dict(inputs.output_parts(original(**inputs.model_inputs(flat))))

    forward.__signature__ = inputs.forward_signature()  # type: ignore[attr-defined]
    module.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is None:
            del module.__dict__["forward"]
        else:
            module.forward = own  # type: ignore[method-assign]
