"""The caller's example inputs, checked before anything runs: ``args`` as a tuple,
``kwargs`` as a dict, every leaf a type torch.export takes, then bound once to ``forward``'s
parameters (``inputs-do-not-match-forward`` with the call the user meant when they do not
fit), and the caller's ``input_names`` as labels for those inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch.export import pytree

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidExportOptionsError
from dynamo_onnx.integrations import FamilyInputs, family_of
from dynamo_onnx.io.inputs import call_arguments
from dynamo_onnx.passes.model import describe_value
from dynamo_onnx.passes.validate.right_call import right_call

__all__ = ["check_arguments", "check_inputs", "input_labels"]


#: Leaf types torch.export takes as inputs (others must be registered pytree containers).
_LEAF_TYPES = (torch.Tensor, bool, int, float, complex, str, type(None), torch.dtype, torch.device)


#: torch.onnx.export's own keywords: passed to dynamo_export they reach the model.
_EXPORT_KEYWORDS = frozenset(
    {
        "args",
        "kwargs",
        "opset_version",
        "export_params",
        "verbose",
        "input_names",
        "output_names",
        "dynamic_axes",
        "do_constant_folding",
        "dynamo",
        "f",
        "training",
        "operator_export_type",
        "keep_initializers_as_inputs",
        "custom_opsets",
        "export_modules_as_functions",
        "external_data",
        "report",
        "optimize",
        "verify",
        "dynamic_shapes",
        "artifacts_dir",
    }
)


def check_arguments(
    ctx: DiagnosticContext, args: Any, kwargs: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` as a tuple (a lone tensor becomes one), ``kwargs`` as a dict, leaves checked."""
    args, kwargs = call_arguments(args, kwargs)
    if not isinstance(args, tuple):
        ctx.fail(
            "invalid-arguments",
            InvalidExportOptionsError,
            problem=f"`args` must be a tuple of the model's positional inputs, got "
            f"{describe_value(args)}; for one input write `(x,)`",
        )
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        ctx.fail(
            "invalid-arguments",
            InvalidExportOptionsError,
            problem=f"`kwargs` must be a dict of keyword inputs by name, got {describe_value(kwargs)}",
        )
    leaves, _ = pytree.tree_flatten((args, dict(kwargs)))
    for leaf in leaves:
        if not isinstance(leaf, _LEAF_TYPES) and family_of(leaf) is None:
            ctx.fail(
                "invalid-arguments",
                InvalidExportOptionsError,
                problem=f"an input is {describe_value(leaf)}, which torch.export cannot take "
                "(inputs are tensors, numbers, bools, strings, None, and lists, tuples, dicts "
                "or registered containers of them)",
            )
    return args, dict(kwargs)


def check_inputs(
    ctx: DiagnosticContext,
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    via_export: bool,
) -> dict[str, Any]:
    """``forward``'s parameters bound to the inputs (bound once, here, for every pass);
    fails early, with the names, when the inputs do not fit its signature."""
    if signature is None:  # builtins without a signature: let torch.export judge
        return {}
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError as exc:
        reason = str(exc)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    unexpected = [] if accepts_any else [k for k in kwargs if k not in signature.parameters]
    if unexpected:
        problem = f"the keyword argument(s) {', '.join(unexpected)}"
        export_words = [k for k in unexpected if k in _EXPORT_KEYWORDS]
        if export_words:
            problem += (
                f" ({', '.join(export_words)} are torch.onnx.export options, which "
                "dynamo_export passes to the model)"
            )
    else:
        problem = f"these inputs ({reason})"
    ctx.fail(
        "inputs-do-not-match-forward",
        InvalidExportOptionsError,
        properties={"unexpected": unexpected},
        signature=str(signature),
        problem=problem,
        call=right_call(signature, args, kwargs, unexpected, via_export),
    )


def input_labels(
    bound: Mapping[str, Any], input_names: Any, family_inputs: FamilyInputs | None
) -> dict[str, str]:
    """``forward`` parameter -> the caller's name for it in ``input_names`` (which name the
    ONNX inputs: the tensors among the inputs, in order), for the top-level tensor inputs;
    without ``input_names``, a family's flat inputs by their ONNX names."""
    if not input_names:
        return dict(family_inputs.names) if family_inputs is not None else {}
    labels: dict[str, str] = {}
    position = 0
    for name, value in bound.items():
        leaves, _ = pytree.tree_flatten(value)
        if isinstance(value, torch.Tensor) and position < len(input_names):
            labels[name] = str(input_names[position])
        position += sum(isinstance(leaf, torch.Tensor) for leaf in leaves)
    return labels
