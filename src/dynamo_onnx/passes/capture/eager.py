"""What the model does outside torch.export, asked once capture has failed.

Two causes of a failed capture are facts about the model and its inputs rather than about
tracing, and are decided from them, not from torch's message:

- its tensors live on several devices (weights on ``meta`` made with ``torch.device("meta")``
  or ``init_empty_weights``, inputs on the CPU): every operator refuses the mix;
- it fails in eager PyTorch on the example inputs (``export(model, ("hello",))``, a grey
  image for an RGB model): the export did not fail, the model did.

The eager run happens only after every strategy failed, under ``torch.no_grad()``, and puts
the model's buffers back as they were (a training-mode BatchNorm updates its statistics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.export import pytree

from dynamo_onnx.passes.model import EagerRun, eager_run, runs_eagerly

__all__ = ["EagerRun", "eager_failure", "eager_run", "runs_eagerly", "tensor_devices"]


def _input_tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((args, dict(kwargs)))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def tensor_devices(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[list[str], list[str]] | None:
    """(the devices of the model's weights, those of the inputs) when they are not one
    device, else None."""
    weights = sorted({t.device.type for t in (*module.parameters(), *module.buffers())})
    inputs = sorted({t.device.type for t in _input_tensors(args, kwargs)})
    if len(set(weights) | set(inputs)) <= 1:
        return None
    return weights, inputs


def eager_failure(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> BaseException | None:
    """The exception ``module(*args, **kwargs)`` raises in eager PyTorch, or None when it
    runs (or cannot be run: weights without data)."""
    return eager_run(module, args, kwargs).error
