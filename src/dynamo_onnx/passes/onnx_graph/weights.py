"""The weight passes: a warning for every weight holding NaN or inf (DO401, weight-check), and
``ONNXProgram.apply_weights`` as the apply-weights pass (DO404).

A checkpoint with a NaN exports fine and computes NaN in production; the export is the last
place the weights are seen as a whole. Fake (meta) weights hold no values and are skipped.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import OnnxExporterError, SerializationError, WeightsMismatchError
from dynamo_onnx.io import onnx_file
from dynamo_onnx.io.checkpoint import lazy_tensor, open_checkpoint
from dynamo_onnx.passes.base import ExportState, PassName
from dynamo_onnx.tensors import TORCH_TO_ONNX_DTYPE, onnx_shape, torch_tensor_to_ir

__all__ = [
    "ApplyWeightsPass",
    "WeightCheckPass",
    "WeightsRequest",
    "checkpoint_state",
    "weight_problems",
]


class WeightCheckPass:
    """Warn about weights that are not finite."""

    name: ClassVar[str] = PassName.WEIGHT_CHECK
    error_type: ClassVar[type[OnnxExporterError]] = SerializationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, state: ExportState) -> ExportState:
        assert state.onnx_model is not None
        _check_weights(ctx, state.onnx_model)
        return state


def _check_weights(ctx: DiagnosticContext, model: ir.Model) -> None:
    """A warning for every weight holding NaN or inf (fake and meta weights are skipped)."""
    for name, value in model.graph.initializers.items():
        tensor = getattr(value.const_value, "raw", None)
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            continue
        if tensor.device.type == "meta":
            continue
        try:
            bad = _count_non_finite(tensor)
        except (RuntimeError, TypeError):  # fake tensors hold no values
            continue
        if bad:
            ctx.record("non-finite-weights", name=name, count=bad, total=tensor.numel())


def _count_non_finite(tensor: torch.Tensor, chunk: int = 1 << 20) -> int:
    """How many NaN or inf values the tensor holds, without a full-size temporary.

    A finite sum proves every value finite (NaN and inf propagate), so the common case
    costs one pass and no memory (a ``dtype=float64`` sum would copy the tensor); ``isfinite`` on the whole tensor would allocate
    several tensors of its size. Only a non-finite
    sum, or an overflowing one, counts chunk by chunk.
    """
    if _sum_is_finite(tensor):
        return 0
    flat = tensor.reshape(-1)
    return sum(
        int((~torch.isfinite(flat[start : start + chunk])).sum())
        for start in range(0, flat.numel(), chunk)
    )


def _sum_is_finite(tensor: torch.Tensor) -> bool:
    """Whether the sum of the tensor's values is finite, summed by NumPy where it can.

    NumPy reads the tensor's memory in place and sums on the calling thread. torch's sum of
    a tensor above 32768 values is an OpenMP parallel loop: on a machine whose other cores
    are busy each weight waits for a descheduled thread at the loop's barrier, many times
    what one thread takes (docs/performance.md). Half-precision
    values are summed in float32, as torch does, so a large fp16 tensor does not overflow.
    Tensors NumPy has no type for (bfloat16, float8) are summed by torch.
    """
    try:
        array = tensor.detach().numpy()
    except (RuntimeError, TypeError):  # no NumPy dtype, or not on the CPU
        return bool(torch.isfinite(tensor.sum()))
    accumulate = np.float32 if array.dtype == np.float16 else None
    with np.errstate(all="ignore"):  # inf - inf is NaN: what is asked, not a warning
        return bool(np.isfinite(np.add.reduce(array, axis=None, dtype=accumulate)))


@dataclasses.dataclass(frozen=True)
class WeightsRequest:
    """``ONNXProgram.apply_weights``'s arguments: the model and the tensors by name."""

    model: ir.Model
    state_dict: Mapping[str, Any] | str | os.PathLike[str]  # tensors, or a checkpoint's path
    model_location: Location | None = None


