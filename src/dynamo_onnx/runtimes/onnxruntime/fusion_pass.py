"""The pass that optimizes an exported model for ONNX Runtime, and its findings: a summary of
what fused, per layer, and each attention, normalization or rotary block that did not, at
the line of the module that computes it, with the matcher's reason and its cost in nodes.

Blocks are found from the nodes' origin (``metadata_props``: the module path and classes
the export writes), by PyTorch's naming of modules rather than any family's: a module whose
class ends in ``Attention`` is an attention block (``torch.nn.MultiheadAttention``, a model's
own ``...Attention``), one ending in ``Norm`` a normalization (``torch.nn.LayerNorm``,
``torch.nn.RMSNorm``), and the ``Neg`` of an attention module (the half of its query or key
turned negative) a rotary embedding (:data:`BLOCK_CLASS_SUFFIXES`). A rotary no fused kernel
exists for (:mod:`.rotary_variants`) is a note, not a warning.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import onnx_ir as ir

from dynamo_onnx.defaults import TORCHLIB_OPSET
from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import OnnxExporterError, OptimizationError
from dynamo_onnx.onnx_tools.attention import local_window, windowed_present
from dynamo_onnx.onnx_tools.fake_weights import fake_weights_hidden
from dynamo_onnx.onnx_tools.loading import load_refusal, weights_as_inputs
from dynamo_onnx.onnx_tools.older_opsets import drop_newer_attributes
from dynamo_onnx.onnx_tools.optimizer_pipeline import run_optimizer
from dynamo_onnx.passes.base import PassName
from dynamo_onnx.passes.logs import ONNX_IR_CHATTER, dropped
from dynamo_onnx.passes.metadata import (
    MODULE_CLASSES,
    MODULE_PATH,
    PACKED,
    STACK_TRACE,
    node_error_fields,
    stack_frames,
)
from dynamo_onnx.runtimes.onnxruntime.fusions import FUSED_OPS, MatchFailure, fuse, op_counts
from dynamo_onnx.runtimes.onnxruntime.rotary_variants import multi_axis_rotary

if TYPE_CHECKING:
    from dynamo_onnx.integrations.base import RuntimeStep

__all__ = [
    "Block",
    "FusionReport",
    "FusionRequest",
    "OnnxRuntimeFusionPass",
    "layer_spans",
    "fuse_for_onnxruntime",
]

#: The rule of an unfused block, by kind.
_RULES = {
    "attention": "attention-not-fused",
    "norm": "normalization-not-fused",
    "rotary": "rotary-not-fused",
}
#: The kinds of block a module's class name makes it, by the name's end: PyTorch's naming of
#: its own modules and of the models written on it, true of a plain ``torch.nn.Module`` as of
#: any library's (no family is asked: a model of none has its blocks found too).
BLOCK_CLASS_SUFFIXES = {"Attention": "attention", "Norm": "norm"}
#: The node of a block whose line the finding points at: the one that computes it.
_ANCHOR_OPS = {"attention": ("Softmax", "MatMul"), "norm": ("ReduceMean",), "rotary": ("Neg",)}
_LAYER = re.compile(r"^(.*?\.\d+)(?:\.|$)")


@dataclasses.dataclass(frozen=True)
class Block:
    """One attention, normalization or rotary block of the model before fusion.

    Attributes:
        kind: ``attention``, ``norm`` or ``rotary``.
        module: the module path (``model.layers.3.self_attn``).
        trace: the stack trace of the node that computes it (its source line).
        anchor: that node's operator (``Softmax``, ``ReduceMean``, ``Neg``...).
    """

    kind: str
    module: str
    trace: str
    anchor: str = ""


@dataclasses.dataclass(frozen=True)
class FusionReport:
    """What the fusions did: the fused model, op counts before and after, fusions applied,
    blocks unfused."""

    model: ir.Model
    before: collections.Counter[str]
    after: collections.Counter[str]
    fusions: dict[str, int]
    blocks: tuple[Block, ...]
    unfused: tuple[Block, ...]


@dataclasses.dataclass(frozen=True)
class FusionRequest:
    """The model to fuse (left as it is: the report holds the fused copy), the rows of its
    rotary caches (None: computed), and the steps its model family hands the fusions
    (``ModelFamily.runtime_steps``)."""

    model: ir.Model
    max_positions: int | None = None
    steps: tuple[RuntimeStep, ...] = ()


class OnnxRuntimeFusionPass:
    """``FusionRequest`` -> :class:`FusionReport` with the fused model (DO502-DO505, DO512).
    The request's model is not changed: a fusion that breaks it (DO512) loses nothing."""

    name: ClassVar[str] = PassName.OPTIMIZATION
    error_type: ClassVar[type[OnnxExporterError]] = OptimizationError
    changes_input: ClassVar[bool] = False

    def __call__(self, ctx: DiagnosticContext, request: FusionRequest) -> FusionReport:
        with dropped(*ONNX_IR_CHATTER):  # onnx_ir's remarks while it rewrites are not the user's
            return fuse_for_onnxruntime(
                request.model, ctx, max_positions=request.max_positions, steps=request.steps
            )


