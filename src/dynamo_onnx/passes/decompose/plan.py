"""Whether the decompose pass must re-trace the program with ``run_decompositions``.

Re-tracing is the most expensive step of an export after capture (a second trace of the
whole model; docs/performance.md). It is skipped when the captured graph is already
translatable: functional (no in-place operator, no mutated input or buffer), with plain
tensors as weights (torch.export's decompositions take a tensor subclass apart), and every
operator either has an ONNX function, is control flow we translate, or is one of at most a
few statically shaped nodes that translation decomposes alone (DO306).
"""

from __future__ import annotations

import operator

import torch

from dynamo_onnx.passes.fx import (
    ASSERTIONS,
    graph_modules,
    has_decomposition,
    is_higher_order,
    is_static,
    translated_higher_order,
)
from dynamo_onnx.registry import OnnxRegistry, target_name
from dynamo_onnx.tensors import is_wrapper_subclass

__all__ = ["MAX_NODE_FALLBACKS", "retrace_reason"]

#: How many nodes without an ONNX function translation may decompose one by one (each is a
#: small export of its own, ~0.1 s) before re-tracing the whole program is cheaper.
MAX_NODE_FALLBACKS = 4


def retrace_reason(
    ep: torch.export.ExportedProgram, registry: OnnxRegistry, opset: int | None = None
) -> str | None:
    """Why the program must be re-traced with decompositions for an export to ``opset``, or
    None if it need not be."""
    mutations = [
        spec.kind.name
        for spec in ep.graph_signature.output_specs
        if spec.kind.name not in ("USER_OUTPUT", "TOKEN")
    ]
    if mutations:
        return f"the program mutates its inputs or buffers ({mutations[0]})"
    subclass = next(
        (
            (name, tensor)
            for name, tensor in (*ep.state_dict.items(), *ep.constants.items())
            if is_wrapper_subclass(tensor)
        ),
        None,
    )
    if subclass is not None:  # the re-trace takes it apart into its plain tensors
        name, tensor = subclass
        return f"weight `{name}` is a tensor subclass ({type(tensor).__name__})"
    fallbacks: set[str] = set()
    for gm in graph_modules(ep):
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            target = node.target
            if target is operator.getitem or target in ASSERTIONS:
                continue
            if is_higher_order(target):
                if target in translated_higher_order():
                    continue
                return f"it calls the higher-order operator `{target_name(target)}`"
            schema = getattr(target, "_schema", None)
            if schema is not None and schema.is_mutable:
                return f"it calls the in-place operator `{target_name(target)}`"
            if registry.supports(target, opset):
                continue
            if schema is None or not has_decomposition(target):
                at = f" at opset {opset}" if opset is not None and registry.supports(target) else ""
                return f"`{target_name(target)}` has no ONNX function of its own{at}"
            if not is_static(node):
                return f"`{target_name(target)}` has no ONNX function and dynamic shapes"
            fallbacks.add(node.name)
            if len(fallbacks) > MAX_NODE_FALLBACKS:
                return f"more than {MAX_NODE_FALLBACKS} nodes have no ONNX function"
    return None
