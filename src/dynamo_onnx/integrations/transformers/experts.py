"""Mixture-of-experts layers of transformers, traced with an implementation that exports.

On the CPU, transformers computes experts with ``transformers::grouped_mm_fallback``, a custom
operator looping over token counts read from a tensor: no ONNX function, and a loop that
depends on values. Its ``batched_mm`` implementation computes the same from batched matrix
products. While capturing, the model's configuration selects it (DO130), unless the registry
has a function for the custom operator; the configuration is put back afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.registry import OnnxRegistry

__all__ = ["traceable_experts"]

_GROUPED = "grouped_mm"
_BATCHED = "batched_mm"


def _configs(module: torch.nn.Module) -> list[Any]:
    """The configurations (each once) of the submodules with an experts implementation."""
    found: dict[int, Any] = {}
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if getattr(config, "_experts_implementation", None) == _GROUPED:
            found.setdefault(id(config), config)
    return list(found.values())


@contextlib.contextmanager
def traceable_experts(
    ctx: DiagnosticContext, module: torch.nn.Module, registry: OnnxRegistry | None
) -> Iterator[None]:
    """While the block runs, experts use ``batched_mm`` (a DO130 note says so)."""
    if registry is not None and registry.is_registered_op("transformers", "grouped_mm_fallback"):
        yield
        return
    configs = _configs(module)
    layers = sum(1 for sub in module.modules() if hasattr(sub, "_apply_gate"))
    if configs:
        ctx.record("experts-traced-densely", count=layers, implementation=_GROUPED)
    try:
        for config in configs:
            config._experts_implementation = _BATCHED
        yield
    finally:
        for config in configs:
            config._experts_implementation = _GROUPED