class ApplyWeightsPass:
    """Replace the model's initializers with the given tensors, by name, in place.

    Every name must be an initializer, every fake initializer must be given, and shapes and
    dtypes must match; otherwise DO404 names every problem and nothing is applied.
    """

    name: ClassVar[str] = PassName.APPLY_WEIGHTS
    error_type: ClassVar[type[OnnxExporterError]] = WeightsMismatchError
    changes_input: ClassVar[bool] = True

    def __call__(self, ctx: DiagnosticContext, request: WeightsRequest) -> WeightsRequest:
        state_dict = request.state_dict
        if isinstance(state_dict, (str, os.PathLike)):
            found = checkpoint_state(request.model, state_dict)
            problems = (
                [f"{os.fspath(state_dict)} holds no safetensors checkpoint"]
                if found is None
                else weight_problems(request.model, found)
            )
            state_dict = found or {}
        else:
            problems = weight_problems(request.model, state_dict)
        if problems:
            ctx.fail(
                "weights-mismatch",
                WeightsMismatchError,
                request.model_location,
                problems="; ".join(problems),
            )
        initializers = request.model.graph.initializers
        for name, tensor in state_dict.items():
            initializers[name].const_value = (
                tensor if isinstance(tensor, ir.LazyTensor) else torch_tensor_to_ir(tensor, name)
            )
        return request


def checkpoint_state(model: ir.Model, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The tensors of the safetensors checkpoint at ``path`` (a folder, shards with their
    index, or one file) as lazy tensors of their initializer's dtype, read when the model
    is saved or run; None when there is no checkpoint there."""
    checkpoint = open_checkpoint(path)
    if checkpoint is None:
        return None
    torch_dtypes = {onnx: dtype for dtype, onnx in TORCH_TO_ONNX_DTYPE.items()}
    state = {}
    for name in checkpoint:
        value = model.graph.initializers.get(name)
        dtype = torch_dtypes.get(value.dtype) if value is not None and value.dtype else None
        state[name] = lazy_tensor(checkpoint, name, dtype or checkpoint.stored(name).dtype)
    return state


def weight_problems(model: ir.Model, state_dict: Mapping[str, Any]) -> list[str]:
    """What keeps ``state_dict`` from replacing the model's weights (empty when it fits)."""
    initializers = model.graph.initializers
    problems = []
    extra = [name for name in state_dict if name not in initializers]
    if extra:
        problems.append(f"not weights of this model: {', '.join(sorted(extra))}")
    missing = [name for name in onnx_file.fake_weight_names(model) if name not in state_dict]
    if missing:
        problems.append(f"fake weights left without a value: {', '.join(sorted(missing))}")
    for name, tensor in state_dict.items():
        value = initializers.get(name)
        if value is None:
            continue
        if isinstance(tensor, ir.LazyTensor):  # a checkpoint's, of the initializer's dtype
            held = value.const_value
            dims = value.shape if value.shape is not None else (held.shape if held else [])
            expected = [int(d) if isinstance(d, int) else str(d) for d in dims]
            if [int(d) for d in tensor.shape] != expected:
                shape = [int(d) for d in tensor.shape]
                problems.append(f"{name} has shape {shape}, the model's is {expected}")
            continue
        if not isinstance(tensor, torch.Tensor):
            problems.append(f"{name} is a {type(tensor).__name__}, not a tensor")
            continue
        real = torch.view_as_real(tensor) if tensor.is_complex() else tensor
        dtype = TORCH_TO_ONNX_DTYPE.get(real.dtype)
        held = value.const_value  # the value's own type, else its tensor's
        expected_dtype = value.dtype or (held.dtype if held is not None else None)
        dims = value.shape if value.shape is not None else (held.shape if held else [])
        expected_shape = [int(d) if isinstance(d, int) else str(d) for d in dims]
        shape = onnx_shape(real.dtype, list(real.shape))
        if shape != expected_shape:
            problems.append(f"{name} has shape {shape}, the model's is {expected_shape}")
        if expected_dtype is not None and dtype != expected_dtype:
            problems.append(
                f"{name} has dtype {real.dtype}, the model's is {expected_dtype.name.lower()}"
            )
    return problems
