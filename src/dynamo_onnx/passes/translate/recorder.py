"""An onnxscript evaluator that records the ONNX nodes a torch_lib function emits.

torch_lib functions are Python functions of onnxscript ops (``op.Add(x, y)``). Run under
this evaluator, each op call becomes an ``onnx_ir.Node`` appended to ``nodes`` instead of
being computed. Python constants passed where ONNX expects tensors become ``Constant``
nodes whose dtype is bound through the op's type constraints, so ``op.Add(x, 1)`` adds a
constant of ``x``'s dtype.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import onnx
import onnx.defs
import onnx.shape_inference
import onnx_ir as ir
import onnxscript
from onnxscript import opset18

from dynamo_onnx.deferred_imports import defer_onnx_reference

__all__ = ["NodeRecorder", "ConstantCache", "recording"]

ConstantCache = dict[tuple[Any, ir.DataType], ir.Value]

_SCALAR_DTYPES: tuple[tuple[type, ir.DataType], ...] = (
    (bool, ir.DataType.BOOL),  # before int: bool is an int
    (int, ir.DataType.INT64),
    (float, ir.DataType.FLOAT),
    (str, ir.DataType.STRING),
)


#: Python values: checked first, since ``isinstance`` against a ``Protocol`` (``ir.TensorProtocol``)
#: walks the protocol's attributes, a cost paid per constant of every translated node.
_PYTHON_VALUES = (bool, int, float, str, list, tuple)

#: Attribute types built directly from the operator's schema, without onnx_ir's inference.
_ATTRIBUTES: dict[ir.AttributeType, tuple[Any, tuple[type, ...]]] = {
    ir.AttributeType.INT: (lambda name, v: ir.AttrInt64(name, int(v)), (int,)),
    ir.AttributeType.FLOAT: (lambda name, v: ir.AttrFloat32(name, float(v)), (int, float)),
    ir.AttributeType.STRING: (ir.AttrString, (str,)),
    ir.AttributeType.INTS: (lambda name, v: ir.AttrInt64s(name, [int(i) for i in v]), (int,)),
    ir.AttributeType.FLOATS: (
        lambda name, v: ir.AttrFloat32s(name, [float(f) for f in v]),
        (int, float),
    ),
    ir.AttributeType.STRINGS: (lambda name, v: ir.AttrStrings(name, list(v)), (str,)),
}


def _attribute(name: str, param: Any, value: Any) -> ir.Attr:
    """The ONNX attribute ``name`` of the type the schema gives it; onnx_ir infers the type
    (through ``Protocol`` checks, slow per call) only for the other kinds (tensors, graphs)."""
    kind = getattr(param, "type", None)
    make = _ATTRIBUTES.get(kind) if kind is not None else None
    if make is not None:
        build, items = make
        listed = kind in (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS)
        if listed and isinstance(value, (list, tuple)) and all(isinstance(v, items) for v in value):
            return build(name, value)
        if not listed and isinstance(value, items):
            return build(name, value)
    return ir.convenience.convert_attribute(name, value)


def _op_signature(op: Any) -> ir.schemas.OpSignature | None:
    """The ONNX operator's signature, built once per operator and opset (onnxscript builds
    it again for each call: once per node of the operator)."""
    opset = op.opset
    try:
        return _schema_signature(op.name, opset.domain, opset.version)
    except onnx.defs.SchemaError:
        return op.op_signature


@functools.cache
def _schema_signature(name: str, domain: str, version: int) -> ir.schemas.OpSignature:
    return ir.schemas.OpSignature.from_op_schema(onnx.defs.get_schema(name, version, domain))


def _python_dtype(value: Any) -> ir.DataType | None:
    for py_type, dtype in _SCALAR_DTYPES:
        if isinstance(value, py_type):
            return dtype
    return None


def _is_sequence_type(param: ir.schemas.Parameter) -> bool:
    return all(isinstance(t, ir.SequenceType) for t in param.type_constraint.allowed_types)


class NodeRecorder:
    """Records nodes for onnxscript op and function calls (the ``Evaluator`` protocol).

    Args:
        opset_version: the default ONNX opset of recorded nodes.
        constants: a cache of Constant values shared by every node of one graph, so a
            constant used by many nodes is emitted once. It is only read here: the constants
            this recorder creates are in ``new_constants`` until :meth:`commit`, because a
            failed translation's nodes never reach the graph.
    """

    def __init__(
        self, opset_version: int, constants: ConstantCache, target_opset: int | None = None
    ) -> None:
        self.opset_version = opset_version
        #: The opset the model is converted to after translation: a function body is
        #: checked at it (``ReduceMax`` on bool is valid from 20).
        self.target_opset = max(target_opset or opset_version, opset_version)
        self.constants = constants
        self.new_constants: ConstantCache = {}
        self.nodes: list[ir.Node] = []
        #: onnxscript functions called as ONNX functions (not traced), by identifier.
        self.functions: dict[ir.OperatorIdentifier, onnxscript.OnnxFunction] = {}

    # -- the Evaluator protocol ------------------------------------------------------------

    def eval_op(self, op: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        signature = _op_signature(op)
        if signature is None:
            raise ValueError(f"ONNX op {op.name!r} of opset {op.opset} has no schema")
        inputs, attrs = _bind(signature, args, kwargs)
        try:
            _check_input_types(signature, inputs)
        except InputTypeError:
            if self.target_opset == signature.since_version or not _takes_at(
                signature, self.target_opset, args, kwargs
            ):
                raise
        return self._emit(signature, inputs, attrs, version=signature.since_version)

    def eval_function(self, function: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        signature = function.op_signature
        if signature is None:
            raise ValueError(f"onnxscript function {function.name!r} has no signature")
        domain = function.domain  # the opset's: no need to build the IR for it
        inputs, attrs = _bind(signature, args, kwargs)
        _check_function_types(function, self.target_opset, inputs)
        self.functions[(domain, function.name, "")] = function
        # The signature comes from annotations, which may omit the return; the body knows.
        outputs = len(function.graph().outputs)
        return self._emit(signature, inputs, attrs, version=None, num_outputs=outputs)

    # -- building nodes --------------------------------------------------------------------

    def _emit(
        self,
        signature: ir.schemas.OpSignature,
        inputs: Mapping[str, Any],
        attrs: Mapping[str, Any],
        *,
        version: int | None,
        num_outputs: int | None = None,
    ) -> Any:
        """One node for an operator or function call, its arguments bound (``_bind``)."""
        bindings = _type_bindings(signature, inputs)
        flat_inputs: list[ir.Value | None] = []
        for name, arg in inputs.items():
            param = signature.params_map[name]
            assert isinstance(param, ir.schemas.Parameter)
            converted = self._to_values(param, arg, bindings)
            if isinstance(converted, list):
                flat_inputs.extend(converted)
            else:
                flat_inputs.append(converted)
        while flat_inputs and flat_inputs[-1] is None:
            flat_inputs.pop()
        attributes = [
            _attribute(name, signature.params_map[name], value)
            for name, value in attrs.items()
            if value is not None
        ]
        node = ir.Node(
            signature.domain,
            signature.name,
            flat_inputs,
            attributes=attributes,
            num_outputs=num_outputs if num_outputs is not None else _num_outputs(signature, attrs),
            version=version,
        )
        self.nodes.append(node)
        if len(node.outputs) == 1:
            return node.outputs[0]
        return tuple(node.outputs)

    def _constant(self, value: Any, dtype: ir.DataType) -> ir.Value:
        """A Constant node for a Python value, shared through the cache."""
        key_value = tuple(value) if isinstance(value, list) else value
        key = (key_value, dtype)
        try:
            cached = self.new_constants.get(key) or self.constants.get(key)
        except TypeError:  # unhashable
            cached, key = None, None
        if cached is not None:
            return cached
        tensor = (
            ir.tensor(value, dtype=dtype)
            if isinstance(value, _PYTHON_VALUES) or not isinstance(value, ir.TensorProtocol)
            else value
        )
        node = ir.Node(
            "",
            "Constant",
            [],
            attributes=[ir.AttrTensor("value", tensor)],
            version=self.opset_version,
        )
        self.nodes.append(node)
        output = node.outputs[0]
        output.dtype = tensor.dtype
        output.shape = ir.Shape(tensor.shape)
        if key is not None:
            self.new_constants[key] = output
        return output

    def commit(self) -> None:
        """Share this recorder's constants with later nodes (its nodes are in the graph)."""
        self.constants.update(self.new_constants)

    def _to_values(
        self,
        param: ir.schemas.Parameter,
        arg: Any,
        bindings: Mapping[str, ir.TypeProtocol],
    ) -> ir.Value | None | list[ir.Value | None]:
        """Turn one argument into the ONNX input value(s) of ``param``."""
        if arg is None or isinstance(arg, ir.Value):
            return arg
        if isinstance(arg, (list, tuple)):
            items = list(arg)
            if param.variadic:
                dtype = _dtype_for(param, items, bindings)
                return [v if isinstance(v, ir.Value) else self._constant(v, dtype) for v in items]
            if _is_sequence_type(param):
                return self._sequence(items, param, bindings)
            if any(isinstance(v, ir.Value) for v in items):
                return self._concat(items, _dtype_for(param, items, bindings))
            return self._constant(items, _dtype_for(param, items, bindings))
        if isinstance(arg, complex):
            return self._constant([arg.real, arg.imag], _dtype_for(param, 0.0, bindings))
        return self._constant(arg, _dtype_for(param, arg, bindings))

    def _sequence(
        self, items: list[Any], param: ir.schemas.Parameter, bindings: Mapping[str, ir.TypeProtocol]
    ) -> ir.Value:
        dtype = _dtype_for(param, items, bindings)
        values = [v if isinstance(v, ir.Value) else self._constant(v, dtype) for v in items]
        node = ir.Node("", "SequenceConstruct", values, version=self.opset_version)
        self.nodes.append(node)
        return node.outputs[0]

    def _concat(self, items: list[Any], dtype: ir.DataType) -> ir.Value:
        """``[value, 3]`` for an INT64 input: Concat of 1-D pieces (a shape built of parts)."""
        shape_1d = self._constant([-1], ir.DataType.INT64)
        pieces = []
        for item in items:
            if isinstance(item, ir.Value):
                node = ir.Node("", "Reshape", [item, shape_1d], version=self.opset_version)
                self.nodes.append(node)
                pieces.append(node.outputs[0])
            elif item is not None:
                pieces.append(self._constant([item], dtype))
        node = ir.Node(
            "", "Concat", pieces, attributes=[ir.AttrInt64("axis", 0)], version=self.opset_version
        )
        self.nodes.append(node)
        return node.outputs[0]


