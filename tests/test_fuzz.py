"""Property-based fuzzing: random small models from a menu of operators, shapes and dtypes.

Every example either exports and matches eager PyTorch in ONNX Runtime, or fails with a
rule-coded OnnxExporterError whose SARIF log validates. ``make test`` runs a few examples
(FUZZ_EXAMPLES, default 20); ``make fuzz`` runs many more.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import dynamo_onnx

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))

# Each operator: (name, function of (x, other) -> tensor, dtypes it accepts).
FLOATS = (torch.float32, torch.float64)
ALL = (torch.float32, torch.float64, torch.int64)
UNARY = {
    "relu": (torch.relu, FLOATS),
    "sigmoid": (torch.sigmoid, FLOATS),
    "tanh": (torch.tanh, FLOATS),
    "abs": (torch.abs, ALL),
    "neg": (torch.neg, ALL),
    "sin": (torch.sin, FLOATS),
    "sqrt_abs": (lambda x: torch.sqrt(torch.abs(x)), FLOATS),
    "log1p_abs": (lambda x: torch.log1p(torch.abs(x)), FLOATS),
    "square": (lambda x: x * x, ALL),
    "softmax_last": (lambda x: torch.softmax(x, dim=-1), FLOATS),
    "cumsum_0": (lambda x: torch.cumsum(x, 0), ALL),
    "sum_last_keep": (lambda x: x.sum(-1, keepdim=True), ALL),
    "mean_0_keep": (lambda x: x.mean(0, keepdim=True), FLOATS),
    "amax_last_keep": (lambda x: x.amax(-1, keepdim=True), ALL),
    "transpose": (lambda x: x.transpose(0, -1), ALL),
    "flip_0": (lambda x: x.flip(0), ALL),
    "flatten_back": (lambda x: x.flatten().reshape(x.shape), ALL),
    "unsqueeze_squeeze": (lambda x: x.unsqueeze(0).squeeze(0), ALL),
    "clamp": (lambda x: x.clamp(-1, 1), ALL),
    "where_positive": (lambda x: torch.where(x > 0, x, torch.zeros_like(x)), ALL),
    "to_float": (lambda x: x.float(), ALL),
    "to_int": (lambda x: (x * 3).round().long() if x.is_floating_point() else x, ALL),
    "argmax_keep": (lambda x: x.argmax(-1, keepdim=True), ALL),
}
BINARY = {
    "add": (torch.add, ALL),
    "sub": (torch.sub, ALL),
    "mul": (torch.mul, ALL),
    "maximum": (torch.maximum, ALL),
    "div_safe": (lambda x, y: x / (y.abs() + 1), ALL),
    "cat_0": (lambda x, y: torch.cat([x, y], 0), ALL),
    "eq_float": (lambda x, y: (x == y).to(torch.float32), ALL),
}


class Program(torch.nn.Module):
    """Applies a sequence of (operator, uses the second input) steps to the first input."""

    def __init__(self, steps: list[tuple[str, bool]]) -> None:
        super().__init__()
        self.steps = steps

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for name, binary in self.steps:
            if binary:
                x = BINARY[name][0](x, y.to(x.dtype) if y.shape == x.shape else x)
            else:
                x = UNARY[name][0](x)
        return x


@st.composite
def programs(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(2, 5), min_size=rank, max_size=rank)))
    dtype = draw(st.sampled_from(ALL))
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        binary = draw(st.booleans())
        table = BINARY if binary else UNARY
        steps.append((draw(st.sampled_from(sorted(table))), binary))
    seed = draw(st.integers(0, 2**16))
    return steps, shape, dtype, seed


def _inputs(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        make = lambda: torch.randn(shape, generator=generator, dtype=dtype)  # noqa: E731
    else:
        make = lambda: torch.randint(-5, 6, shape, generator=generator, dtype=dtype)  # noqa: E731
    return make(), make()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not os.environ.get("FUZZ_RANDOM"),  # CI runs the same examples every time
    suppress_health_check=[HealthCheck.too_slow],
)
@given(programs())
def test_random_model_matches_eager_or_fails_with_a_rule(case):
    steps, shape, dtype, seed = case
    model = Program(steps)
    x, y = _inputs(shape, dtype, seed)
    try:
        expected = model(x, y)
    except (RuntimeError, TypeError):
        event("invalid in eager")
        assume(False)  # not a valid model in eager PyTorch either
    try:
        program = dynamo_onnx.export(model, (x, y))
    except dynamo_onnx.OnnxExporterError as error:
        event(f"refused with {error.rule_id}")
        assert error.rule_id is not None and str(error).startswith(f"[{error.rule_id} ")
        error.diagnostics.to_sarif()  # validates against the OASIS schema, or raises
        return
    event("exported")
    (actual,) = program(x, y)
    assert actual.dtype == expected.dtype, steps
    if expected.is_floating_point():
        tolerance = 1e-4 if expected.dtype == torch.float32 else 1e-7
        torch.testing.assert_close(actual, expected, atol=tolerance, rtol=tolerance, msg=str(steps))
    else:
        assert torch.equal(actual, expected), steps


@pytest.mark.parametrize("steps", [[("cat_0", True), ("softmax_last", False)]])
def test_the_menu_composes(steps):
    """A fixed composition, so a menu change that breaks every example shows plainly."""
    x, y = _inputs((2, 3), torch.float32, 0)
    program = dynamo_onnx.export(Program(steps), (x, y))
    torch.testing.assert_close(program(x, y)[0], Program(steps)(x, y))
