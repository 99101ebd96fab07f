"""A rotary cos/sin computed as ``position_ids[:, :, None].float() * inv_freq`` (a
``Mul``), into ONNX Runtime's ``RotaryEmbedding`` with cos/sin caches: onnxscript's
``CosSinCache`` expects the older ``(inv_freq @ position_ids).transpose(1, 2)`` (a ``MatMul``
and a ``Transpose``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from dynamo_onnx.onnx_tools.constants import ints

__all__ = ["CosSinCacheOfProduct"]


class CosSinCacheOfProduct(pattern.RewriteRuleClassBase):
    """``RotaryEmbedding(x, cos, sin)`` whose cos/sin are computed from
    ``position_ids[:, :, None].float() * inv_freq`` becomes ONNX Runtime's
    ``com.microsoft.RotaryEmbedding(x, position_ids, cos_cache, sin_cache)``.

    The caches hold ``max_positions`` rows (constants, shared by every layer with the same
    ``inv_freq``), as onnxruntime-genai's builder writes them; without ``max_positions``
    they are computed in the graph up to the largest position id, as onnxscript does.
    """

    def __init__(self, max_positions: int | None = None) -> None:
        super().__init__("CosSinCacheOfProduct", remove_nodes=False)
        self._max_positions = max_positions
        self._caches: dict[int, tuple[ir.Value, ir.Value]] = {}

    def cleanup(self) -> None:
        self._caches.clear()

    def pattern(self, op: Any, x: Any, inv_freq: Any, position_ids: Any, axes: Any) -> Any:
        positions = op.Cast(op.Unsqueeze(position_ids, axes), to=ir.DataType.FLOAT)
        freqs = op.Mul(positions, inv_freq)
        emb = op.Concat(freqs, freqs, axis=-1)
        cos = op.Unsqueeze(op.Cos(emb), [1])
        sin = op.Unsqueeze(op.Sin(emb), [1])
        return op.RotaryEmbedding(
            x,
            cos,
            sin,
            interleaved=0,
            _allow_other_attributes=True,
            _domain="ai.onnxruntime._fusion",
            _outputs=["rotated"],
        )

    def check(
        self, context: Any, inv_freq: ir.Value, position_ids: ir.Value, axes: ir.Value, **_: Any
    ) -> Any:
        result = pattern.MatchResult()
        if position_ids.shape is None or position_ids.shape.rank() != 2:
            return result.fail("position_ids is not of rank 2 ([batch, sequence]).", position_ids)
        if ints(axes) not in ([2], [-1]):
            return result.fail("position_ids is not unsqueezed on its last axis.", axes)
        frequencies = ir.convenience.get_const_tensor(inv_freq)
        if frequencies is None or len(frequencies.shape) != 1:
            return result.fail("inv_freq is not a constant vector.", inv_freq)
        return result

    def rewrite(
        self,
        op: Any,
        x: ir.Value,
        inv_freq: ir.Value,
        position_ids: ir.Value,
        rotated: ir.Value,
        **_: Any,
    ) -> Any:
        key = id(inv_freq)
        if key not in self._caches:
            self._caches[key] = self._cos_sin(op, inv_freq, position_ids)
        cos, sin = self._caches[key]
        attributes = {k: v.value for k, v in rotated.producer().attributes.items()}  # type: ignore[union-attr]
        return op.RotaryEmbedding(x, position_ids, cos, sin, **attributes, _domain="com.microsoft")

    def _cos_sin(self, op: Any, inv_freq: ir.Value, position_ids: ir.Value) -> tuple[Any, Any]:
        frequencies = ir.convenience.get_const_tensor(inv_freq)
        assert frequencies is not None  # check() made sure
        values = frequencies.numpy().astype(np.float32).reshape(1, -1)
        if self._max_positions is not None:
            angles = np.arange(self._max_positions, dtype=np.float32).reshape(-1, 1) @ values
            return (
                op.Constant(value=ir.tensor(np.cos(angles), name=f"cos_cache_{values.shape[1]}")),
                op.Constant(value=ir.tensor(np.sin(angles), name=f"sin_cache_{values.shape[1]}")),
            )
        count = op.Add(op.ReduceMax(position_ids, keepdims=0), op.Constant(value_int=1))
        rows = op.Cast(
            op.Reshape(
                op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1)),
                op.Constant(value_ints=[-1, 1]),
            ),
            to=ir.DataType.FLOAT,
        )
        angles = op.MatMul(rows, op.Constant(value=ir.tensor(values)))
        return op.Cos(angles), op.Sin(angles)
