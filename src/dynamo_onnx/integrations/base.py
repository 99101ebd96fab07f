"""The protocol a model family implements to plug into the exporter.

The generic pipeline knows tensors, specs and passes. What one library's models bring on
top (transformers' KV caches and their runtime names, its output classes, the files
onnxruntime-genai reads beside the model...) lives in a family under
``dynamo_onnx/integrations/<family>/``, and the generic code reaches it only through
these two protocols, the way onnxscript's rewriter keeps its rules outside its engine:

- :class:`ModelFamily`: which values it recognizes and how they flatten, their spec forms
  and default dims, the wrapper used while capturing, the I/O names of a program captured
  with its values registered, the output leaves, the files written beside the model, the
  runtime optimizations it wants and the facts it reads from a model.
- :class:`FamilyInputs`: a call's inputs as the export takes them when the family's values
  are among them (each value as its tensors, flat keyword inputs) and back.

Every method answers "not mine" (None, False, an empty result) for a model or value of
another family, so generic code can ask each installed family in turn
(:func:`dynamo_onnx.integrations.families`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import onnx_ir as ir
    import torch

    from dynamo_onnx.diagnostics import DiagnosticContext
    from dynamo_onnx.registry import OnnxRegistry

__all__ = ["FamilyInputs", "ModelFamily", "RuntimeStep"]


@dataclasses.dataclass(frozen=True)
class RuntimeStep:
    """A rewrite a family hands a runtime's optimization (:meth:`ModelFamily.runtime_steps`):
    the runtime runs it at a point of its own sequence of fusions and counts what it did.

    Attributes:
        name: the step's name in the runtime's counts (``sdpa_softcap``).
        run: the rewrite, in place: ``run(model)`` -> the number of rewrites it made.
        before: the runtime's own step it runs right before (``sdpa``); None: after all
            of them, on the fused model.
        changes_outputs: whether what it rewrites changes the model's outputs from the
            export's (a sliding layer's present made its whole cache): the runtime says so
            in a note when it applied.
    """

    name: str
    run: Callable[[ir.Model], int]
    before: str | None = None
    changes_outputs: bool = False


@runtime_checkable
class FamilyInputs(Protocol):
    """A call's inputs as the export takes them when a family's values are among them:
    every tensor by its parameter name, every family value as its tensors (keyword inputs
    with identifier names), other values constants of the export."""

    #: flat keyword of the export -> the ONNX input's name, in input order.
    names: Mapping[str, str]
    #: a parameter that holds a family value -> the prefix of its tensors' ONNX names.
    prefixes: Mapping[str, str]

    def parts(self, bound: Mapping[str, Any]) -> list[tuple[str, int, str, torch.Tensor]]:
        """(parameter, position within it, ONNX input name, tensor) of every tensor the
        export takes from ``bound``, in input order."""
        ...

    def flat(self, bound: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Bound ``forward`` arguments -> the export's keyword inputs."""
        ...

    def key(self, onnx_name: str) -> str:
        """The export's keyword of an ONNX input name."""
        ...

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The caller's inputs (as ``forward`` takes them) -> the export's, ((), flat)."""
        ...

    def model_inputs(self, flat: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The export's inputs -> ``forward``'s keyword arguments, family values rebuilt."""
        ...

    def output_parts(self, output: Any) -> list[tuple[str, Any]]:
        """The model's output as (ONNX output name, value) pairs, family values as their
        tensors."""
        ...

    def forward_signature(self) -> inspect.Signature:
        """The signature of the flat forward: one keyword parameter per flat input."""
        ...

    def for_model(self, model: ir.Model) -> FamilyInputs:
        """These inputs as ``model`` takes them after a runtime's optimization changed a
        family value's contract (a sliding layer's cache made whole); ``self`` when
        nothing changed."""
        ...

    def longer_output(self, name: str) -> int | None:
        """The axis along which the ONNX output ``name`` holds more than the eager one,
        whose values are its last positions (a whole cache against a window); None for
        an output of the same shape."""
        ...


