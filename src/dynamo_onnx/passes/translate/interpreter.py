"""The translator: an FX graph becomes ONNX nodes, in the style of ``torch.fx.Interpreter``.

``run_node`` calls the method named after the node's kind (``placeholder``, ``get_attr``,
``call_function``, ``output``); each ``call_function`` is dispatched to an ONNX function
(``registry.dispatch``), run under a :class:`NodeRecorder` to collect the nodes it emits,
and added through the :class:`GraphBuilder`. A node that cannot be translated is a finding
(``problems``), its outputs get stand-ins, and translation goes on.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch
import torch.fx

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import TranslationError
from dynamo_onnx.fake import is_fake
from dynamo_onnx.passes.fx import ASSERTIONS, has_decomposition, is_higher_order
from dynamo_onnx.passes.metadata import NodeSource, control_flow_source, node_source, origin_props
from dynamo_onnx.passes.translate import control_flow, problems
from dynamo_onnx.passes.translate.builder import GraphBuilder, Subgraph
from dynamo_onnx.passes.translate.constants import eager_constant
from dynamo_onnx.passes.translate.dtypes import dtype_finding
from dynamo_onnx.passes.translate.fallback import Lower, flat_args, single_node_program
from dynamo_onnx.passes.translate.problems import OperatorTally
from dynamo_onnx.passes.translate.recorder import NodeRecorder, recording
from dynamo_onnx.registry import OnnxRegistry, target_name
from dynamo_onnx.registry.dispatch import dispatch
from dynamo_onnx.tensors import DtypeNotInOnnx

__all__ = ["Translator"]


class Translator:
    """Translates the nodes of one FX graph into the graph of ``builder``.

    Args:
        ctx: where findings go.
        registry: the ONNX functions.
        builder: the ONNX graph being built, and the values in scope.
        opset: the opset the export converts to (dispatch may prefer functions for it).
        tally: operators seen and failures, shared by every nested translator.
        lower: decomposes a one-node program, for the per-node fallback (None: no fallback).
        module: the module whose graph this is (``get_attr`` nodes name its attributes).
        source: where findings of a nested scope point (the outer node's line), if set.
    """

    def __init__(
        self,
        ctx: DiagnosticContext,
        registry: OnnxRegistry,
        builder: GraphBuilder,
        *,
        opset: int,
        tally: OperatorTally,
        lower: Lower | None = None,
        module: torch.nn.Module | None = None,
        source: NodeSource | None = None,
    ) -> None:
        self.ctx = ctx
        self.registry = registry
        self.builder = builder
        self.opset = opset
        self.tally = tally
        self.lower = lower
        self.module = module
        self._source = source

    def nested(
        self, builder: GraphBuilder, source: NodeSource, module: torch.nn.Module | None = None
    ) -> Translator:
        """A translator for a nested scope (a subgraph, a decomposed node) sharing the rest."""
        return Translator(
            self.ctx,
            self.registry,
            builder,
            opset=self.opset,
            tally=self.tally,
            lower=self.lower,
            module=module,
            source=source,
        )

    def source(self, node: torch.fx.Node) -> NodeSource:
        """Where findings about ``node`` point."""
        return self._source or node_source(self.ctx, node)

    # -- the node loop -----------------------------------------------------------------

    def run(self, graph: torch.fx.Graph) -> None:
        """Translate every node of ``graph``, reporting progress every 64 nodes."""
        total = len(graph.nodes)
        for done, node in enumerate(graph.nodes, 1):
            if done % 64 == 0 or done == total:
                self.ctx.progress(done, total)
            self.run_node(node)

    def run_node(self, node: torch.fx.Node) -> None:
        handler = getattr(self, node.op, None)
        if handler is None:
            self.ctx.fail(
                "translation-failed",
                TranslationError,
                self.source(node).primary,
                cause=f"FX node {node.format_node()} of kind {node.op!r} is not supported",
            )
        handler(node)

    # -- one method per node kind ------------------------------------------------------

    def placeholder(self, node: torch.fx.Node) -> None:
        if node.name not in self.builder:  # else bound by the caller: a subgraph's operand
            self.builder.bind(node.name, self.builder.new_value(node.name, node.meta.get("val")))

    def get_attr(self, node: torch.fx.Node) -> None:
        val = node.meta.get("val")
        attribute = _fetch_attr(self.module, str(node.target))
        if isinstance(val, torch.Tensor):
            # the module's own tensor when it holds one: the constant of a loop nested in a
            # loop's body stays a get_attr, whose meta value is a FakeTensor without data
            real = isinstance(attribute, torch.Tensor) and not is_fake(attribute)
            name = f"{self.builder.prefix}{node.name}"
            tensor = attribute if real else val
            self.builder.bind(node.name, self.builder.add_initializer(name, tensor))
            return
        if not isinstance(attribute, torch.fx.GraphModule):
            self.ctx.fail(
                "translation-failed",
                TranslationError,
                self.source(node).primary,
                cause=f"get_attr node {node.name!r} refers to a {type(attribute).__name__}, "
                "neither a tensor nor a control-flow subgraph",
            )
        self.builder.bind(node.name, Subgraph(str(node.target), attribute))

    def call_function(self, node: torch.fx.Node) -> None:
        if node.target in ASSERTIONS:
            return
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            whole = self.builder[node.args[0].name]
            if isinstance(whole, tuple):
                self.builder.bind(node.name, whole[node.args[1]])  # type: ignore[index]
                return
        if is_higher_order(node.target):
            self._higher_order(node)
        else:
            self._dispatched(node)

    def output(self, node: torch.fx.Node) -> None:
        """Nothing: the graph's outputs come from the program's signature (or the
        control-flow handler, for a subgraph)."""

    # -- call_function -----------------------------------------------------------------

    def _dispatched(self, node: torch.fx.Node) -> None:
        chosen = dispatch(node, self.registry, self.opset)
        self.tally.seen(chosen.op)
        constant = eager_constant(node)
        if constant is not None:
            name = f"{self.builder.prefix}{node.name}"
            self.builder.bind(node.name, self.builder.add_initializer(name, constant))
            self.tally.translated(chosen.op, "constant computed by torch")
            return
        source = self.source(node)
        failure: Exception | None = None
        if chosen.function is not None:
            try:
                args = self.builder.convert(list(node.args))
                kwargs = {k: self.builder.convert(v) for k, v in node.kwargs.items()}
            except DtypeNotInOnnx as exc:  # a cast to complex32...: found here in a fallback
                self.builder.stand_in(node)
                where = self.ctx.display(self.source(node).primary)
                finding = dtype_finding(self.ctx, node, exc.dtype)
                self.tally.add_failure("other", target_name(node.target), where, finding)
                return
            if kwargs.get("dtype", 0) is None:
                kwargs["dtype"] = -1  # torch_lib's "no dtype given"
            recorder = NodeRecorder(self.registry.opset_version, self.builder.constants, self.opset)
            try:
                with recording(recorder):
                    outputs = chosen.function.function(*args, **kwargs)
            except Exception as exc:  # a finding, or the fallback below
                failure = exc
            else:
                self.tally.translated(chosen.op, chosen.function.name)
                recorder.commit()
                self.builder.adopt(
                    node, outputs, recorder.nodes, origin_props(node, source), recorder.functions
                )
                if chosen.mismatches:
                    problems.nearest_match(self.ctx, node, source, chosen)
                problems.dispatched(self.ctx, node, source, chosen)
                return
        if self._fallback(node, source, chosen.op, failure):
            self.tally.translated(chosen.op, "torch decomposition")
            return
        self.builder.stand_in(node)
        if failure is not None:
            problems.translation_failed(self.ctx, self.tally, node, source, chosen, failure)
        else:
            problems.unsupported(self.ctx, self.tally, node, source, chosen)

    def _fallback(
        self, node: torch.fx.Node, source: NodeSource, op: str, failure: Exception | None
    ) -> bool:
        """Translate the node through torch's decomposition of its operator, if it has one."""
        if self.lower is None or not has_decomposition(node.target):
            return False
        program = single_node_program(node, self.lower)
        if program is None or program.graph_signature.input_tokens:
            # (a decomposition with side effects, ``linalg.tensorinv``'s error check: its
            # effect tokens have no ONNX value, and the operator stays unsupported)
            return False
        nested = self.nested(self.builder.scope(f"{self.builder.prefix}{node.name}__"), source)
        placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
        inputs = [a for a in flat_args(node) if isinstance(a, torch.fx.Node)]
        for placeholder, arg in zip(placeholders, inputs):
            nested.builder.bind(placeholder.name, self.builder[arg.name])
        failures_before = len(self.tally.failures)
        for sub in program.graph.nodes:
            if sub.op in ("call_function", "get_attr"):
                nested.run_node(sub)
        if len(self.tally.failures) > failures_before:
            self.builder.stand_in(node)
            return True  # the decomposition's own findings say what is missing
        (output,) = [n for n in program.graph.nodes if n.op == "output"]
        results = [nested.builder[a.name] for a in output.args[0]]
        several = isinstance(node.meta.get("val"), (list, tuple))  # a list of one is a list
        self.builder.bind(node.name, tuple(results) if several else results[0])  # type: ignore[arg-type]
        ops = sorted(
            {target_name(n.target) for n in program.graph.nodes if n.op == "call_function"}
        )
        self.ctx.record(
            "decomposition-fallback",
            locations=[source.primary],
            stack=source.frames,
            properties={"fx_node": node.name, "module_path": source.module_path},
            op=op,
            source=self.ctx.display(source.primary),
            problem=(
                f"its ONNX function failed ({type(failure).__name__})"
                if failure is not None
                else "no ONNX function"
            ),
            ops=", ".join(f"`{o}`" for o in ops),
        )
        return True

    def _higher_order(self, node: torch.fx.Node) -> None:
        """A control-flow node: ONNX ``If``/``Loop``/``Scan``, or a finding."""
        source = self._source or control_flow_source(self.ctx, node)
        op = control_flow.op_name(node)
        self.tally.seen(op)
        onnx_op = control_flow.translate(self, node, source)
        if onnx_op is not None:
            self.tally.translated(op, onnx_op)

    # -- the interface of control-flow handlers ----------------------------------------

    def subgraph(
        self,
        node: torch.fx.Node,
        source: NodeSource,
        module: Subgraph,
        label: str,
        outer: Sequence[ir.Value | None],
        graph: ir.Graph | None = None,
    ) -> tuple[GraphBuilder, list[ir.Value]]:
        """Translate the FX sub-module ``module`` into ``graph`` (a new subgraph unless given).

        The sub-module's placeholders are bound, in order, to ``outer``; an entry that is
        ``None`` becomes an input of the subgraph (a loop-carried value or a scanned slice).
        Returns the subgraph's builder and the values of the sub-module's results.
        """
        prefix = f"{self.builder.prefix}{node.name}__{label}__"
        if graph is None:
            graph = ir.Graph([], [], nodes=[], name=prefix.rstrip("_"))
        nested = self.nested(self.builder.scope(prefix, graph), source, module.module)
        placeholders = [n for n in module.module.graph.nodes if n.op == "placeholder"]
        for placeholder, value in zip(placeholders, outer, strict=True):
            if value is None:
                value = nested.builder.new_value(placeholder.name, placeholder.meta.get("val"))
                graph.inputs.append(value)
            nested.builder.bind(placeholder.name, value)
        nested.run(module.module.graph)
        (output,) = [n for n in module.module.graph.nodes if n.op == "output"]
        results = output.args[0]
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        return nested.builder, [nested.builder.value(r.name) for r in results]

    def reject(self, node: torch.fx.Node, source: NodeSource, op: str, problem: str) -> None:
        """A control-flow node that cannot become ONNX: a finding, and stand-in outputs."""
        self.builder.stand_in(node)
        problems.control_flow_unsupported(self.ctx, self.tally, node, source, op, problem)


def _fetch_attr(module: torch.nn.Module | None, target: str) -> Any:
    """The attribute a ``get_attr`` node names (dotted path), or None when unknown."""
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part, None)
    return value
