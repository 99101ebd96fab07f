"""Which operator domains of a model ONNX Runtime runs, and which only a custom runtime does.

``torch.onnx.ops.symbolic`` (and a registered function) may emit nodes of any domain
(``custom_domain::CustomOp``). ONNX Runtime has kernels for the standard domains and its own
contrib ones, and runs a domain whose functions the model defines; a node of any other
domain makes the session refuse the model, though the model is what the user asked for.
Translation reports such nodes (DO310) and the load check does not ask ONNX Runtime about
them; both decide from the model, through this module.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["RUNTIME_DOMAINS", "custom_domain_nodes"]

#: The domains ONNX Runtime has kernels for (standard, ML, training and its contrib ones).
RUNTIME_DOMAINS = frozenset(
    {
        "",
        "ai.onnx",
        "ai.onnx.ml",
        "ai.onnx.preview.training",
        "ai.onnx.training",
        "com.microsoft",
        "com.microsoft.experimental",
        "com.microsoft.nchwc",
        "org.pytorch.aten",
    }
)


def custom_domain_nodes(model: ir.Model) -> list[ir.Node]:
    """The nodes (in subgraphs and in the model's functions too: a module function holds
    its module's nodes) of domains neither ONNX Runtime nor the model's own functions
    define, in graph order."""
    defined = {function.domain for function in model.functions.values()}
    graphs = [model.graph, *model.functions.values()]
    return [
        node
        for graph in graphs
        for node in ir.traversal.RecursiveGraphIterator(graph)
        if node.domain not in RUNTIME_DOMAINS and node.domain not in defined
    ]
