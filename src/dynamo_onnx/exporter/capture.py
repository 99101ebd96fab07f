"""Capture: the model becomes a ``torch.export.ExportedProgram``.

Strategies are tried in order: ``torch.export.export`` non-strict (traces with real Python,
the most permissive), then strict (TorchDynamo). Each failure is a finding with its root
cause; only when all fail does capture raise :class:`CaptureError`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import exception_summary, mark_recorded
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.exporter.errors import CaptureError, InvalidExportOptionsError, format_message
from dynamo_onnx.rules import get_rule

__all__ = ["run", "STRATEGIES", "all_dimensions_dynamic", "normalize_dynamic_shapes", "dimension_names"]

#: (label, strict) in the order they are tried.
STRATEGIES: tuple[tuple[str, bool], ...] = (
    ("torch.export.export(strict=False)", False),
    ("torch.export.export(strict=True)", True),
)


class _CallableModule(torch.nn.Module):
    """Lets torch.export capture a plain callable, which it only accepts as a module."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self._fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)


def _frames(exc: BaseException) -> tuple[Location, ...]:
    """Frames of the exception's traceback and of any traceback text in its message."""
    frames = [
        Location(fs.filename, fs.lineno or 1, fs.name)
        for fs in reversed(traceback.extract_tb(exc.__traceback__))
    ]
    # torch.export (strict) reports the user's frames in the message, not the traceback.
    return tuple(list(parse_stack_trace(str(exc))) + frames)


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


