"""Value names unique in the whole model, subgraphs included.

Each ``onnx_ir.Graph`` names the unnamed values of the nodes added to it with its own
counter (``val_0``, ``val_1``...), so a ``Loop`` body or an ``If`` branch hands out the
same names as the main graph. onnx_ir's ``NameFixPass`` makes a name unique only along
the chain of scopes open when it meets it: a body's ``val_6`` stays when the main graph's
``val_6`` comes after the ``Loop``, and ONNX Runtime refuses the model ("Graph must be in
single static assignment (SSA) form, however 'val_6' has been used as output names
multiple times"). This step gives every value one name no other value of the model has.
"""

from __future__ import annotations

import collections

import onnx_ir as ir

__all__ = ["ModelWideNamesStep"]


class ModelWideNamesStep(ir.passes.InPlacePass):
    """Rename every value whose name another value of the model (any graph) already has.

    The main graph's inputs, outputs and initializers are claimed first, so the names a
    caller sees never change; a clash inside is renamed ``<name>_<n>``. Values without a
    name get ``v_<n>``. Functions keep their own names (each function is its own scope).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        used: set[str] = set()
        seen: set[ir.Value] = set()
        counter: collections.Counter[str] = collections.Counter()
        modified = False

        def claim(value: ir.Value | None) -> None:
            nonlocal modified
            if value is None or value in seen:
                return
            seen.add(value)
            name = value.name
            if not name or name in used:
                base = name or "v"
                while not name or name in used:
                    counter[base] += 1
                    name = f"{base}_{counter[base]}"
                value.name = name
                modified = True
            used.add(name)

        def claim_graph(graph: ir.Graph) -> None:
            for value in (*graph.inputs, *graph.outputs, *graph.initializers.values()):
                claim(value)

        claim_graph(model.graph)
        for node in ir.traversal.RecursiveGraphIterator(
            model.graph, enter_graph=lambda g: claim_graph(g) if isinstance(g, ir.Graph) else None
        ):
            for value in (*node.inputs, *node.outputs):
                claim(value)
        return ir.passes.PassResult(model, modified=modified)
