"""Loading the user's code: ``MODULE:FACTORY`` (a ``.py`` path or a dotted module), the
example inputs it returns or ``--inputs`` names, ``--registry``, and the user's exception as
DO140 at the line of their code that raised."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import pathlib
import sys
import traceback
from typing import Any

from dynamo_onnx.cli.exit_codes import EXIT_USAGE, CommandError, UsageError
from dynamo_onnx.cli.inputs import tensor_from_spec

#: The folder of the dynamo_onnx package: its frames are not the user's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


_MODULE_FORMS = "a .py path or a dotted module, a colon and a name (models.py:build)"


def load_attribute(spec: str) -> Any:
    """``pkg.module:name`` or ``path/to/file.py:name`` -> the object."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(spec, "is not of the form MODULE:NAME", _MODULE_FORMS)
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = pathlib.Path(module_name).resolve()
            if not path.exists():
                raise UsageError(spec, f"names {module_name}: no such file", _MODULE_FORMS)
            sys.path.insert(0, str(path.parent))
            loader_spec = importlib.util.spec_from_file_location(path.stem, path)
            assert loader_spec is not None and loader_spec.loader is not None
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[path.stem] = module
            loader = loader_spec.loader
            call_user(lambda: loader.exec_module(module), module_name)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(spec, f"cannot import {module_name}: {exc}", _MODULE_FORMS) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UsageError(
            spec, f"names {module_name}, which has no attribute {attribute!r}", _MODULE_FORMS
        ) from None


def _split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example inputs as (args, kwargs): a tuple, a dict, or a (tuple, dict) pair."""
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if (
        isinstance(inputs, tuple)
        and len(inputs) == 2
        and isinstance(inputs[0], tuple)
        and isinstance(inputs[1], dict)
    ):
        return inputs[0], inputs[1]
    if isinstance(inputs, tuple):
        return inputs, {}
    if isinstance(inputs, list):
        return tuple(inputs), {}
    return (inputs,), {}


def load_factory(args: argparse.Namespace) -> Any:
    """The factory ``MODULE:FACTORY`` names (its module is executed once, here)."""
    factory = load_attribute(args.factory)
    if not callable(factory):
        raise UsageError(args.factory, "is not callable", _FACTORY_FORMS)
    return factory


def model_and_inputs(
    factory: Any, args: argparse.Namespace
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import dynamo_onnx

    if args.fake:  # built on the meta device: no memory for the weights
        with dynamo_onnx.enable_fake_mode():
            return _build(factory, args)
    return _build(factory, args)


def factory_location(factory: Any) -> Any:
    """Where the factory is defined, or None."""
    from dynamo_onnx.diagnostics import Location

    try:
        path = inspect.getsourcefile(factory)
        _, line = inspect.getsourcelines(factory)
    except (TypeError, OSError):
        return None
    return (
        Location(os.path.abspath(path), line, getattr(factory, "__name__", None)) if path else None
    )


_FACTORY_FORMS = (
    "a factory returns (model, example inputs), or a model when --inputs or --input gives "
    "them (docs/ci.md)"
)


class UserCodeError(CommandError):
    """The user's factory, inputs or registry function raised (DO140, exit code 2): the
    message names the cause and the line that raised (``location``, the innermost frame
    of the user's code), the detail is the traceback of the user's frames only."""

    def __init__(self, what: str, cause: str, frames: str, location: Any) -> None:
        source = _shown_path(location) if location is not None else "an unknown line"
        super().__init__(
            "user-code-raised", EXIT_USAGE, frames, what=what, cause=cause, source=source
        )
        self.location = location


def _shown_path(location: Any) -> str:
    """``path:line`` relative to the working directory when inside it."""
    path = os.path.relpath(location.path)
    return f"{location.path if path.startswith('..') else path}:{location.line}"


def _is_users(filename: str) -> bool:
    """Whether a frame of ``filename`` is the user's: a file of their own, neither the
    package's nor code without a file (a dataclass's generated ``__init__`` or
    ``__setattr__`` is ``<string>``, importlib's frames ``<frozen ...>``), whose line no one
    can open."""
    return os.path.isfile(filename) and not os.path.abspath(filename).startswith(_PACKAGE)


def call_user(function: Any, what: str) -> Any:
    """Call the user's ``function``; its exception becomes a :class:`UserCodeError`."""
    from dynamo_onnx.diagnostics import Location

    try:
        return function()
    except Exception as exc:  # reported as the user's error
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_users(f.filename)]
        lines = "".join(traceback.format_list(frames)).rstrip()
        cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raised = frames[-1] if frames else None
        location = (
            Location(os.path.abspath(raised.filename), raised.lineno or 1, raised.name)
            if raised is not None
            else None
        )
        raise UserCodeError(what, cause, lines, location) from None


def _build(factory: Any, args: argparse.Namespace) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    produced = call_user(factory, args.factory)
    example: Any = None
    if isinstance(produced, tuple) and len(produced) == 2 and callable(produced[0]):
        model, example = produced
    else:
        model = produced
    if not callable(model):
        raise UsageError(
            args.factory, f"returned {type(model).__name__}, not a model", _FACTORY_FORMS
        )
    if args.inputs and args.input:
        raise UsageError("--inputs", "and --input are both given", "give one of them")
    if args.inputs:
        inputs = load_attribute(args.inputs)
        example = call_user(inputs, args.inputs)
    elif args.input:
        example = dict(tensor_from_spec(spec) for spec in args.input)
    if example is None:
        raise UsageError(
            args.factory,
            "returned only a model",
            "give example inputs with --inputs MODULE:FN or --input NAME=2x3:float32",
        )
    positional, keywords = _split_inputs(example)
    return model, positional, keywords


_REGISTRY_FORMS = (
    "--registry takes MODULE:NAME of an OnnxRegistry, a function returning one, or a "
    "custom_translation_table dict {torch.ops.ns.op.default: onnxscript function}"
)


def registry_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """``--registry MODULE:NAME`` as the export's ``registry=`` or
    ``custom_translation_table=`` keyword (DO301's fix, from the command line)."""
    if not args.registry:
        return {}
    from collections.abc import Mapping

    from dynamo_onnx.registry import OnnxRegistry

    found = load_attribute(args.registry)
    if not isinstance(found, (OnnxRegistry, Mapping)) and callable(found):
        found = call_user(found, args.registry)
    if isinstance(found, OnnxRegistry):
        return {"registry": found}
    if isinstance(found, Mapping):
        return {"custom_translation_table": found}
    raise UsageError(args.registry, f"is a {type(found).__name__}", _REGISTRY_FORMS)
