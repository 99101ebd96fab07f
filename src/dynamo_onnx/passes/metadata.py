"""Where an FX node came from, and the ``metadata_props`` keys that carry it into ONNX.

Every ONNX node keeps its origin: the FX node, the module path and classes, and the Python
stack. Translation writes these keys; grouping modules into functions, finding the
operators that block an opset conversion and naming the node ONNX Runtime refuses
(:func:`node_error_fields`) read them. The keys are defined here only.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import site
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from typing import Any

import onnx_ir as ir
import torch
import torch.fx

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import exception_summary
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.foreign_text import read_ort_error, rewrite_traceback_paths
from dynamo_onnx.onnx_tools.loading import opset_hint

__all__ = [
    "FX_NODE",
    "FX_NODE_NAME",
    "META_PREFIX",
    "MODULE_CHAIN",
    "MODULE_CLASS",
    "MODULE_CLASSES",
    "MODULE_PATH",
    "NAMESPACE",
    "PACKED",
    "NodeSource",
    "STACK_TRACE",
    "control_flow_source",
    "installed_roots",
    "node_error_fields",
    "node_source",
    "origin_props",
    "portable_stack_trace",
    "stack_frames",
]

#: Prefix of the metadata_props keys that record each ONNX node's origin.
META_PREFIX = "pkg.dynamo_onnx."
FX_NODE = f"{META_PREFIX}fx_node"
FX_NODE_NAME = f"{META_PREFIX}fx_node_name"
MODULE_PATH = f"{META_PREFIX}module_path"
MODULE_CHAIN = f"{META_PREFIX}module_chain"
MODULE_CLASSES = f"{META_PREFIX}module_classes"
#: The class of the module a local function stands for (``module_functions=True``).
MODULE_CLASS = f"{META_PREFIX}module_class"
STACK_TRACE = f"{META_PREFIX}stack_trace"
#: The key Netron and torch.onnx use for a node's module path.
NAMESPACE = "namespace"
#: On a MatMul that packs several projections of one input (``optimize="onnxruntime"``):
#: their modules, relative to the node's module (``q_proj, k_proj, v_proj``).
PACKED = f"{META_PREFIX}packed"


@dataclasses.dataclass(frozen=True)
class NodeSource:
    """Where an FX node came from in the user's code."""

    frames: tuple[Location, ...]
    primary: Location | None
    module_path: str
    stack_trace: str
    #: Paths of the modules whose forward was on the stack, outermost first.
    module_chain: tuple[str, ...] = ()
    #: Their classes, as ``module.Class`` names.
    module_classes: tuple[str, ...] = ()