@runtime_checkable
class ModelFamily(Protocol):
    """A library's models as the exporter meets them (see the module docstring)."""

    #: The family's name, as the reports and the docs call it (``transformers``).
    name: str

    # -- inputs --------------------------------------------------------------------------

    def recognizes(self, value: Any) -> bool:
        """Whether ``value`` is one of the family's input or output objects (an object
        torch.export cannot take as it is and that the model may change in place when it
        runs, so verification runs it on a deep copy)."""
        ...

    def takes_structured_inputs(self, model: Any, signature: inspect.Signature) -> bool:
        """Whether ``model`` is exported through :meth:`inputs` even when none of its
        example inputs is the family's (its ``forward`` makes and returns one itself)."""
        ...

    def inputs(self, signature: inspect.Signature, bound: Mapping[str, Any]) -> FamilyInputs:
        """How the inputs ``bound`` to ``forward``'s parameters (``**kwargs`` spread) are
        taken as tensors. Raises ``ValueError`` (what is wrong with them) when a value
        cannot be (the validate pass turns it into ``invalid-arguments``)."""
        ...

    def parameter_aliases(self, given: Mapping[str, Any]) -> Mapping[str, str]:
        """Other names a spec may key a family value's parameter by (a parameter renamed
        between library versions) -> the parameter given in this call."""
        ...

    # -- dynamic shapes ------------------------------------------------------------------

    def value_specs(self, entry: Any, value: Any, parameter: str) -> list[Any]:
        """The spec of every tensor of ``value`` (in :meth:`FamilyInputs.parts` order) from
        the entry the caller wrote for it, in any form the family accepts; raises
        :class:`dynamo_onnx.specs.messages.SpecMismatch` when it fits none."""
        ...

    def spec_example(self, parameter: str) -> str:
        """A spec entry for a value of the family, as Python source for a message."""
        ...

    def flat_spec(self, spec: Any, bound: Mapping[str, Any], inputs: FamilyInputs) -> Any:
        """The caller's spec (by parameter name, already checked; None for the family's
        default dim names) by the export's flat inputs."""
        ...

    def widen_example(
        self, flat: Mapping[str, torch.Tensor], inputs: FamilyInputs, spec: Mapping[str, Any]
    ) -> tuple[dict[str, torch.Tensor], list[tuple[str, int]]]:
        """The flat example with its dynamic sizes of 0 or 1 made 2 consistently across the
        inputs (torch.export makes such sizes constants); the widened (input, dim)."""
        ...

    # -- capture -------------------------------------------------------------------------

    def capturing(
        self, ctx: DiagnosticContext, module: torch.nn.Module, registry: OnnxRegistry | None
    ) -> contextlib.AbstractContextManager[None]:
        """A context in which the model traces the way the export wants it (the family's
        own settings changed on the model and put back afterwards); a null context for a
        model of another family."""
        ...

    # -- names and outputs ---------------------------------------------------------------

    def input_names(self, paths: Sequence[tuple[str, ...]]) -> list[str | None] | None:
        """For a program the caller captured with the family's values registered as pytree
        nodes: the runtime name of each tensor input by its path in the input spec (None:
        keep its name), or None when no input is the family's."""
        ...

    def output_names(self, paths: Sequence[tuple[str, ...]]) -> list[str] | None:
        """The same for the outputs, by their paths in the output spec: every output's
        name, or None when no output is the family's."""
        ...

    def output_leaves(self, value: Any) -> Any | None:
        """A family value the model returns as the plain containers and tensors the ONNX
        model's outputs flatten (an output class as its tuple, a cache as its tensors);
        None when ``value`` is not the family's."""
        ...

    # -- after the export ----------------------------------------------------------------

    def files_beside(
        self, model: ir.Model, reference: Any, inputs: FamilyInputs | None, filename: str
    ) -> Mapping[str, str | bytes]:
        """Files to save beside the model (name -> text, or bytes for a binary file such as
        a tokenizer's model) when it is saved as ``filename``; ``reference`` is the
        caller's model. Empty for a model of another family."""
        ...

    def files_not_beside(
        self, model: ir.Model, reference: Any, inputs: FamilyInputs | None, filename: str
    ) -> Mapping[str, str]:
        """Files :meth:`files_beside` would write for a model of this kind but cannot for
        this one: name -> why not and what would let it (a note at save). Empty for a
        model of another family."""
        ...

    def runtime_steps(self, reference: Any, runtime: str) -> list[RuntimeStep]:
        """The family's rewrites for ``runtime`` (``"onnxruntime"``), each run at its place
        in the runtime's own optimization (its fusions), in order: the patterns of the
        family's models the runtime's rules do not know, and what the family's
        conventions need after it (transformers: Gemma 2's soft-capped attention, a
        sliding layer's cache made whole and named so). ``reference`` is the caller's
        model; empty for a model of another family."""
        ...

    def facts(self, model: Any) -> Mapping[str, Any]:
        """What the family reads from the caller's model (its kind, whether it returns a
        cache, its attention windows...), for the files beside it and the runtime passes;
        empty for a model of another family."""
        ...
