"""OnnxRegistry: which ONNX function translates which PyTorch operator.

The default functions come from onnxscript's torch_lib through its versioned framework API
(the one torch itself calls). Importing torch_lib takes seconds, so the table built from it
is cached once per process; every ``OnnxRegistry()`` starts from a copy of it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
from collections.abc import Callable, Mapping
from typing import Any

import onnx_ir as ir
import onnxscript
from onnxscript import values as onnxscript_values

from dynamo_onnx.defaults import TORCHLIB_OPSET
from dynamo_onnx.registry.extra_functions import DeferredFunction

__all__ = ["OnnxRegistry", "ONNXFunction", "qualified_name", "target_name"]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class ONNXFunction:
    """An ONNX function registered for one operator, with what dispatch needs to choose it.

    Attributes:
        qualified_name: ``namespace::op_name`` or ``namespace::op_name.overload``.
        function: the onnxscript function (``OnnxFunction`` or ``TracedOnnxFunction``).
        is_complex: whether it handles complex-valued inputs.
        is_custom: whether the user registered it (custom functions are preferred).
        opset_introduced: the lowest ONNX opset its operators exist in; dispatch only
            offers it to exports targeting that opset or a newer one.
        is_extra: one of dynamo-onnx's own functions (``extra_functions``); at the same
            opset they come before torch_lib's, which they complete or correct.
    """

    qualified_name: str
    function: Any
    is_complex: bool = False
    is_custom: bool = False
    opset_introduced: int = TORCHLIB_OPSET
    is_extra: bool = False

    def loaded(self) -> ONNXFunction:
        """This entry with its function imported and typed, when the registry listed it by
        name (``extra_functions.DeferredFunction``); itself otherwise."""
        if isinstance(self.function, DeferredFunction):
            return dataclasses.replace(self, function=self.function.load())
        return self

    @property
    def name(self) -> str:
        """The function's name, e.g. ``aten_add``."""
        return str(getattr(self.function, "name", None) or getattr(self.function, "__name__", "?"))

    @property
    def signature(self) -> ir.schemas.OpSignature | None:
        """The function's ONNX signature, from its type annotations."""
        return getattr(self.function, "op_signature", None)


def qualified_name(namespace: str, op_name: str, overload: str | None = None) -> str:
    """``aten``, ``add``, ``Tensor`` -> ``aten::add.Tensor``; the default overload has no suffix."""
    if overload in (None, "", "default"):
        return f"{namespace}::{op_name}"
    return f"{namespace}::{op_name}.{overload}"


def _normalize(name: str) -> str:
    return name[: -len(".default")] if name.endswith(".default") else name


def target_name(target: Any) -> str:
    """The registry key of an FX node target (an OpOverload, a HOP, or a Python builtin)."""
    name_fn = getattr(target, "name", None)
    if callable(name_fn) and hasattr(target, "_schema"):
        return _normalize(name_fn())  # torch OpOverload: "aten::add.Tensor"
    if isinstance(target, (types.BuiltinFunctionType, types.FunctionType)):
        module = getattr(target, "__module__", None) or "builtins"
        if module in ("_operator", "operator"):
            module = "_operator"
        return f"{module}::{target.__name__}"
    if callable(name_fn):  # HigherOrderOperator
        return f"higher_order::{name_fn()}"
    return f"{type(target).__module__}::{getattr(target, '__name__', repr(target))}"


@functools.cache
def _torchlib_table() -> Mapping[str, tuple[ONNXFunction, ...]]:
    """torch_lib's functions grouped by operator; built once per process (it takes seconds)."""
    from dynamo_onnx.registry.extra_functions import COPY_OF_VIEW, EXTRA_FUNCTIONS
    from dynamo_onnx.registry.torchlib import torchlib_ops

    table: dict[str, list[ONNXFunction]] = {}
    for meta in torchlib_ops():
        name = _normalize(meta.qualified_name)
        table.setdefault(name, []).append(
            ONNXFunction(name, meta.function, is_complex=meta.is_complex)
        )
    for name, function, opset in EXTRA_FUNCTIONS:
        extra = ONNXFunction(name, function, opset_introduced=opset, is_extra=True)
        table.setdefault(name, []).insert(0, extra)
    for copy, view in COPY_OF_VIEW.items():
        if copy not in table and view in table:
            table[copy] = [dataclasses.replace(f, qualified_name=copy) for f in table[view]]
    return types.MappingProxyType({k: tuple(v) for k, v in table.items()})


def _as_onnx_function(function: Callable[..., Any], namespace: str) -> Any:
    """Accept onnxscript functions as they are; trace plain Python functions."""
    if isinstance(function, (onnxscript.OnnxFunction, onnxscript.TracedOnnxFunction)):
        return function
    if callable(function):
        return onnxscript.TracedOnnxFunction(onnxscript_values.Opset(namespace, 1), function)
    raise TypeError(
        f"register_op needs an onnxscript function (decorate it with @onnxscript.script()), "
        f"got {type(function).__name__}"
    )