def installed_roots(library_prefixes: Iterable[str] = ()) -> tuple[str, ...]:
    """The directories packages are imported from, longest first: site-packages (also of
    the base installation, and any ``site-packages``/``dist-packages`` on ``sys.path``),
    the standard library, and the directory holding each of ``library_prefixes``' packages
    (torch imported through ``PYTHONPATH`` from a copy is a library all the same)."""
    return _installed_roots(tuple(library_prefixes), tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _installed_roots(prefixes: tuple[str, ...], search_path: tuple[str, ...]) -> tuple[str, ...]:
    # cached on its arguments: a pure function of the prefixes and sys.path, asked per node
    paths = sysconfig.get_paths()
    roots = {paths.get(key) for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    roots.update(p for p in search_path if os.path.basename(p) in _PACKAGE_DIRS)
    for prefix in prefixes:
        package = prefix.rstrip(os.sep)
        if package != paths.get("stdlib"):  # the standard library is a root itself
            roots.add(os.path.dirname(package))
    absolute = {os.path.abspath(r) for r in roots if r}
    return tuple(sorted(absolute, key=len, reverse=True))


_PACKAGE_DIRS = ("site-packages", "dist-packages")


def portable_stack_trace(trace: str, root: str, libraries: Sequence[str] = ()) -> str:
    """``trace`` with each path written relative, POSIX-style, so the same model exported
    from two checkouts and two environments gives the same ONNX file, and the file does not
    carry the layout of the machine it was made on (a user's home directory, where their
    virtual environment lives).

    A file of an installed package is written relative to the directory it is imported
    from, ``libraries`` (:func:`installed_roots`): ``torch/nn/modules/linear.py``, wherever
    the environment lives, also inside the checkout (``.venv/``). A file under ``root``
    (the source root, the top of the work tree the SARIF log's paths are relative to) is
    written relative to it. Anything else (a script in ``/tmp``) stays as it is.
    """
    return _portable_stack_trace(trace, root, tuple(libraries))


@functools.lru_cache(maxsize=4096)
def _portable_stack_trace(trace: str, root: str, libraries: tuple[str, ...]) -> str:
    # cached on its arguments: many nodes share one text (each layer of a model repeats its
    # lines), and ``os.path.relpath`` normalizes both paths of every frame
    prefix = root.rstrip(os.sep) + os.sep
    library_prefixes = [(r, r.rstrip(os.sep) + os.sep) for r in libraries]

    def relative(path: str) -> str | None:
        for library, start in library_prefixes:
            if path.startswith(start):
                return pathlib.PurePath(os.path.relpath(path, library)).as_posix()
        if path.startswith(prefix):
            return pathlib.PurePath(os.path.relpath(path, root)).as_posix()
        return None

    return rewrite_traceback_paths(trace, relative)


def stack_frames(ctx: DiagnosticContext, trace: str) -> tuple[Location, ...]:
    """The frames of a stack trace an ONNX node carries (``STACK_TRACE``), innermost first,
    with the paths :func:`portable_stack_trace` made relative resolved again: against the
    source root when the file is there, else against the directory of installed packages
    that holds it, so findings about the ONNX model point at the user's files and a
    library's frame is still known as one."""
    root = ctx.source_root
    return tuple(
        frame
        if frame.path.startswith("<") or os.path.isabs(frame.path)
        else dataclasses.replace(frame, path=_resolved(frame.path, root, ctx.library_prefixes))
        for frame in parse_stack_trace(trace)
    )


def _resolved(relative: str, root: str, library_prefixes: Iterable[str]) -> str:
    parts = relative.split("/")
    in_root = os.path.join(root, *parts)
    if os.path.exists(in_root):
        return in_root
    for library in installed_roots(library_prefixes):
        candidate = os.path.join(library, *parts)
        if os.path.exists(candidate):
            return candidate
    return in_root


def node_source(ctx: DiagnosticContext, node: torch.fx.Node) -> NodeSource:
    """The node's stack (from ``meta["stack_trace"]``), user frame and module path; the
    stack text as the ONNX node keeps it (:func:`portable_stack_trace`)."""
    raw = node.meta.get("stack_trace") or ""
    frames = parse_stack_trace(raw)
    trace = portable_stack_trace(raw, ctx.source_root, installed_roots(ctx.library_prefixes))
    stack = node.meta.get("nn_module_stack") or {}
    entries = [(path, cls) for path, cls in stack.values() if path]
    chain = tuple(path for path, _ in entries)
    classes = tuple(
        cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
        for _, cls in entries
    )
    module_path = chain[-1] if chain else ""
    return NodeSource(frames, ctx.user_frame(frames), module_path, trace, chain, classes)


def control_flow_source(ctx: DiagnosticContext, node: torch.fx.Node) -> NodeSource:
    """Where a control-flow node is in the user's code.

    torch records the higher-order call with a generated stack (``<eval_with_key>``); the
    nodes computing its operands, like the predicate of a ``cond``, carry the user's line.
    """
    source = node_source(ctx, node)
    if source.primary is not None:
        return source
    for arg in node.all_input_nodes:
        candidate = node_source(ctx, arg)
        if candidate.primary is not None:
            return dataclasses.replace(
                candidate, stack_trace=candidate.stack_trace or source.stack_trace
            )
    return source


def origin_props(node: torch.fx.Node, source: NodeSource) -> dict[str, str]:
    """The ``metadata_props`` of every ONNX node translated from ``node``."""
    return {
        FX_NODE: node.format_node(),
        FX_NODE_NAME: node.name,
        MODULE_PATH: source.module_path,
        MODULE_CHAIN: ";".join(source.module_chain),
        MODULE_CLASSES: ";".join(source.module_classes),
        STACK_TRACE: source.stack_trace,
        NAMESPACE: source.module_path,
    }


def node_error_fields(
    ctx: DiagnosticContext, model: ir.Model, exc: Exception
) -> tuple[Location | None, dict[str, Any]]:
    """The finding's location and fields for the node the ONNX checker or ONNX Runtime
    names in ``exc``: that ONNX node, its FX node and the user's line that called it."""
    nodes = {node.name: node for node in ir.traversal.RecursiveGraphIterator(model.graph)}
    error = read_ort_error(str(exc))  # the checker's words or ONNX Runtime's
    named = next((m for m in error.nodes if m in nodes), None)
    node = nodes.get(named) if named else None
    trace = node.metadata_props.get(STACK_TRACE, "") if node is not None else ""
    frames = stack_frames(ctx, trace)
    where = ctx.user_frame(frames)
    types = (
        ", ".join(str(v.dtype.name).lower() if v and v.dtype else "?" for v in node.inputs)
        if node is not None
        else "?"
    )
    cause = exception_summary(exc)
    unsupported = error.unsupported_type
    hint = (
        opset_hint(unsupported.op_type, unsupported.type_name, model.opset_imports.get("", 0))
        if unsupported is not None
        else None
    )
    return where, {
        "stack": frames,
        "node": named or "unknown",
        "op_type": node.op_type if node is not None else "?",
        "types": types,
        "fx_node": node.metadata_props.get(FX_NODE_NAME, "unknown")
        if node is not None
        else "unknown",
        "source": ctx.display(where) if where else "an unknown line",
        "cause": f"{cause}; {hint}" if hint else cause,
    }
