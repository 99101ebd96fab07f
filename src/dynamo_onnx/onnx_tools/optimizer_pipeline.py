"""onnxscript's optimizer, pass for pass, with its one quadratic rewrite rule made linear.

``onnxscript.optimizer.optimize_ir`` folds constants, applies its default rewrite rules and
cleans up. One rule, ``SlicesSplit`` (two ``Slice`` halves of a last axis become a ``Split``,
as in rotary embeddings' ``rotate_half``), has two output nodes: onnxscript's matcher tries it
on every node and, for each try, walks the whole graph for the second ``Slice``: quadratic in
the graph's size, most of the optimizer's time on a language model (docs/performance.md).
Here the same rewrite is made
by walking the uses of each sliced value once, and the rule is left out of the rule set;
every other step is onnxscript's own pass, in ``optimize_ir``'s order. If onnxscript's
layout changes (the rule set or the folding pass moves), ``optimize_ir`` runs as it is.

The model's weights are left as the caller's tensors: no node computing on an initializer
over 1 KiB is folded (onnxscript would fold ``Transpose(weight)`` of every ``Linear``, a
transposed copy of each weight: twice the weights' memory during the export and their copy's
time, for a ``MatMul`` ONNX Runtime fuses with the ``Transpose`` at load anyway).

One rule is corrected: ``MaterializeReshapeShape`` writes a reshape's inferred result shape
as a constant with ``allowzero=1``, a symbolic dimension as ``-1``; beside a dimension of
static size 0 that is a shape ONNX forbids ("product of 0 in combination with -1": a view
of an (n, 0, 2) tensor failed in ONNX Runtime). Here the rule leaves such a reshape as it is.

The rules are tried only on nodes of their pattern's root op type (``rule_roots``): the
same rewrites, without setting up the matcher for every rule at every node.

A constant folded from lazy weights stays lazy (``lazy_folding``): the node's computation
re-applied when it is read, so that a model whose layers are repeated from a template's
gives each layer its own (norms that scale by ``1 + weight``).
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import onnxscript.optimizer
import onnxscript.rewriter

from dynamo_onnx.onnx_tools.lazy_folding import lazy_folding_pass
from dynamo_onnx.onnx_tools.names import ModelWideNamesStep
from dynamo_onnx.onnx_tools.rule_roots import root_filtered

__all__ = ["run_optimizer", "split_halves", "weights_kept"]

_QUADRATIC_RULE = "SlicesSplit"
_RESHAPE_RULE = "MaterializeReshapeShape"


def _no_match(reason: str) -> Any:
    """A failed match of a rewrite rule, with the reason onnxscript's verbose mode shows."""
    result = onnxscript.rewriter.MatchResult()
    result.fail(reason)
    return result


class _MaterializeReshapeShape(onnxscript.rewriter.RewriteRuleClassBase):
    """onnxscript's ``MaterializeReshapeShape``, except where the shape would have a 0
    beside a -1 (invalid with ``allowzero=1``, ambiguous without it)."""

    def __init__(self) -> None:
        super().__init__(_RESHAPE_RULE)
        self._dims: list[int] = []

    def pattern(self, op: Any, data: ir.Value, shape: ir.Value) -> Any:
        return op.Reshape(data, shape)

    def check(self, context: Any, data: ir.Value, shape: ir.Value) -> Any:
        output = context.output_values[0]
        if ir.convenience.get_const_tensor(shape) is not None or output.shape is None:
            return _no_match("The shape is a constant, or the result's shape is unknown.")
        dims = [d if isinstance(d, int) else -1 for d in output.shape]
        if dims.count(-1) > 1 or (-1 in dims and 0 in dims):
            return _no_match("The shape would need two -1, or a -1 beside a 0.")
        self._dims = dims
        return onnxscript.rewriter.MatchResult()

    def rewrite(self, op: Any, data: ir.Value, shape: ir.Value) -> Any:
        constant = op.Constant(value=ir.tensor(self._dims, dtype=ir.DataType.INT64))
        return op.Reshape(data, constant, allowzero=1)


