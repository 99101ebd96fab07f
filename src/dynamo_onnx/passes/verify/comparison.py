"""One output of the ONNX model against eager PyTorch's, as ``torch.allclose`` compares them,
with the figures a finding reports."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One output compared: its figures and whether it is within the tolerances."""

    index: int
    name: str
    max_abs: float
    max_rel: float
    ok: bool
    detail: str = ""
    #: False for an output that depends on random numbers: compared on shape only.
    on_values: bool = True


def compare(
    index: int, name: str, actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float
) -> Comparison:
    """Compare two tensors the way ``torch.allclose`` does, with the figures."""
    if expected.is_complex():
        expected = torch.view_as_real(expected)
    expected = expected.detach().cpu()
    if tuple(actual.shape) != tuple(expected.shape):
        detail = f"; shapes differ: {list(actual.shape)} vs {list(expected.shape)}"
        return Comparison(index, name, float("inf"), float("inf"), False, detail)
    if actual.numel() == 0:
        return Comparison(index, name, 0.0, 0.0, True)
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    diff = (a - e).abs()
    nan_mismatch = bool((a.isnan() != e.isnan()).any())
    diff = torch.where(a.isnan() & e.isnan(), torch.zeros_like(diff), diff)
    max_abs = float(diff.max())
    max_rel = float((diff / e.abs().clamp_min(1e-12)).max())
    ok = not nan_mismatch and bool((diff <= atol + rtol * e.abs()).all())
    detail = "; NaN where eager has none (or the reverse)" if nan_mismatch else ""
    return Comparison(index, name, max_abs, max_rel, ok, detail)
