"""Versions of dynamo-onnx and of the tools an export depends on, for the reports."""

from __future__ import annotations

import functools
import importlib.metadata

__all__ = ["package_version", "tool_versions"]

_TOOLS = ("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.cache
def package_version() -> str:
    """This package's version."""
    return _version("dynamo-onnx")


@functools.cache
def tool_versions() -> dict[str, str]:
    """Versions of torch, onnx, onnxscript, onnx-ir and onnxruntime."""
    return {name: _version(name) for name in _TOOLS}
