"""Neural-network layers: one ONNX operator where a newer opset has it, operators torch_lib
lacks, and the batch-norm forms torch.export keeps.

* torch_lib writes every function against opset 18, so ``aten.gelu`` becomes five nodes
  (``Div``, ``Erf``, ``Add``, ``Mul``, ``Mul``). When the export targets opset 20 or newer,
  dispatch prefers one ``Gelu``, which is also what ``torch.onnx`` emits at its default
  opset. Below the opset a function needs it is never chosen.
* torch_lib has no function for ``aten.batch_norm``, which torch.export keeps in the graph
  for every ``BatchNorm`` layer; without one the whole program is re-traced through
  ``run_decompositions`` (a second trace of the model). With running statistics
  it is one ``BatchNormalization``.
* Training mode. torch_lib's batch-norm functions force inference mode (its comment: ONNX
  Runtime's training-mode ``BatchNormalization`` is limited), so a model exported in
  training mode normalized with the running statistics where eager uses the batch's. These
  compute the batch's statistics with reductions, and the updated running ones, in every
  form torch.export produces (``native_batch_norm``, ``_native_batch_norm_legit`` and its
  ``no_stats``/``functional`` forms, ``_batch_norm_with_update_functional``).
* ``aten.conv_tbc`` (fairseq's time-batch-channel convolution), which torch does not
  decompose.
"""

from __future__ import annotations

from typing import Optional

import onnx_ir as ir
from onnxscript import opset18, opset20
from onnxscript.function_libs.torch_lib.ops.core import aten_native_batch_norm
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

__all__ = [
    "aten_batch_norm",
    "aten_conv_tbc",
    "aten_gelu_opset20",
    "batch_norm_with_update",
    "native_batch_norm",
    "native_batch_norm_functional",
    "native_batch_norm_no_stats",
]


def aten_gelu_opset20(self: TFloat, approximate: str = "none") -> TFloat:
    """gelu(Tensor self, *, str approximate='none') -> Tensor, as ONNX ``Gelu`` (opset 20)."""
    return opset20.Gelu(self, approximate=approximate)


def aten_conv_tbc(self: TFloat, weight: TFloat, bias: TFloat, pad: int = 0) -> TFloat:
    """conv_tbc(Tensor self, Tensor weight, Tensor bias, int pad=0) -> Tensor

    A 1-D convolution over time of a [time, batch, channels] input with a [kernel, in, out]
    weight (fairseq's layout): transposed to ``Conv``'s [batch, channels, time] and back.
    """
    x = opset18.Transpose(self, perm=[1, 2, 0])
    w = opset18.Transpose(weight, perm=[2, 1, 0])
    y = opset18.Conv(x, w, bias, pads=[pad, pad])
    return opset18.Transpose(y, perm=[2, 0, 1])


def _batch_statistics(
    input: TFloat,  # ATen's parameter name
    weight: TFloat | None,
    bias: TFloat | None,
    eps: float,
) -> tuple[TFloat, TFloat, TFloat, TFloat]:
    """Normalize with the batch's own mean and (biased) variance per channel, as training
    mode does: (out, mean, invstd, variance), the last three of shape [C]."""
    rank = len(input.shape)
    axes = opset18.Constant(value_ints=[0, *range(2, rank)])
    per_channel = opset18.Constant(value_ints=list(range(1, rank - 1)))
    mean = opset18.ReduceMean(input, axes, keepdims=1)
    centered = opset18.Sub(input, mean)
    variance = opset18.ReduceMean(opset18.Mul(centered, centered), axes, keepdims=1)
    invstd = opset18.Reciprocal(opset18.Sqrt(opset18.Add(variance, opset18.CastLike(eps, input))))
    out = opset18.Mul(centered, invstd)
    if weight is not None:
        out = opset18.Mul(out, opset18.Unsqueeze(weight, per_channel) if rank > 2 else weight)
    if bias is not None:
        out = opset18.Add(out, opset18.Unsqueeze(bias, per_channel) if rank > 2 else bias)
    flat = opset18.Constant(value_ints=[-1])
    return (
        out,
        opset18.Reshape(mean, flat),
        opset18.Reshape(invstd, flat),
        opset18.Reshape(variance, flat),
    )


def _updated(
    input: TFloat,
    running_mean: TFloat,
    running_var: TFloat,
    mean: TFloat,
    variance: TFloat,
    momentum: float,
) -> tuple[TFloat, TFloat]:
    """The running statistics after this batch: the variance enters unbiased (n / (n-1))."""
    count = opset18.CastLike(
        opset18.Div(opset18.Size(input), opset18.Shape(input, start=1, end=2)), input
    )
    unbiased = opset18.Div(
        opset18.Mul(variance, count), opset18.Sub(count, opset18.CastLike(1.0, input))
    )
    keep, take = opset18.CastLike(1.0 - momentum, input), opset18.CastLike(momentum, input)
    return (
        opset18.Add(opset18.Mul(running_mean, keep), opset18.Mul(mean, take)),
        opset18.Add(opset18.Mul(running_var, keep), opset18.Mul(unbiased, take)),
    )