def _module(node: ir.Node) -> str:
    return node.metadata_props.get(MODULE_PATH, "")


def _class_name(node: ir.Node) -> str:
    return node.metadata_props.get(MODULE_CLASSES, "").split(";")[-1].rpartition(".")[2]


def _rank(kind: str, node: ir.Node) -> int:
    """How well ``node`` says where a block of ``kind`` is computed (lower is better)."""
    ops = _ANCHOR_OPS[kind]
    return ops.index(node.op_type) if node.op_type in ops else len(ops)


def find_blocks(model: ir.Model) -> list[Block]:
    """The attention, normalization and rotary blocks of ``model``, from its nodes' origin."""
    anchors: dict[tuple[str, str], ir.Node] = {}
    for node in model.graph:
        module, name = _module(node), _class_name(node)
        if not module:
            continue
        kind = next((k for end, k in BLOCK_CLASS_SUFFIXES.items() if name.endswith(end)), None)
        kinds = [] if kind is None else [kind]
        if kind == "attention" and node.op_type in _ANCHOR_OPS["rotary"]:
            kinds.append("rotary")
        for kind in kinds:
            known = anchors.get((kind, module))
            if known is None or _rank(kind, node) < _rank(kind, known):
                anchors[(kind, module)] = node
    return [
        Block(kind, module, node.metadata_props.get(STACK_TRACE, ""), node.op_type)
        for (kind, module), node in anchors.items()
    ]


def _within(module: str, block: Block) -> bool:
    """Whether ``module`` is the block's module or one of its submodules: a rewrite gives
    the node it makes the origin of one of the nodes it replaced, which may be a submodule's
    (an attention may fuse into a node of its output projection, ``attn.c_proj``)."""
    return module == block.module or module.startswith(block.module + ".")


def _is_fused(block: Block, nodes: list[ir.Node], own: list[ir.Node]) -> bool:
    """Whether ``block`` fused: a fused operator among ``nodes`` (the block's module and its
    submodules) or, for a norm or a rotary embedding, none of its computing nodes left in
    ``own`` (the nodes of its module alone): a later rewrite may replace the fused node by
    one whose origin is the enclosing module (a query norm, ``q_norm``, inside its attention)."""
    if block.kind != "attention" and not any(n.op_type == block.anchor for n in own):
        return True
    for node in nodes:
        if block.kind == "attention" and node.op_type == "GroupQueryAttention":
            return True
        if block.kind == "rotary" and (
            node.op_type == "RotaryEmbedding"
            and node.domain == "com.microsoft"
            or node.op_type == "GroupQueryAttention"
            and node.attributes.get_int("do_rotary", 0)
        ):
            return True
        if block.kind == "norm" and node.op_type in FUSED_OPS["norm"]:
            return True
    return False


_FUSED = frozenset(op for ops in FUSED_OPS.values() for op in ops)