def _bind(
    signature: ir.schemas.OpSignature, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Match positional and keyword arguments to the signature's inputs and attributes."""
    inputs: dict[str, Any] = {}
    attrs: dict[str, Any] = {}
    remaining = list(args)
    for param in signature.params:
        if isinstance(param, ir.schemas.Parameter):
            if remaining:
                if param.variadic:
                    inputs[param.name] = list(remaining)
                    remaining.clear()
                else:
                    inputs[param.name] = remaining.pop(0)
            elif param.name in kwargs:
                inputs[param.name] = kwargs[param.name]
            elif param.required and not param.has_default():
                raise TypeError(
                    f"Required input {param.name!r} of {signature.domain}::{signature.name} "
                    "was not provided"
                )
            else:
                inputs[param.name] = param.default if param.has_default() else None
        else:
            if remaining:
                value = remaining.pop(0)
            elif param.name in kwargs:
                value = kwargs[param.name]
            else:
                value = None
            if value is None:
                if param.required:
                    raise TypeError(
                        f"Required attribute {param.name!r} of "
                        f"{signature.domain}::{signature.name} was not provided"
                    )
                continue
            if isinstance(value, ir.Attr):
                value = value.value
            if param.type == ir.AttributeType.FLOAT and isinstance(value, int):
                value = float(value)
            attrs[param.name] = value
    return inputs, attrs


class InputTypeError(TypeError):
    """An ONNX operator called with an input type its schema does not allow (``Einsum`` on
    bool): the model would not load, so the translation fails here and the node can
    decompose instead."""


def _takes_at(
    signature: ir.schemas.OpSignature, opset: int, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> bool:
    """Whether the operator's schema at ``opset`` (the model is converted there after
    translation) takes the input types that its signature at torch_lib's opset does not."""
    try:
        newer = _schema_signature(signature.name, signature.domain, opset)
        _check_input_types(newer, _bind(newer, args, kwargs)[0])
    except (InputTypeError, onnx.defs.SchemaError):
        return False
    return True


def _check_input_types(signature: ir.schemas.OpSignature, inputs: Mapping[str, Any]) -> None:
    """Raise InputTypeError if a typed input value (``inputs``: bound by ``_bind``) is
    outside its parameter's constraint."""
    for name, arg in inputs.items():
        param = signature.params_map[name]
        for value in arg if isinstance(arg, (list, tuple)) else [arg]:
            if not isinstance(value, ir.Value) or value.type is None:
                continue
            if value.type not in param.type_constraint.allowed_types:  # type: ignore[union-attr]
                raise InputTypeError(
                    f"ONNX `{signature.name}` (opset {signature.since_version}) does not take "
                    f"{value.type} for its input `{name}`"
                )


@functools.cache
def _function_proto(function: Any, opset: int) -> onnx.FunctionProto:
    """An onnxscript function's proto at the export's opset (its body runs at the model's
    opset: ``ReduceMax`` takes bool from opset 20, though torch_lib writes it at 18).
    Built once per function, opset and process."""
    proto = function.to_function_proto()
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = max(entry.version, opset)
    return proto


def _check_function_types(function: Any, opset: int, inputs: Mapping[str, Any]) -> None:
    """Raise InputTypeError if ONNX type inference rejects the function's body for the
    input types it is called with (torch_lib's ``mH`` is an ``Einsum``, which has no bool).

    Only when every input's type is known, and only for a type the body refuses: any
    other complaint of the inference (attributes it cannot see) is not a type error.
    """
    types = []
    for value in inputs.values():
        if not isinstance(value, ir.Value) or not isinstance(value.type, ir.TensorType):
            return
        types.append(onnx.helper.make_tensor_type_proto(value.dtype.value, None))
    try:
        onnx.shape_inference.infer_function_output_types(
            _function_proto(function, opset), types, []
        )
    except onnx.shape_inference.InferenceError as exc:
        if "has unsupported type" in str(exc):
            raise InputTypeError(f"`{function.name}`: {exc}") from None
    except Exception:  # the inference could not tell; no finding
        pass


def _type_bindings(
    signature: ir.schemas.OpSignature, inputs: Mapping[str, Any]
) -> dict[str, ir.TypeProtocol]:
    """Type-constraint name -> type, from the inputs that are values with a known type."""
    bindings: dict[str, ir.TypeProtocol] = {}
    for name, arg in inputs.items():
        param = signature.params_map[name]
        values = arg if isinstance(arg, (list, tuple)) else [arg]
        for value in values:
            if isinstance(value, ir.Value) and value.type is not None:
                bindings.setdefault(param.type_constraint.name, value.type)  # type: ignore[union-attr]
                break
    return bindings


def _dtype_for(
    param: ir.schemas.Parameter, arg: Any, bindings: Mapping[str, ir.TypeProtocol]
) -> ir.DataType:
    """The dtype a Python constant takes for ``param``."""
    bound = bindings.get(param.type_constraint.name)
    if bound is not None:
        return bound.dtype
    allowed = param.type_constraint.allowed_types
    if len(allowed) == 1:
        return next(iter(allowed)).dtype
    items = arg if isinstance(arg, (list, tuple)) else [arg]
    for item in items:
        if isinstance(item, ir.Value) and item.dtype is not None:
            return item.dtype
    if not items:
        return ir.DataType.INT64  # an empty list is almost always a shape
    if not isinstance(arg, _PYTHON_VALUES) and isinstance(arg, ir.TensorProtocol):
        return arg.dtype
    found = [_python_dtype(item) for item in items if item is not None]
    if ir.DataType.FLOAT in found:
        return ir.DataType.FLOAT
    if found:
        return found[0]  # type: ignore[return-value]
    raise TypeError(f"Cannot determine the dtype of {arg!r} for input {param.name!r}")


def _num_outputs(signature: ir.schemas.OpSignature, attrs: Mapping[str, Any]) -> int:
    """Outputs of a node; a few ONNX ops have a variable count decided by attributes."""
    if signature.domain == "":
        if signature.name == "Split" and isinstance(attrs.get("num_outputs"), int):
            return attrs["num_outputs"]
        if signature.name == "BatchNormalization" and not attrs.get("training_mode", 0):
            return 1
    return len(signature.outputs)


class _ArithmeticHandler:
    """Lets torch_lib write ``x + 1`` on values: onnx_ir routes Value arithmetic here."""

    def Add(self, lhs: Any, rhs: Any) -> Any:  # onnx_ir's protocol names
        return opset18.Add(lhs, rhs)

    def Sub(self, lhs: Any, rhs: Any) -> Any:
        return opset18.Sub(lhs, rhs)

    def Mul(self, lhs: Any, rhs: Any) -> Any:
        return opset18.Mul(lhs, rhs)

    def Div(self, lhs: Any, rhs: Any) -> Any:
        return opset18.Div(lhs, rhs)

    def Neg(self, operand: Any) -> Any:
        return opset18.Neg(operand)


@functools.cache
def _evaluator() -> Any:
    """onnxscript's evaluator module, imported once: it imports ONNX's reference evaluator
    for its eager mode, which recording never uses, so that is made a stand-in first (it
    is loaded if something reads it: deferred_imports.py)."""
    defer_onnx_reference()
    import onnxscript.evaluator

    return onnxscript.evaluator


@contextlib.contextmanager
def recording(recorder: NodeRecorder) -> Iterator[NodeRecorder]:
    """Route onnxscript op calls and Value arithmetic to ``recorder`` for the duration."""
    previous = ir.set_value_magic_handler(_ArithmeticHandler())
    try:
        with _evaluator().default_as(recorder):
            yield recorder
    finally:
        ir.set_value_magic_handler(previous)
