"""``--input NAME=2x3:float32`` and ``--dynamic-dim INPUT:DIM=NAME``: the example tensors and
the dynamic dimensions ``export`` takes from the command line, with DO109 for a bad spelling."""

from __future__ import annotations

import argparse
from typing import Any

from dynamo_onnx.cli.exit_codes import UsageError

_INPUT_FORM = "--input takes NAME=2x3:float32 (sizes of 0 or more joined by x, a torch dtype)"


def tensor_from_spec(spec: str) -> tuple[str, Any]:
    """``NAME=2x3:float32`` -> (name, a seeded random tensor of that shape and dtype)."""
    import torch

    name, sep, rest = spec.partition("=")
    if not sep or not name.isidentifier():
        raise UsageError(spec, "is not of the form NAME=2x3:float32", _INPUT_FORM)
    dims_text, _, dtype_name = rest.partition(":")
    dtype = getattr(torch, dtype_name or "float32", None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(spec, f"has the unknown dtype {dtype_name!r}", _INPUT_FORM)
    try:
        shape = tuple(int(d) for d in dims_text.split("x")) if dims_text else ()
    except ValueError:
        raise UsageError(
            spec, "has dimensions that are not integers joined by x", _INPUT_FORM
        ) from None
    if any(d < 0 for d in shape):
        raise UsageError(spec, f"has a negative size {min(shape)}", _INPUT_FORM)
    generator = torch.Generator().manual_seed(0)
    try:
        if dtype.is_floating_point or dtype.is_complex:
            tensor = torch.randn(shape, generator=generator).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.rand(shape, generator=generator) > 0.5
        else:
            tensor = torch.randint(0, 10, shape, generator=generator).to(dtype)
    except (RuntimeError, MemoryError) as exc:  # too large to allocate, a dtype torch can't fill
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(spec, f"cannot be made: {cause}", _INPUT_FORM) from None
    return name, tensor


_DIM_FORM = "--dynamic-dim takes INPUT:DIM=NAME (x:0=batch), DIM an index, NAME an identifier"


def dynamic_shapes(args: argparse.Namespace) -> Any:
    """``--dynamic`` (every dimension) or ``--dynamic-dim x:0=batch`` (named ones) as the
    ``dynamic_shapes`` of the export: ``True``, ``{"x": {0: "batch"}}`` or None."""
    if args.dynamic and args.dynamic_dim:
        raise UsageError("--dynamic", "and --dynamic-dim are both given", "give one of them")
    if args.dynamic:
        return True
    if not args.dynamic_dim:
        return None
    spec: dict[str, dict[int, str]] = {}
    for text in args.dynamic_dim:
        where, _, name = text.partition("=")
        input_name, sep, dim_text = where.partition(":")
        if not sep or not input_name.isidentifier() or not dim_text.isdigit():
            raise UsageError(text, "is not of the form INPUT:DIM=NAME", _DIM_FORM)
        name = name or f"{input_name}_dim{dim_text}"
        if not name.isidentifier():
            raise UsageError(text, f"names the dimension {name!r}, not an identifier", _DIM_FORM)
        spec.setdefault(input_name, {})[int(dim_text)] = name
    return spec