def _fused_op(node: ir.Node) -> str | None:
    """What a fusion made of ``node`` (``SimplifiedLayerNormalization`` is in the ONNX
    domain; a MatMul of projections packed together is a ``packed MatMul``), or None."""
    if PACKED in node.metadata_props:
        return f"packed {node.op_type}"
    if node.domain == "com.microsoft" or (node.op_type in _FUSED and node.domain == ""):
        return node.op_type
    return None


def _layer(module: str) -> str:
    found = _LAYER.match(module)
    return found[1] if found else module


def _listing(counts: collections.Counter[str], limit: int = 6) -> str:
    items = [f"{op} x{n}" if n > 1 else op for op, n in counts.most_common(limit)]
    more = len(counts) - limit
    return ", ".join(items) + (f" and {more} more kinds" if more > 0 else "")


def _per_layer(model: ir.Model) -> str:
    """``layers 0-7: 1 GroupQueryAttention, 2 SkipSimplifiedLayerNormalization``: fused ops
    by layer, layers with the same counts together."""
    by_layer: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for node in model.graph:
        fused = _fused_op(node)
        if fused:
            by_layer[_layer(_module(node))][fused] += 1
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for layer, counts in by_layer.items():
        key = ", ".join(f"{n} {op}" for op, n in sorted(counts.items()))
        groups[key].append(layer or "(outside the modules)")
    if not groups:
        return "nothing fused"
    return "; ".join(f"{layer_spans(layers)}: {key}" for key, layers in groups.items())


def layer_spans(layers: list[str]) -> str:
    """``model.layers.1, model.layers.2, model.layers.3`` -> ``model.layers.1-3``."""
    spans: list[tuple[str, int, int]] = []
    others: list[str] = []
    for layer in layers:
        prefix, _, index = layer.rpartition(".")
        if not index.isdigit():
            others.append(layer)
        elif spans and spans[-1][0] == prefix and spans[-1][2] + 1 == int(index):
            spans[-1] = (prefix, spans[-1][1], int(index))
        else:
            spans.append((prefix, int(index), int(index)))
    texts = [f"{p}.{a}" if a == b else f"{p}.{a}-{b}" for p, a, b in spans]
    return ", ".join(texts + others)


def fuse_for_onnxruntime(
    model: ir.Model,
    ctx: DiagnosticContext,
    *,
    max_positions: int | None = None,
    steps: Sequence[RuntimeStep] = (),
) -> FusionReport:
    """Fuse a copy of ``model`` for ONNX Runtime (onnxscript's ORT fusions with the rewrite rules of
    ``rewrites/`` and the family's steps; the copy shares the weights) and record what fused
    (DO502) and each block that did not (DO503-DO505); a fused model ONNX Runtime refuses
    to load is DO512 (:class:`OptimizationError`), and ``model`` is left as it was.

    Call it inside a pass of ``ctx`` (``OnnxRuntimeFusionPass`` is one). ``max_positions``:
    the rows of the rotary cos/sin caches (``max_position_embeddings``); None computes them
    in the graph from the position ids. ``steps``: the model family's, each run before the
    fusion it names or, without one, on the fused model (``ModelFamily.runtime_steps``).
    """
    model = model.clone()  # the nodes: the tensors are shared, never changed in place
    blocks = find_blocks(model)
    before = op_counts(model)
    failures: list[MatchFailure] = []
    with fake_weights_hidden(model):
        fusions = fuse(
            model,
            max_positions=max_positions,
            optimizer=run_optimizer,
            failures=failures,
            family=[s for s in steps if s.before is not None],
        )
    drop_newer_attributes(model, model.opset_imports.get("", TORCHLIB_OPSET))
    for step in steps:
        if step.before is None:
            fusions[step.name] = step.run(model)
    # With ONNX Runtime's graph optimizations, as a user's session has them: they infer
    # shapes through the com.microsoft operators again (load_refusal).
    with weights_as_inputs(model):
        proto = ir.to_proto(model)
    refused = load_refusal(proto)
    if refused is not None:  # a rule matched where it must not: never hand that back
        where, fields = node_error_fields(ctx, model, refused)
        ctx.fail("fused-model-invalid", OptimizationError, where, **fields)
    after = op_counts(model)
    by_module: dict[str, list[ir.Node]] = collections.defaultdict(list)
    for node in model.graph:
        by_module[_module(node)].append(node)

    def subtree(block: Block) -> list[ir.Node]:
        return [n for m, nodes in by_module.items() if _within(m, block) for n in nodes]

    unfused = [b for b in blocks if not _is_fused(b, subtree(b), by_module.get(b.module, []))]
    for block in unfused:
        _record_unfused(ctx, block, by_module.get(block.module, []), subtree(block), failures)
    fused_ops = collections.Counter(filter(None, map(_fused_op, model.graph)))
    ctx.record(
        "runtime-optimized",
        runtime="ONNX Runtime",
        before=sum(before.values()),
        after=sum(after.values()),
        fused_ops=_listing(fused_ops, limit=10) or "none",
        per_layer=_per_layer(model),
        unfused=len(unfused),
        blocks=len(blocks),
    )
    if any(fusions.get(s.name) for s in steps if s.changes_outputs):
        _record_whole_caches(ctx, model)
    return FusionReport(model, before, after, fusions, tuple(blocks), tuple(unfused))


