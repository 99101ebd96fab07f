"""Translation: the decomposed FX graph becomes an ``onnx_ir`` model.

Each ``call_function`` node is dispatched to an ONNX function, which is run under a
:class:`NodeRecorder` to collect the ONNX nodes it emits. Every ONNX node keeps its origin
in ``metadata_props``: the FX node, the module path and the source stack trace.

Translation collects all it can: a node with no ONNX function, or whose function fails, is
recorded as a finding and translation goes on, so one run reports every problem.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch
import torch.fx
from torch.export import graph_signature as gs

from dynamo_onnx.exporter.versions import package_version
from dynamo_onnx.diagnostics import DiagnosticContext, Level, Location
from dynamo_onnx.diagnostics.context import mark_recorded
from dynamo_onnx.diagnostics.findings import parse_stack_trace
from dynamo_onnx.exporter.control_flow import Subgraph, is_higher_order, translate_higher_order
from dynamo_onnx.exporter.decomposition import ASSERTIONS, has_decomposition
from dynamo_onnx.exporter.dispatch import dispatch
from dynamo_onnx.exporter.errors import TranslationError, UnsupportedOperatorError, format_message
from dynamo_onnx.exporter.recorder import ConstantCache, NodeRecorder, recording
from dynamo_onnx.exporter.registry import OnnxRegistry, target_name
from dynamo_onnx.exporter.tensors import TORCH_TO_ONNX_DTYPE, torch_tensor_to_ir
from dynamo_onnx.rules import get_rule

__all__ = ["run", "TranslationResult", "META_PREFIX"]

#: Prefix of the metadata_props keys that record each ONNX node's origin.
META_PREFIX = "pkg.dynamo_onnx."



@dataclasses.dataclass
class TranslationResult:
    """The ONNX model and what translation learned about the operators."""

    model: ir.Model
    #: operator -> (count, ONNX function name or None)
    operators: dict[str, tuple[int, str | None]]


@dataclasses.dataclass(frozen=True)
class _Source:
    """Where an FX node came from in the user's code."""

    frames: tuple[Location, ...]
    primary: Location | None
    module_path: str
    stack_trace: str
    #: Paths of the modules whose forward was on the stack, outermost first.
    module_chain: tuple[str, ...] = ()
    #: Their classes, as ``module.Class`` names.
    module_classes: tuple[str, ...] = ()


def _node_source(ctx: DiagnosticContext, node: torch.fx.Node) -> _Source:
    trace = node.meta.get("stack_trace") or ""
    frames = parse_stack_trace(trace)
    stack = node.meta.get("nn_module_stack") or {}
    entries = [(path, cls) for path, cls in stack.values() if path]
    chain = tuple(path for path, _ in entries)
    classes = tuple(
        cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}" for _, cls in entries
    )
    module_path = chain[-1] if chain else ""
    return _Source(frames, ctx.user_frame(frames), module_path, trace, chain, classes)


def _symbolic_dim(dim: Any) -> int | str:
    """A SymInt as an ONNX dim: its name, or its value when torch specialized it."""
    text = str(dim)
    return int(text) if text.lstrip("-").isdigit() else text


def _set_type_and_shape(value: ir.Value, meta: Any) -> None:
    """Type and shape an ONNX value from an FX ``meta["val"]`` (complex -> [..., 2] floats)."""
    if isinstance(meta, torch.Tensor):
        dims: list[int | str] = [d if isinstance(d, int) else _symbolic_dim(d) for d in meta.shape]
        dtype = meta.dtype
        if dtype.is_complex:
            dtype = dtype.to_real()
            dims.append(2)
        value.dtype = TORCH_TO_ONNX_DTYPE[dtype]
        value.shape = ir.Shape(dims)
    elif isinstance(meta, (bool, torch.SymBool)):
        value.dtype, value.shape = ir.DataType.BOOL, ir.Shape([])
    elif isinstance(meta, (int, torch.SymInt)):
        value.dtype, value.shape = ir.DataType.INT64, ir.Shape([])
    elif isinstance(meta, (float, torch.SymFloat)):
        value.dtype, value.shape = ir.DataType.FLOAT, ir.Shape([])