class OnnxRegistry:
    """Registry for ONNX functions.

    The registry maps qualified operator names (``aten::add.Tensor``) to ONNX functions,
    under a fixed opset version. Custom functions are registered with :meth:`register_op`
    and are preferred by dispatch over the built-in ones.
    """

    def __init__(self) -> None:
        self._opset_version = TORCHLIB_OPSET
        self._functions: dict[str, list[ONNXFunction]] = {
            name: list(entries) for name, entries in _torchlib_table().items()
        }

    @property
    def opset_version(self) -> int:
        """The ONNX opset version the exporter targets. Defaults to 18, torch_lib's opset."""
        return self._opset_version

    def register_op(
        self,
        function: Any,
        namespace: str,
        op_name: str,
        overload: str | None = None,
        is_complex: bool = False,
    ) -> None:
        """Register a custom operator: ``torch.ops.<namespace>.<op_name>.<overload>``.

        Args:
            function: the onnxscript function (or a plain function of onnxscript ops,
                which is traced).
            namespace: the operator's namespace, e.g. ``"mylib"``.
            op_name: the operator's name, e.g. ``"gelu"``.
            overload: the overload name; ``None`` for the default overload.
            is_complex: whether the function handles complex-valued inputs.

        Raises:
            ValueError: if the name is not of the form ``namespace::op``.
        """
        for part, label in ((namespace, "namespace"), (op_name, "op_name")):
            if not isinstance(part, str) or not _NAME_RE.match(part):
                raise ValueError(
                    f"The operator name must be of the form 'namespace::op' with identifiers "
                    f"for both; got {label}={part!r} "
                    f"(in {namespace!r}::{op_name!r}). Example: register_op(fn, 'mylib', 'gelu')."
                )
        if overload is not None and not (isinstance(overload, str) and _NAME_RE.match(overload)):
            raise ValueError(f"The overload must be an identifier or None, got {overload!r}")
        name = qualified_name(namespace, op_name, overload)
        entry = ONNXFunction(
            name, _as_onnx_function(function, namespace), is_complex=is_complex, is_custom=True
        )
        self._functions.setdefault(name, []).append(entry)

    def get_op_functions(
        self, namespace: str, op_name: str, overload: str | None = None
    ) -> list[ONNXFunction] | None:
        """The ONNX functions of ``torch.ops.<namespace>.<op_name>.<overload>``.

        Ordered by registration time: built-in functions first, custom ones after them.
        ``None`` if the operator is not registered.
        """
        entries = self._loaded(qualified_name(namespace, op_name, overload))
        return list(entries) if entries else None

    def is_registered_op(self, namespace: str, op_name: str, overload: str | None = None) -> bool:
        """Whether ``torch.ops.<namespace>.<op_name>.<overload>`` has an ONNX function."""
        return bool(self._functions.get(qualified_name(namespace, op_name, overload)))

    def copy(self) -> OnnxRegistry:
        """A registry with the same functions; registering into it leaves this one as is."""
        other = OnnxRegistry.__new__(OnnxRegistry)
        other._opset_version = self._opset_version
        other._functions = {name: list(entries) for name, entries in self._functions.items()}
        return other

    # -- used by the passes ------------------------------------------------------------

    def functions_for(self, name: str, opset: int | None = None) -> list[ONNXFunction]:
        """Candidates for an operator by registry key, preferred first.

        Functions written for an opset newer than the registry's are candidates only when
        the export targets ``opset`` or newer; the others always are (an export to an older
        opset is translated at the registry's and converted down). Custom functions come
        first, then those for the newest opset (one ``Gelu`` at opset 20 rather than
        torch_lib's five opset-18 nodes).
        """
        self._loaded(name)
        return self._candidates(name, opset)

    def _candidates(self, name: str, opset: int | None) -> list[ONNXFunction]:
        """:meth:`functions_for` without loading the functions listed by name."""
        limit = max(self.opset_version, opset or 0)
        entries = [e for e in self._functions.get(name, []) if e.opset_introduced <= limit]
        return sorted(entries, key=lambda e: (not e.is_custom, -e.opset_introduced))

    def _loaded(self, name: str) -> list[ONNXFunction]:
        """The operator's entries, each loaded (:meth:`ONNXFunction.loaded`); kept loaded
        in this registry."""
        entries = self._functions.get(name)
        if not entries:
            return []
        if any(isinstance(e.function, DeferredFunction) for e in entries):
            entries[:] = [e.loaded() for e in entries]
        return entries

    def decomposition_table(self, also: Any = (), opset: int | None = None) -> Any:
        """torch.export's default decompositions, and torch's of the ONNX operators of
        ``torch.onnx.ops`` (``Attention`` and ``RotaryEmbedding`` of opset 23), minus the
        operators this registry translates at ``opset``, plus the operators in ``also``
        (decomposed even though registered)."""
        import torch

        table = torch.export.default_decompositions()
        table.update(torch.onnx.ops.aten_decompositions())
        forced = set(also)
        for op in list(table.keys()):
            if op not in forced and self.supports(op, opset):
                table.pop(op)
        return table

    def supports(self, target: Any, opset: int | None = None) -> bool:
        """Whether an FX node target has at least one ONNX function (one that exists at
        ``opset``, when given: ``Attention`` has one from opset 23)."""
        if opset is None:
            return target_name(target) in self._functions
        return bool(self._candidates(target_name(target), opset))

    def __repr__(self) -> str:
        custom = sum(e.is_custom for v in self._functions.values() for e in v)
        return (
            f"OnnxRegistry(opset_version={self.opset_version}, "
            f"operators={len(self._functions)}, custom_functions={custom})"
        )