def _record_whole_caches(ctx: DiagnosticContext, model: ir.Model) -> None:
    """DO510: the windowed attentions whose present (a graph output) is now the whole cache."""
    outputs = {id(v) for v in model.graph.outputs if windowed_present(v)}
    nodes = [n for n in model.graph if any(id(o) in outputs for o in n.outputs)]
    if not nodes:
        return
    windows = sorted({local_window(n) or 0 for n in nodes})
    ctx.record(
        "window-cache-made-whole",
        layers=len(nodes),
        windows=", ".join(map(str, windows)),
        modules=layer_spans([_layer(_module(n)) for n in nodes]),
        outputs=", ".join(f"`{o.name}`" for n in nodes for o in n.outputs[1:] if id(o) in outputs),
    )


def _record_unfused(
    ctx: DiagnosticContext,
    block: Block,
    own: list[ir.Node],
    nodes: list[ir.Node],
    failures: list[MatchFailure],
) -> None:
    """DO503-DO505 for ``block``: ``own`` are the nodes of its module, ``nodes`` those of
    its submodules too (where the operator it was fused into instead may be). A rotary
    ONNX Runtime has no fused kernel for (a multi-axis one) is the note DO543 instead."""
    reasons = list(
        dict.fromkeys(
            f.reason.strip().rstrip(".")
            for f in failures
            if f.kind == block.kind and _within(_module(f.node), block)
        )
    )
    frames = stack_frames(ctx, block.trace)
    where: Location | None = ctx.user_frame(frames)
    fused_instead = [
        n for n in nodes if block.kind == "attention" and n.op_type in FUSED_OPS["attention"]
    ]
    nodes = [*own, *(n for n in fused_instead if n not in own)]
    fields = {
        "module": block.module,
        "reason": "; ".join(reasons) or "no pattern of the fusion matched its nodes",
        "nodes": len(nodes),
        "ops": _listing(collections.Counter(n.op_type for n in nodes)) or "none",
    }
    if fused_instead:  # fused all the same: a note (DO511), not a block left as it was
        ctx.record(
            "attention-fused-as-multihead",
            locations=[where],
            stack=frames,
            op=fused_instead[0].op_type,
            **fields,
        )
        return
    variant = multi_axis_rotary(own) if block.kind == "rotary" else None
    if variant is not None:  # no fused kernel exists for it: a note (DO543), nothing to fix
        del fields["reason"]
        ctx.record(
            "rotary-without-fused-kernel",
            locations=[where],
            stack=frames,
            variant=variant.describe(),
            **fields,
        )
        return
    ctx.record(_RULES[block.kind], locations=[where], stack=frames, **fields)
