"""Arithmetic on dynamic sizes: torch.sym_* and the operator module on SymInt, SymFloat and
SymBool become ONNX, so the model computes the same at other sizes."""

from __future__ import annotations

import pytest
import torch

import dynamo_onnx


class SizeMath(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


CASES = {
    "sym_float": lambda x: x * torch.sym_float(x.shape[0]),
    "pow": lambda x: x * x.shape[0] ** 0.5,
    "sym_int": lambda x: x[: torch.sym_int(x.shape[0] * 0.5)],
    "sym_max": lambda x: x * torch.sym_max(x.shape[0], x.shape[1]),
    "sym_min": lambda x: x * torch.sym_min(x.shape[0], x.shape[1]),
    "sym_sqrt": lambda x: x * torch.sym_sqrt(x.shape[0]),
    "sym_ite": lambda x: x * torch.sym_ite(x.shape[0] > 3, x.shape[0], x.shape[1]),
    "sym_not": lambda x: x * torch.sym_ite(torch.sym_not(x.shape[0] > 3), 1.0, 2.0),
    "sym_sum": lambda x: x * torch.sym_sum([x.shape[0], x.shape[1], 1]),
    "truediv": lambda x: x * (x.shape[0] / x.shape[1]),
    "floordiv": lambda x: x * (x.shape[0] // x.shape[1]),
    "mod": lambda x: x * (x.shape[0] % x.shape[1]),
    "neg": lambda x: x * -x.shape[0],
    "eq": lambda x: x * torch.sym_ite(x.shape[0] == x.shape[1], 1.0, 2.0),
    "lt": lambda x: x * torch.sym_ite(x.shape[0] < x.shape[1], 1.0, 2.0),
    "mul_add_sub": lambda x: x * (x.shape[0] * 2 + x.shape[1] - 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_size_arithmetic_exports_and_runs_at_two_sizes(case):
    model = SizeMath(CASES[case])
    program = dynamo_onnx.export(
        model, (torch.randn(5, 4),), dynamic_shapes=({0: "rows", 1: "cols"},)
    )
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["rows", "cols"]
    for shape in ((5, 4), (3, 7), (8, 2)):
        x = torch.randn(*shape)
        (actual,) = program(x)
        torch.testing.assert_close(actual, model(x), msg=f"{case} at {shape}")