def _nothing_saved(input: TFloat) -> TFloat:
    """The empty save_mean/save_invstd eager returns in inference mode (shape [0])."""
    return opset18.CastLike(opset18.Constant(value=ir.tensor([], dtype=ir.DataType.FLOAT)), input)


def _training_step(
    input: TFloat,
    weight: TFloat | None,
    bias: TFloat | None,
    running_mean: TFloat,
    running_var: TFloat,
    momentum: float,
    eps: float,
) -> tuple[TFloat, TFloat, TFloat, TFloat, TFloat]:
    """(out, mean, invstd, running_mean_out, running_var_out) of one training step."""
    out, mean, invstd, variance = _batch_statistics(input, weight, bias, eps)
    new_mean, new_var = _updated(input, running_mean, running_var, mean, variance, momentum)
    return out, mean, invstd, new_mean, new_var


def aten_batch_norm(
    input: TFloat,  # ATen's parameter name
    weight: Optional[TFloat],  # onnxscript reads these annotations
    bias: Optional[TFloat],
    running_mean: Optional[TFloat],
    running_var: Optional[TFloat],
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> TFloat:
    """batch_norm(...) -> Tensor: one ``BatchNormalization`` with running statistics, the
    batch's statistics in training mode or without running ones (``track_running_stats=False``)."""
    del cudnn_enabled  # a CUDA implementation choice; nothing to export
    if training and running_mean is not None and running_var is not None:
        return _batch_statistics(input, weight, bias, eps)[0]
    # Without running statistics torch_lib computes the batch's and feeds them to one
    # ``BatchNormalization``, which is right in both modes.
    return aten_native_batch_norm(
        input, weight, bias, running_mean, running_var, False, momentum, eps
    )[0]


def native_batch_norm(
    input: TFloat,
    weight: Optional[TFloat],
    bias: Optional[TFloat],
    running_mean: Optional[TFloat],
    running_var: Optional[TFloat],
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[TFloat, TFloat, TFloat]:
    """native_batch_norm / _native_batch_norm_legit(...) -> (out, save_mean, save_invstd)."""
    if training or running_mean is None or running_var is None:
        return _batch_statistics(input, weight, bias, eps)[:3]
    out = aten_native_batch_norm(
        input, weight, bias, running_mean, running_var, False, momentum, eps
    )[0]
    return out, _nothing_saved(input), _nothing_saved(input)


def native_batch_norm_no_stats(
    input: TFloat,
    weight: Optional[TFloat],
    bias: Optional[TFloat],
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[TFloat, TFloat, TFloat]:
    """_native_batch_norm_legit.no_stats(...): no running statistics, so the batch's."""
    del training, momentum
    return _batch_statistics(input, weight, bias, eps)[:3]


def native_batch_norm_functional(
    input: TFloat,
    weight: Optional[TFloat],
    bias: Optional[TFloat],
    running_mean: TFloat,
    running_var: TFloat,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[TFloat, TFloat, TFloat, TFloat, TFloat]:
    """_native_batch_norm_legit_functional(...) -> (out, save_mean, save_invstd,
    running_mean_out, running_var_out): what ``BatchNorm`` in training mode exports to."""
    if not training:
        out = aten_native_batch_norm(
            input, weight, bias, running_mean, running_var, False, momentum, eps
        )[0]
        return out, _nothing_saved(input), _nothing_saved(input), running_mean, running_var
    return _training_step(input, weight, bias, running_mean, running_var, momentum, eps)


def batch_norm_with_update(
    input: TFloat,  # ATen's parameter name
    weight: Optional[TFloat],  # onnxscript reads these annotations
    bias: Optional[TFloat],
    running_mean: TFloat,
    running_var: TFloat,
    momentum: float,
    eps: float,
) -> tuple[TFloat, TFloat, TFloat, TFloat, TFloat, TFloat]:
    """_batch_norm_with_update_functional(...) -> (out, save_mean, save_invstd, reserve,
    running_mean_out, running_var_out): the training form torch 2.13 exports ``BatchNorm``
    to."""
    out, mean, invstd, new_mean, new_var = _training_step(
        input, weight, bias, running_mean, running_var, momentum, eps
    )
    reserve = opset18.Constant(value=ir.tensor([], dtype=ir.DataType.UINT8))  # cuDNN's: none
    return out, mean, invstd, reserve, new_mean, new_var