def run_optimizer(model: ir.Model) -> None:
    """Optimize ``model`` in place, as ``onnxscript.optimizer.optimize_ir(model,
    should_fold=weights_kept)`` does."""
    rules = getattr(onnxscript.rewriter, "_DEFAULT_REWRITE_RULES", None)
    folding = getattr(
        getattr(onnxscript.optimizer, "constant_folding", None), "FoldConstantsPass", None
    )
    if rules is None or folding is None or not any(_rule_name(r) == _QUADRATIC_RULE for r in rules):
        onnxscript.optimizer.optimize_ir(model, should_fold=weights_kept)
        ModelWideNamesStep()(model)
        return
    kept = [
        _MaterializeReshapeShape.rule() if _rule_name(rule) == _RESHAPE_RULE else rule
        for rule in rules
        if _rule_name(rule) != _QUADRATIC_RULE
    ]
    steps = ir.passes.PassManager(
        [
            lazy_folding_pass(folding)(
                shape_inference=True,
                input_size_limit=_limit("INPUT"),
                output_size_limit=_limit("OUTPUT"),
                should_fold=weights_kept,
            ),
            onnxscript.rewriter.RewritePass(root_filtered(kept)),
            _SplitHalvesStep(),
            common_passes.RemoveUnusedNodesPass(),
            common_passes.RemoveUnusedFunctionsPass(),
            common_passes.RemoveUnusedOpsetsPass(),
        ],
        steps=2,
        early_stop=True,
    )
    ir.passes.Sequential(
        common_passes.InlinePass(),
        steps,
        common_passes.RemoveUnusedNodesPass(),
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common_passes.LiftSubgraphInitializersToMainGraphPass(),
        common_passes.DeduplicateInitializersPass(),
        common_passes.CommonSubexpressionEliminationPass(),
        common_passes.OutputFixPass(),
        common_passes.NameFixPass(),
        ModelWideNamesStep(),
    )(model)


#: Initializers above this size are weights the folder leaves as they are.
_WEIGHT_BYTES = 1024


def weights_kept(node: ir.Node) -> bool | None:
    """False (do not fold) for a node computing on a weight; None: onnxscript decides."""
    for value in node.inputs:
        tensor = None if value is None or not value.is_initializer() else value.const_value
        if tensor is not None and tensor.nbytes > _WEIGHT_BYTES:
            return False
    return None


def _rule_name(rule: Any) -> str | None:
    return getattr(rule, "name", None)


def _limit(kind: str) -> int:
    return int(
        getattr(onnxscript.optimizer.constant_folding, f"DEFAULT_CONSTANT_FOLD_{kind}_SIZE_LIMIT")
    )


class _SplitHalvesStep(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in (model.graph, *model.functions.values()):
            modified = split_halves(graph) or modified
        return ir.passes.PassResult(model, modified)


def _ints(value: ir.Value | None) -> list[int] | None:
    constant = value.const_value if value is not None else None
    return None if constant is None else [int(v) for v in constant.numpy().reshape(-1)]


def split_halves(graph: ir.Graph | ir.Function) -> bool:
    """``Slice(x, [0], [h], [-1])`` and ``Slice(x, [h], [2h], [-1])`` of a last axis of static
    size ``2h`` become one ``Split(x, axis=-1, num_outputs=2)`` (``SlicesSplit``'s rewrite,
    under its conditions); True if any did."""
    modified = False
    for node in list(graph):
        data = node.inputs[0] if node.inputs else None
        if _half(node, data, 0) is None:
            continue
        assert data is not None
        second = next(
            (
                use.node
                for use in data.uses()
                if use.node is not node
                and use.idx == 0
                and use.node.graph is node.graph
                and _half(use.node, data, 1) is not None
            ),
            None,
        )
        if second is None:
            continue
        split = ir.node(
            "Split",
            [data],
            attributes={"axis": -1, "num_outputs": 2},
            num_outputs=2,
        )
        earlier = min((node, second), key=lambda n: _position(graph, n))
        graph.insert_before(earlier, split)
        for old, new in ((node, split.outputs[0]), (second, split.outputs[1])):
            replaced = old.outputs[0]
            name, replaced.name = replaced.name, None
            new.name, new.shape, new.type = name, replaced.shape, replaced.type
            replaced.replace_all_uses_with(new, replace_graph_outputs=True)
            graph.remove(old, safe=True)
        modified = True
    return modified


def _half(node: ir.Node, data: ir.Value | None, which: int) -> int | None:
    """The half size ``h`` if ``node`` is ``Slice(data)`` of the first (0) or second (1) half
    of ``data``'s static last axis, on that axis alone, with no steps; else None."""
    if (
        node.op_type != "Slice"
        or node.domain not in ("", "ai.onnx")
        or len(node.inputs) != 4
        or data is None
        or data.shape is None
        or not isinstance(data.shape[-1], int)
        or node.inputs[0] is not data
    ):
        return None
    starts, ends, axes = (_ints(v) for v in node.inputs[1:])
    rank = len(data.shape)
    if axes is None or len(axes) != 1 or axes[0] not in (-1, rank - 1) or not starts or not ends:
        return None
    size = data.shape[-1]
    if size % 2:
        return None  # Split(num_outputs=2) of an odd size makes the first part the larger
    half = size // 2
    if which == 0 and starts == [0] and ends == [half]:
        return half
    if which == 1 and starts == [half] and ends == [size]:
        return half
    return None


def _position(graph: ir.Graph | ir.Function, node: ir.Node) -> int:
    for index, candidate in enumerate(graph):
        if candidate is node:
            return index
    return -1