def _auto_spec(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {dim: torch.export.Dim.AUTO for dim in range(value.dim())} or None
    if isinstance(value, (list, tuple)):
        return type(value)(_auto_spec(v) for v in value)
    if isinstance(value, dict):
        return {k: _auto_spec(v) for k, v in value.items()}
    return None


def normalize_dynamic_shapes(spec: Any) -> Any:
    """torch.export's specs, plus names as strings: ``{0: "batch"}`` -> ``{0: Dim.AUTO}``.

    A named string is dynamic where the model allows it: a dimension the model specializes
    becomes a ``dynamic-dim-specialized`` warning instead of a failed capture (``Dim``
    objects keep torch's strict meaning). The names are applied to the ONNX dims after.
    """

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            return torch.export.Dim.AUTO
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return value

    return convert(spec)


def _given_names(spec: Any, forward: Any) -> dict[tuple[str, int], str]:
    """(input name, dimension) -> the name the user gave it, for top-level tensor inputs."""
    if isinstance(spec, (list, tuple)):
        params = list(inspect.signature(forward).parameters)
        spec = dict(zip(params, spec))
    names: dict[tuple[str, int], str] = {}
    if not isinstance(spec, dict):
        return names
    for input_name, dims in spec.items():
        items = dims.items() if isinstance(dims, dict) else enumerate(dims or ())
        for index, dim in items:
            name = dim if isinstance(dim, str) else getattr(dim, "__name__", None)
            if isinstance(name, str) and name.isidentifier():
                names[(input_name, int(index))] = name
    return names


def _requested_dynamic(
    spec: Any, model: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[tuple[str, int], int]:
    """(input name, dimension) -> example size, for every dimension the spec makes dynamic."""
    if spec is None:
        return {}
    forward = as_module(model).forward
    try:
        bound = inspect.signature(forward).bind(*args, **kwargs).arguments
    except TypeError:
        return {}
    if isinstance(spec, (list, tuple)):
        spec = dict(zip(bound, spec))
    requested: dict[tuple[str, int], int] = {}
    if not isinstance(spec, dict):
        return requested
    for name, dims in spec.items():
        value = bound.get(name)
        if not isinstance(value, torch.Tensor):
            continue
        items = dims.items() if isinstance(dims, dict) else enumerate(dims or ())
        for index, dim in items:
            if dim is not None and dim is not torch.export.Dim.STATIC and int(index) < value.dim():
                requested[(name, int(index))] = int(value.shape[int(index)])
    return requested


class _ShapeLog(logging.Handler):
    """Collects torch's symbolic-shape log records (without printing them) during capture."""

    LOGGER = "torch.fx.experimental.symbolic_shapes"

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        logger = logging.getLogger(self.LOGGER)
        level, propagate, handlers = logger.level, logger.propagate, list(logger.handlers)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # the records are ours to read, not the user's to see
        logger.handlers = [self]
        try:
            yield
        finally:
            logger.handlers = handlers
            logger.setLevel(level)
            logger.propagate = propagate


_CREATE = re.compile(r"create_symbol (\w+) = \d+ for L\['(\w+)'\]\.size\(\)\[(\d+)\]")
_GUARD = re.compile(r"eval (.+?) \[guard added\].*?\((\S+?):(\d+) in (\w+)\)")
_REPLACE = re.compile(r"set_replacement (\w+) = (-?\d+)")


def _resolve(suffix: str) -> str | None:
    """torch logs paths cut from the left to a width (``ork/main/model.py``): find the
    loaded module whose file ends that way."""
    suffix = suffix.replace("/", os.sep)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.abspath(path).endswith(suffix):
            return os.path.abspath(path)
    return None


def _report_specializations(
    ctx: DiagnosticContext, messages: list[str], requested: Mapping[tuple[str, int], int]
) -> None:
    """A warning for each requested-dynamic dimension torch specialized, with its guard."""
    symbols: dict[str, tuple[str, int]] = {}
    guards: list[tuple[str, str, int, str]] = []
    for message in messages:
        if created := _CREATE.search(message):
            symbols[created[1]] = (created[2], int(created[3]))
        elif guard := _GUARD.search(message):
            guards.append((guard[1], guard[2], int(guard[3]), guard[4]))
        elif (replaced := _REPLACE.search(message)) and replaced[1] in symbols:
            input_name, dim = symbols[replaced[1]]
            if (input_name, dim) not in requested:
                continue
            symbol = re.compile(rf"\b{re.escape(replaced[1])}\b")
            culprit = next((g for g in reversed(guards) if symbol.search(g[0])), None)
            where = None
            if culprit is not None and (path := _resolve(culprit[1])):
                where = Location(path, culprit[2], culprit[3])
            ctx.record(
                "dynamic-dim-specialized",
                locations=[where],
                input=input_name,
                dim=dim,
                value=int(replaced[2]),
                guard=culprit[0] if culprit else "unknown",
                source=ctx.display(where) if where else "an unknown line",
            )


def dimension_names(program: torch.export.ExportedProgram, model: Any, spec: Any) -> dict[str, str]:
    """torch's symbols (``s17``) -> names for the ONNX dims: the user's, else
    ``<input>_dim_<i>``."""
    given = _given_names(spec, as_module(model).forward) if spec is not None else {}
    user_inputs = {
        s.arg.name for s in program.graph_signature.input_specs
        if s.kind == torch.export.graph_signature.InputKind.USER_INPUT and hasattr(s.arg, "name")
    }
    mapping: dict[str, str] = {}
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for index, dim in enumerate(val.shape):
            symbol = str(dim)
            if isinstance(dim, int) or not symbol.isidentifier() or symbol in mapping:
                continue
            mapping[symbol] = given.get((node.name, index), f"{node.name}_dim_{index}")
    return mapping


def all_dimensions_dynamic(model: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """``ExportOptions(dynamic_shapes=True)``: every dimension of every tensor input dynamic.

    ``Dim.AUTO`` lets torch.export keep a dimension static where the model requires it (the
    8 input features of a Linear(8, ...)) instead of failing; the seed's "most compatible"
    meaning.
    """
    forward = as_module(model).forward
    bound = inspect.signature(forward).bind(*args, **kwargs)
    return {name: _auto_spec(value) for name, value in bound.arguments.items()}


#: torch.onnx.export's own keywords: passed to dynamo_export they reach the model.
_EXPORT_KEYWORDS = frozenset(
    {"args", "kwargs", "opset_version", "export_params", "verbose", "input_names",
     "output_names", "dynamic_axes", "do_constant_folding", "dynamo", "f",
     "training", "operator_export_type", "keep_initializers_as_inputs",
     "custom_opsets", "export_modules_as_functions", "external_data", "report",
     "optimize", "verify", "dynamic_shapes", "artifacts_dir"}
)


def _right_call(args: tuple[Any, ...], kwargs: Mapping[str, Any], unexpected: list[str]) -> str:
    """The call the user most likely meant, written out."""
    inputs = [f"<{type(a).__name__}>" for a in args]
    given = kwargs.get("args")
    if not args and given is not None:
        given = given if isinstance(given, tuple) else (given,)
        inputs = [f"<{type(a).__name__}>" for a in given]
    inputs += [f"{k}=<{type(v).__name__}>" for k, v in kwargs.items() if k not in unexpected]
    options = [f"{k}={kwargs[k]!r}" for k in ("opset_version",) if k in kwargs]
    model_inputs = ", ".join(["model", *inputs])
    call = f"dynamo_onnx.dynamo_export({model_inputs})"
    if options:
        call += f", or dynamo_onnx.export(model, ({', '.join(inputs)},), {', '.join(options)})"
    return call


def _is_data_dependent(exc: BaseException) -> bool:
    """Whether capture failed on a branch over a tensor's value."""
    text = f"{type(exc).__name__} {exc}".lower()
    return "guardondatadependent" in text.replace("_", "") or "data-dependent" in text


def _raise_data_dependent(ctx: DiagnosticContext, where: Location | None, cause: str) -> None:
    rule = get_rule("data-dependent-control-flow")
    finding = ctx.record(rule, locations=[where], source=ctx.display(where), cause=cause)
    error = CaptureError(
        format_message(rule.id, rule.name, finding.message,
                       "express the branch with torch.cond (exports to ONNX If) or "
                       "torch.where, or rewrite it on shapes; see the rule's help."),
        rule_id=rule.id,
    )
    mark_recorded(error)
    raise error


def _code_location(model: Any) -> Location | None:
    """Where the model's code starts: its class's ``forward``, or the function itself."""
    code_owner = type(model).forward if isinstance(model, torch.nn.Module) else model
    try:
        path = inspect.getsourcefile(code_owner)
        _, line = inspect.getsourcelines(code_owner)
    except (TypeError, OSError):
        return None
    return Location(path, line, getattr(code_owner, "__name__", None)) if path else None


def check_inputs(
    ctx: DiagnosticContext, model: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """Fail early, with the names, when the inputs do not fit ``forward``'s signature."""
    forward = as_module(model).forward
    try:
        signature = inspect.signature(forward)
    except (TypeError, ValueError):  # builtins without a signature: let torch.export judge
        return
    try:
        signature.bind(*args, **kwargs)
        return
    except TypeError as exc:
        reason = str(exc)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    unexpected = [] if accepts_any else [k for k in kwargs if k not in signature.parameters]
    if unexpected:
        names = ", ".join(unexpected)
        problem = f"the keyword argument(s) {names}"
        export_words = [k for k in unexpected if k in _EXPORT_KEYWORDS]
        if export_words:
            problem += (
                f" ({', '.join(export_words)} are torch.onnx.export options, which "
                "dynamo_export passes to the model)"
            )
    else:
        problem = f"these inputs ({reason})"
    rule = get_rule("inputs-do-not-match-forward")
    fields = {
        "signature": str(signature),
        "problem": problem,
        "call": _right_call(args, kwargs, unexpected),
    }
    ctx.record(
        rule,
        locations=[ctx.call_site],
        properties={"unexpected": unexpected},
        **fields,
    )
    error = InvalidExportOptionsError(
        format_message(rule.id, rule.name, rule.format_message(**fields), rule.fix),
        rule_id=rule.id,
    )
    mark_recorded(error)
    raise error


def run(
    ctx: DiagnosticContext,
    model: torch.nn.Module | Callable[..., Any] | torch.export.ExportedProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    dynamic_shapes: Any = None,
) -> torch.export.ExportedProgram:
    """Capture ``model`` with the first strategy that succeeds."""
    if isinstance(model, torch.export.ExportedProgram):
        ctx.record(
            "capture-strategy-succeeded",
            strategy="the given ExportedProgram",
            nodes=len(model.graph.nodes),
        )
        return model
    ctx.model_location = _code_location(model)
    check_inputs(ctx, model, args, kwargs or {})
    requested = _requested_dynamic(dynamic_shapes, model, args, kwargs or {})
    for (input_name, dim), size in requested.items():
        if size in (0, 1):
            ctx.record(
                "dynamic-dim-example-too-small",
                locations=[ctx.call_site],
                input=input_name, dim=dim, size=size,
            )
    module = as_module(model)
    causes: list[str] = []
    data_dependent: tuple[Location | None, str] | None = None
    for label, strict in STRATEGIES:
        shape_log = _ShapeLog()
        try:
            with shape_log.listening():
                program = torch.export.export(
                    module, tuple(args), kwargs=dict(kwargs or {}),
                    dynamic_shapes=dynamic_shapes, strict=strict,
                )
        except Exception as exc:  # noqa: BLE001 - each failure is a finding
            frames = _frames(exc)
            cause = exception_summary(exc)
            causes.append(f"{label}: {cause}")
            if data_dependent is None and _is_data_dependent(exc):
                data_dependent = (ctx.user_frame(frames), cause)
            ctx.record(
                "capture-strategy-failed",
                locations=[ctx.user_frame(frames)],
                stack=frames,
                properties={"exception": type(exc).__name__},
                strategy=label,
                cause=cause,
            )
            continue
        ctx.record("capture-strategy-succeeded", strategy=label, nodes=len(program.graph.nodes))
        _report_specializations(ctx, shape_log.messages, requested)
        return program
    if data_dependent is not None:
        _raise_data_dependent(ctx, *data_dependent)
    rule = get_rule("capture-failed")
    first = ctx.by_rule("capture-strategy-failed")
    ctx.record(
        rule,
        locations=[first[0].primary if first else None],
        cause=" | ".join(causes),
    )
    error = CaptureError(
        format_message(
            rule.id,
            rule.name,
            "the model could not be captured by any strategy:\n"
            + "\n".join(f"  - {c}" for c in causes),
            "make forward traceable by torch.export (see the capture-strategy-failed "
            "findings for the line); use torch.cond for data-dependent branches.",
        ),
        rule_id=rule.id,
    )
    mark_recorded(error)
    raise error
