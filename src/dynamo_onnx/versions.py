"""Versions of dynamo-onnx and of the tools an export depends on, for the reports."""

from __future__ import annotations

import functools
import importlib.metadata

__all__ = ["package_version", "project_urls", "tool_versions"]

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


@functools.cache
def project_urls() -> dict[str, str]:
    """``[project.urls]`` of this package's metadata (label -> address), as installed.

    The reports link only to addresses the project declares; with none, they link nowhere.
    """
    try:
        entries = importlib.metadata.metadata("dynamo-onnx").get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    urls = {}
    for entry in entries:
        label, _, url = entry.partition(",")
        if url.strip():
            urls[label.strip().lower()] = url.strip()
    return urls