class _GraphTranslator:
    """Translates the nodes of one FX graph into one ONNX graph."""

    def __init__(
        self,
        ctx: DiagnosticContext,
        registry: OnnxRegistry,
        model: ir.Model,
        graph: ir.Graph,
        decompose: Decompose | None = None,
        module: torch.nn.Module | None = None,
        target_opset: int | None = None,
    ) -> None:
        self.ctx = ctx
        #: The opset the export converts to: dispatch may choose functions written for it.
        self.target_opset = target_opset if target_opset is not None else registry.opset_version
        #: The module whose graph this translates: ``get_attr`` nodes name its attributes.
        self.module = module
        self.registry = registry
        self.model = model
        self.graph = graph
        self.decompose = decompose
        self.values: dict[str, ir.Value | tuple[ir.Value, ...]] = {}
        self.constants: ConstantCache = {}
        self.operators: dict[str, list[Any]] = {}
        self.failed: list[str] = []
        #: Prefix of value and node names: a decomposed node's subgraph has its own names.
        self.prefix = ""
        #: Where findings of a decomposed node's subgraph point: the node's own source.
        self.source_override: _Source | None = None

    def _child(self, node: torch.fx.Node, source: _Source) -> _GraphTranslator:
        """A translator for the subgraph of one decomposed node, sharing all but values."""
        child = _GraphTranslator(
            self.ctx, self.registry, self.model, self.graph, self.decompose,
            target_opset=self.target_opset,
        )
        child.constants, child.operators, child.failed = self.constants, self.operators, self.failed
        child.prefix = f"{self.prefix}{node.name}__"
        child.source_override = source
        return child

    def child_for_subgraph(
        self, graph: ir.Graph, module: torch.nn.Module, prefix: str, source: _Source
    ) -> _GraphTranslator:
        """A translator for a control-flow branch or body, writing into ``graph``.

        Constants made for another graph are visible from the outer scope, but constants
        made in a subgraph must stay in it: its cache is a copy unless it writes here.
        """
        child = _GraphTranslator(
            self.ctx, self.registry, self.model, graph, self.decompose, module, self.target_opset
        )
        child.constants = self.constants if graph is self.graph else dict(self.constants)
        child.operators, child.failed = self.operators, self.failed
        child.prefix = prefix
        child.source_override = source
        return child

    # -- arguments -------------------------------------------------------------------------

    def arg(self, arg: Any) -> Any:
        """An FX argument as onnxscript expects it: values for nodes, ints for dtypes."""
        if isinstance(arg, torch.fx.Node):
            return self.values[arg.name]
        if isinstance(arg, (list, tuple)):
            return [self.arg(a) for a in arg]
        if isinstance(arg, torch.dtype):
            return TORCH_TO_ONNX_DTYPE[arg]
        if isinstance(arg, (torch.device, torch.memory_format, torch.layout)):
            return str(arg)
        return arg

    # -- nodes -----------------------------------------------------------------------------

    def translate(self, fx_graph: torch.fx.Graph) -> None:
        total = len(fx_graph.nodes)
        for done, node in enumerate(fx_graph.nodes, 1):
            if done % 64 == 0 or done == total:
                self.ctx.progress(done, total)
            if node.op == "placeholder":
                if node.name in self.values:
                    continue  # bound by the caller: a subgraph's operand
                value = ir.Value(name=node.name)
                _set_type_and_shape(value, node.meta.get("val"))
                self.values[node.name] = value
            elif node.op == "call_function":
                self._call_function(node)
            elif node.op == "get_attr":
                self._get_attr(node)
            elif node.op == "output":
                pass  # outputs are taken from the graph signature
            else:
                raise TranslationError(
                    f"FX node {node.format_node()} of kind {node.op!r} is not supported"
                )

    def _get_attr(self, node: torch.fx.Node) -> None:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            attribute = _fetch_attr(self.module, str(node.target))
            if isinstance(attribute, torch.fx.GraphModule):
                self.values[node.name] = Subgraph(str(node.target), attribute)  # type: ignore[assignment]
                return
            raise TranslationError(
                f"get_attr node {node.name!r} refers to a {type(attribute).__name__}, "
                "neither a tensor nor a control-flow subgraph"
            )
        name = f"{self.prefix}{node.name}"
        value = ir.Value(name=name, const_value=torch_tensor_to_ir(val, name))
        _set_type_and_shape(value, val)
        self.graph.initializers[name] = value
        self.values[node.name] = value

    def _call_function(self, node: torch.fx.Node) -> None:
        if node.target in ASSERTIONS:
            return
        if node.target is operator.getitem:
            source = self.values.get(node.args[0].name)  # type: ignore[union-attr]
            if isinstance(source, tuple):
                self.values[node.name] = source[node.args[1]]  # type: ignore[index]
                return
        if is_higher_order(node.target):
            self._higher_order(node)
            return
        chosen = dispatch(node, self.registry, self.target_opset)
        entry = self.operators.setdefault(chosen.op, [0, None])
        entry[0] += 1
        source = self.source_override or _node_source(self.ctx, node)
        outputs: Any = None
        failure: Exception | None = None
        recorder = NodeRecorder(self.registry.opset_version, self.constants)
        if chosen.function is not None:
            args = [self.arg(a) for a in node.args]
            kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
            if kwargs.get("dtype", 0) is None:
                kwargs["dtype"] = -1  # torch_lib's "no dtype given"
            try:
                with recording(recorder):
                    outputs = chosen.function.function(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a finding, or the fallback below
                failure = exc
        if chosen.function is None or failure is not None:
            if self._fallback(node, source, chosen.op, failure):
                entry[1] = "torch decomposition"
                return
            self._report_failure(node, source, chosen, failure)
            return
        entry[1] = chosen.function.name
        recorder.commit()
        self.adopt_nodes(node, outputs, recorder.nodes, source, recorder.functions)
        if chosen.mismatches:
            self.ctx.record(
                "dispatch-nearest-match",
                locations=[source.primary],
                stack=source.frames,
                properties={"fx_node": node.name, "module_path": source.module_path},
                op=chosen.op,
                source=self.ctx.display(source.primary),
                function=chosen.function.name,
                candidates=chosen.candidates,
                mismatches="; ".join(chosen.mismatches),
            )
        self.ctx.record(
            "node-dispatched",
            locations=[source.primary],
            properties={"fx_node": node.name},
            op=chosen.op,
            function=chosen.function.name,
            reason=chosen.reason,
        )

    def _higher_order(self, node: torch.fx.Node) -> None:
        """A control-flow node: ONNX ``If``/``Loop``/``Scan``, or a finding."""
        source = self.source_override or _control_flow_source(self.ctx, node)
        op = f"higher_order.{getattr(node.target, '__name__', node.target)}"
        entry = self.operators.setdefault(op, [0, None])
        entry[0] += 1
        onnx_op = translate_higher_order(self, node, source)
        if onnx_op is not None:
            entry[1] = onnx_op

    def report_control_flow(
        self, node: torch.fx.Node, source: _Source, op: str, problem: str
    ) -> None:
        """Record a control-flow node that cannot become ONNX; stand-ins keep translation going."""
        self._placeholder_outputs(node)
        self.failed.append(op)
        self.ctx.record(
            "control-flow-unsupported",
            locations=[source.primary],
            stack=source.frames,
            properties={"fx_node": node.name, "module_path": source.module_path},
            op=op,
            source=self.ctx.display(source.primary),
            problem=problem,
        )

    def _report_failure(
        self, node: torch.fx.Node, source: _Source, chosen: Any, failure: Exception | None
    ) -> None:
        """Record why the node cannot be translated; stand-in outputs keep translation going."""
        self._placeholder_outputs(node)
        self.failed.append(chosen.op)
        common = {
            "locations": [source.primary],
            "stack": source.frames,
            "op": chosen.op,
            "source": self.ctx.display(source.primary),
        }
        if failure is not None:
            text = str(failure).strip()
            self.ctx.record(
                "operator-translation-failed",
                properties={"fx_node": node.name, "module_path": source.module_path},
                function=chosen.function.name,
                cause=f"{type(failure).__name__}: {text.splitlines()[0] if text else ''}",
                **common,
            )
            return
        decomposable = has_decomposition(node.target)
        finding = self.ctx.record(
            "unsupported-operator",
            properties={
                "fx_node": node.name,
                "module_path": source.module_path,
                "reason": chosen.reason,
                "has_decomposition": decomposable,
            },
            decomposition=(
                "torch has a decomposition for it, but it decomposes into operators "
                "without ONNX functions"
                if decomposable
                else "torch has no decomposition for it"
            ),
            **common,
        )
        finding.markdown = f"{finding.message}\n\n{_register_example(chosen.op, node)}"

    def _fallback(
        self, node: torch.fx.Node, source: _Source, op: str, failure: Exception | None
    ) -> bool:
        """Translate the node through torch's decomposition of its operator, if it has one."""
        if self.decompose is None or not has_decomposition(node.target):
            return False
        program = _single_node_program(node, self.decompose)
        if program is None:
            return False
        child = self._child(node, source)
        placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
        inputs = [a for a in _flat_args(node) if isinstance(a, torch.fx.Node)]
        for placeholder, arg in zip(placeholders, inputs):
            child.values[placeholder.name] = self.values[arg.name]
        failed_before = len(self.failed)
        for sub in program.graph.nodes:
            if sub.op == "call_function":
                child._call_function(sub)
            elif sub.op == "get_attr":
                child._get_attr(sub)
        if len(self.failed) > failed_before:
            return True  # the subgraph's own findings say what is missing
        (output,) = [n for n in program.graph.nodes if n.op == "output"]
        results = [child.values[a.name] for a in output.args[0]]
        self.values[node.name] = results[0] if len(results) == 1 else tuple(results)  # type: ignore[assignment]
        ops = sorted(
            {target_name(n.target) for n in program.graph.nodes if n.op == "call_function"}
        )
        self.ctx.record(
            "decomposition-fallback",
            locations=[source.primary],
            stack=source.frames,
            properties={"fx_node": node.name, "module_path": source.module_path},
            op=op,
            problem=(
                f"its ONNX function failed ({type(failure).__name__})"
                if failure is not None
                else "no ONNX function"
            ),
            ops=", ".join(f"`{o}`" for o in ops),
        )
        return True

    def _placeholder_outputs(self, node: torch.fx.Node) -> None:
        """Typed stand-in values so that later nodes can still be translated and checked."""
        meta = node.meta.get("val")
        if isinstance(meta, (list, tuple)):
            values = tuple(ir.Value(name=f"{node.name}__{i}") for i in range(len(meta)))
            for value, m in zip(values, meta):
                _set_type_and_shape(value, m)
            self.values[node.name] = values
        else:
            value = ir.Value(name=node.name)
            _set_type_and_shape(value, meta)
            self.values[node.name] = value

    def adopt_nodes(
        self,
        node: torch.fx.Node,
        outputs: Any,
        nodes: Sequence[ir.Node],
        source: _Source,
        functions: Mapping[ir.OperatorIdentifier, Any] | None = None,
    ) -> None:
        """Name and type the outputs, tag the emitted nodes, and add them to the graph.

        ``functions`` are the onnxscript functions the nodes call, added to the model.
        """
        meta = node.meta.get("val")
        if isinstance(outputs, Sequence) and not isinstance(outputs, ir.Value):
            outputs = tuple(outputs)
            metas = meta if isinstance(meta, (list, tuple)) else [meta] * len(outputs)
            for i, (value, m) in enumerate(zip(outputs, metas)):
                value.name = f"{self.prefix}{node.name}__{i}"
                _set_type_and_shape(value, m)
            self.values[node.name] = outputs
        else:
            outputs.name = f"{self.prefix}{node.name}"
            if not isinstance(meta, (list, tuple)):
                _set_type_and_shape(outputs, meta)
            self.values[node.name] = outputs
        props = {
            f"{META_PREFIX}fx_node": node.format_node(),
            f"{META_PREFIX}fx_node_name": node.name,
            f"{META_PREFIX}module_path": source.module_path,
            f"{META_PREFIX}module_chain": ";".join(source.module_chain),
            f"{META_PREFIX}module_classes": ";".join(source.module_classes),
            f"{META_PREFIX}stack_trace": source.stack_trace,
            "namespace": source.module_path,
        }
        for i, onnx_node in enumerate(nodes):
            onnx_node.name = f"{self.prefix}{node.name}_n{i}"
            onnx_node.metadata_props.update(props)
        self.graph.extend(nodes)
        for identifier, function in (functions or {}).items():
            if identifier not in self.model.functions:
                self.model.functions[identifier] = ir.serde.deserialize_function(
                    function.to_function_proto()
                )


#: Lowers an ExportedProgram, also decomposing the given operators (handed in by api.py).
Decompose = Callable[[torch.export.ExportedProgram, Sequence[Any]], torch.export.ExportedProgram]


def _fetch_attr(module: torch.nn.Module | None, target: str) -> Any:
    """The attribute a ``get_attr`` node names (dotted path), or None when unknown."""
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def _control_flow_source(ctx: DiagnosticContext, node: torch.fx.Node) -> _Source:
    """Where a control-flow node is in the user's code.

    torch records the higher-order call with a generated stack (``<eval_with_key>``); the
    nodes computing its operands, like the predicate of a ``cond``, carry the user's line.
    """
    source = _node_source(ctx, node)
    if source.primary is not None:
        return source
    for arg in node.all_input_nodes:
        candidate = _node_source(ctx, arg)
        if candidate.primary is not None:
            return dataclasses.replace(candidate, stack_trace=candidate.stack_trace or source.stack_trace)
    return source


def _flat_args(node: torch.fx.Node) -> list[Any]:
    """The node's arguments, positional then keyword, with lists flattened."""
    flat: list[Any] = []
    for arg in [*node.args, *node.kwargs.values()]:
        flat.extend(arg if isinstance(arg, (list, tuple)) else [arg])
    return flat


class _OneOperator(torch.nn.Module):
    """Calls one operator with the node's arguments, tensors given as inputs."""

    def __init__(self, node: torch.fx.Node) -> None:
        super().__init__()
        self.target = node.target
        self.args_, self.kwargs_ = node.args, dict(node.kwargs)

    def forward(self, *tensors: torch.Tensor) -> Any:
        supply = iter(tensors)

        def fill(arg: Any) -> Any:
            if isinstance(arg, torch.fx.Node):
                return next(supply)
            if isinstance(arg, (list, tuple)):
                return type(arg)(fill(a) for a in arg)
            return arg

        args = [fill(a) for a in self.args_]
        kwargs = {k: fill(v) for k, v in self.kwargs_.items()}
        return self.target(*args, **kwargs)


def _single_node_program(
    node: torch.fx.Node, decompose: Decompose
) -> torch.export.ExportedProgram | None:
    """The node alone, captured and decomposed with its operator's torch decomposition.

    Only for static shapes: example inputs are zeros of the node's input shapes.
    """
    examples = []
    for arg in _flat_args(node):
        if not isinstance(arg, torch.fx.Node):
            continue
        val = arg.meta.get("val")
        if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
            return None
        examples.append(torch.zeros(tuple(val.shape), dtype=val.dtype))
    try:
        program = torch.export.export(_OneOperator(node), tuple(examples), strict=False)
        return decompose(program, [node.target])
    except Exception:  # noqa: BLE001 - no fallback then; the original finding stands
        return None


def _register_example(op: str, node: torch.fx.Node) -> str:
    """A ready-to-paste registration for the operator, for the finding's markdown."""
    namespace, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    inputs = [a for a in node.args if isinstance(a, torch.fx.Node)]
    params = ", ".join(f"x{i}" for i in range(len(inputs))) or "x0"
    overload_arg = f", overload={overload!r}" if overload else ""
    fn = f"{namespace}_{name}".replace(".", "_")
    return (
        "Register one (ready to paste, then write the body):\n\n"
        "```python\n"
        "import dynamo_onnx\n"
        "from onnxscript import opset18 as op\n\n\n"
        f"def {fn}({params}):\n"
        f"    return op.Identity(x0)  # replace with the ONNX computation of {op}\n\n\n"
        "registry = dynamo_onnx.OnnxRegistry()\n"
        f"registry.register_op({fn}, {namespace!r}, {name!r}{overload_arg})\n"
        "program = dynamo_onnx.export(model, args, registry=registry)\n"
        "```"
    )


def _bind_signature(
    ep: torch.export.ExportedProgram, translator: _GraphTranslator, graph: ir.Graph
) -> None:
    """Inputs, initializers and outputs from the ExportedProgram's graph signature."""
    values = translator.values
    state = {**ep.state_dict, **ep.constants}
    for spec in ep.graph_signature.input_specs:
        if isinstance(spec.arg, gs.ConstantArgument) or not hasattr(spec.arg, "name"):
            continue
        value = values[spec.arg.name]
        assert isinstance(value, ir.Value)
        if spec.kind == gs.InputKind.USER_INPUT:
            graph.inputs.append(value)
            continue
        tensor = state.get(spec.target) if spec.target is not None else None
        if tensor is None:
            raise TranslationError(f"No tensor for {spec.kind.name} {spec.target!r}")
        if isinstance(tensor, torch.nn.Parameter):
            tensor = tensor.data
        value.name = spec.target
        value.const_value = torch_tensor_to_ir(tensor, spec.target)
        value.metadata_props[f"{META_PREFIX}fx_node_name"] = spec.arg.name
        _set_type_and_shape(value, tensor)
        graph.initializers[spec.target] = value
    seen: set[int] = set()
    for spec in ep.graph_signature.output_specs:
        if spec.kind != gs.OutputKind.USER_OUTPUT or not hasattr(spec.arg, "name"):
            continue
        value = values[spec.arg.name]
        assert isinstance(value, ir.Value)
        if value.is_graph_input() or value.is_initializer() or id(value) in seen:
            # An ONNX graph output must be produced by a node of its own.
            identity = ir.Node("", "Identity", [value], name=f"{spec.arg.name}_identity")
            graph.append(identity)
            out = identity.outputs[0]
            out.name = f"{spec.arg.name}_output_{len(graph.outputs)}"
            out.dtype, out.shape = value.dtype, value.shape
            value = out
        seen.add(id(value))
        graph.outputs.append(value)


def _rename_dims(model: ir.Model, names: Mapping[str, str]) -> None:
    """Replace torch's symbols in symbolic dims, also inside expressions (``s17*2``)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    values = [*model.graph.inputs, *model.graph.outputs]
    values += [v for node in ir.traversal.RecursiveGraphIterator(model.graph) for v in node.outputs]
    for value in values:
        if value.shape is None:
            continue
        dims = [
            pattern.sub(lambda m: names[m.group(1)], d.value)
            if isinstance(d, ir.SymbolicDim) and isinstance(d.value, str)
            else d
            for d in value.shape
        ]
        value.shape = ir.Shape(dims)


def _add_opset_imports(model: ir.Model, opset_version: int) -> None:
    imports = model.opset_imports
    imports[""] = opset_version
    for function in model.functions.values():
        for domain, version in function.opset_imports.items():
            imports.setdefault(domain, version)
        imports.setdefault(function.domain, 1)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        imports.setdefault(node.domain, node.version or 1)


def run(
    ctx: DiagnosticContext,
    ep: torch.export.ExportedProgram,
    registry: OnnxRegistry,
    decompose: Decompose | None = None,
    dim_names: Mapping[str, str] | None = None,
    target_opset: int | None = None,
) -> TranslationResult:
    """Translate a decomposed ExportedProgram into an ONNX model, reporting every problem.

    ``decompose`` enables the fallback: a node whose operator has no working ONNX function
    but a torch decomposition is captured alone, decomposed, and its subgraph translated.
    ``dim_names`` renames torch's dimension symbols (``s17``) in every ONNX shape.
    ``target_opset`` is the opset serialization converts to; dispatch may prefer functions
    written for it (their nodes carry their own opset version through the conversion).
    """
    graph = ir.Graph([], [], nodes=[], name="main_graph")
    model = ir.Model(
        graph, ir_version=10, producer_name="dynamo-onnx", producer_version=package_version()
    )
    translator = _GraphTranslator(
        ctx, registry, model, graph, decompose, ep.graph_module, target_opset
    )
    translator.translate(ep.graph)
    operators = {op: (count, fn) for op, (count, fn) in translator.operators.items()}
    translated = sum(1 for _, fn in operators.values() if fn is not None)
    ctx.summary["operators"] = [
        {"op": op, "count": count, "function": fn} for op, (count, fn) in sorted(operators.items())
    ]
    if operators:
        ctx.record("operator-coverage", translated=translated, total=len(operators))
    if translator.failed:
        _raise_for_failures(ctx, operators)
    _bind_signature(ep, translator, graph)
    ir.passes.common.RemoveUnusedNodesPass()(model)  # e.g. constants a function did not use
    if dim_names:
        _rename_dims(model, dim_names)
    _add_opset_imports(model, registry.opset_version)
    ir.passes.common.NameFixPass()(model)
    return TranslationResult(model, operators)


def _raise_for_failures(ctx: DiagnosticContext, operators: dict[str, tuple[int, str | None]]) -> None:
    problems = [
        f
        for f in ctx.findings
        if f.rule.id in ("DO301", "DO303", "DO308") and f.level >= Level.ERROR
    ]
    unsupported = [f for f in problems if f.rule.id == "DO301"]
    lines = [f"  - {f.properties['op']} at {f.properties['source']}" for f in problems]
    translated = sum(1 for _, fn in operators.values() if fn is not None)
    coverage = f"{translated} of {len(operators)} distinct operators translated"
    if unsupported:
        rule = get_rule("unsupported-operator")
        distinct = sorted({f.properties["op"] for f in unsupported})
        cause = (
            f"{len(distinct)} operator(s) have no ONNX function ({coverage}):\n" + "\n".join(lines)
        )
        error: Exception = UnsupportedOperatorError(
            format_message(
                rule.id,
                rule.name,
                cause,
                "register an ONNX function for each with OnnxRegistry.register_op(fn, "
                "namespace, op_name) and pass the registry to export(..., registry=...); "
                "see the rule's help for an example.",
            ),
            rule_id=rule.id,
            diagnostics=ctx,
        )
    elif any(f.rule.id == "DO308" for f in problems):
        rule = get_rule("control-flow-unsupported")
        error = TranslationError(
            format_message(
                rule.id,
                rule.name,
                f"{len(problems)} node(s) cannot be exported ({coverage}):\n"
                + "\n".join(f"  - {f.message}" for f in problems),
                "express the control flow with torch.cond, torch.while_loop or scan, or move "
                "it out of the exported model; see the rule's help.",
            ),
            rule_id=rule.id,
            diagnostics=ctx,
        )
    else:
        rule = get_rule("operator-translation-failed")
        error = TranslationError(
            format_message(
                rule.id,
                rule.name,
                f"{len(problems)} node(s) failed to translate ({coverage}):\n" + "\n".join(lines)
                + "\n" + "\n".join(f"    {f.message}" for f in problems),
                "register an ONNX function that handles these arguments with "
                "OnnxRegistry.register_op, or change the call in the model.",
            ),
            rule_id=rule.id,
            diagnostics=ctx,
        )
    mark_recorded(error)
    raise error
