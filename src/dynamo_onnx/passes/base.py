"""The shape every pass has, the state an export carries between passes, and the pipeline.

A pass is a small object with a constant ``name`` (the pass name in the reports), the
``error_type`` an unexplained failure becomes, ``changes_input`` (whether it rewrites what
it was given in place), and ``__call__(ctx, state) -> state``. Like
onnx_ir's ``PassBase``, a pass gets what the previous one returned and returns what the next
one needs; the findings are the record of what happened, never the way passes steer each
other. :func:`run_pipeline` is the only place that opens ``ctx.pass_``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from dynamo_onnx.defaults import TORCHLIB_OPSET
from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.diagnostics.context import PassRecord
from dynamo_onnx.errors import OnnxExporterError
from dynamo_onnx.passes import contract
from dynamo_onnx.passes.collector import collections_spaced
from dynamo_onnx.passes.logs import deprecations_ignored
from dynamo_onnx.rules import catalog
from dynamo_onnx.specs import ShapeRequest

if TYPE_CHECKING:
    import onnx_ir as ir
    import torch

    from dynamo_onnx.integrations import FamilyInputs
    from dynamo_onnx.registry import OnnxRegistry

__all__ = [
    "CaptureRecord",
    "CheckedRequest",
    "ExportRequest",
    "ExportState",
    "Pass",
    "PassName",
    "ShapeLogRecord",
    "run_pipeline",
]


class PassName:
    """The name of every pass, as the reports and the rule catalog spell it."""

    VALIDATE = "validate"
    CAPTURE = "capture"
    DYNAMIC_SHAPES = "dynamic-shapes"
    DECOMPOSITION = "decomposition"
    SEMANTICS = "semantics"
    TRANSLATION = "translation"
    FINALIZE = "finalize"
    OPSET_CONVERSION = "opset-conversion"
    MODULE_FUNCTIONS = "module-functions"
    WEIGHT_CHECK = "weight-check"
    LOAD_CHECK = "load-check"
    OPTIMIZATION = "optimization"
    QUANTIZATION = "quantization"
    APPLY_WEIGHTS = "apply-weights"
    SESSION = "session"
    VERIFICATION = "verification"
    SAVE = "save"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        """Every pass name, in pipeline order."""
        return tuple(v for k, v in vars(cls).items() if k.isupper())


@dataclasses.dataclass(frozen=True)
class ShapeLogRecord:
    """One record of torch's symbolic-shape log during capture, with the Python stack at the
    time it was logged (innermost first): torch names only its own frame for a guard, the
    stack still holds the user's line that caused it."""

    message: str
    stack: tuple[Location, ...] = ()


@dataclasses.dataclass(frozen=True)
class ExportRequest:
    """What the caller asked for, as given: the validate pass checks it."""

    model: Any
    args: Any = ()
    kwargs: Any = None
    dynamic_shapes: Any = None
    opset_version: Any = None
    registry: OnnxRegistry | None = None
    diagnostic_options: Any = None
    export_options: Any = None
    #: as given: validation merges torch.onnx.export's ``export_modules_as_functions``
    module_functions: bool = False
    #: torch.onnx.export's arguments (a ``TorchOnnxArguments``), when called that way.
    torch_onnx: Any = None
    input_names: Any = None
    output_names: Any = None
    dynamic_axes: Any = None
    custom_translation_table: Any = None
    custom_opsets: Any = None


@dataclasses.dataclass(frozen=True)
class CheckedRequest:
    """The request as the validate pass checked it: what every later pass reads.

    Attributes:
        model: the caller's model (a module, a callable, or an ``ExportedProgram``); never
            changed.
        args, kwargs: the example inputs, checked (a tuple and a dict).
        bound: ``forward`` parameter -> its example input, bound once (empty for an
            ``ExportedProgram`` or a callable without a signature).
        opset: the ONNX opset of the result, the default applied (by validation:
            :func:`~dynamo_onnx.options.default_opset`; a request built by hand keeps
            translation's, which converts nothing).
        input_names, output_names: the caller's names of the graph's inputs and outputs.
        model_location: where the model's code starts (its ``forward``), the anchor of
            findings that have no line of their own.
        registry: the ONNX functions to translate with.
        shapes: the dynamic-shape request in one normal form, whichever spelling asked
            (:class:`~dynamo_onnx.specs.ShapeRequest`: torch.export's spec, the caller's
            dimension names, the dimensions requested and declared).
        input_labels: ``forward`` parameter -> the name the caller gave that input
            (``input_names``), for messages.
        module_functions: group submodule calls into ONNX local functions.
        custom_opsets: opset versions of custom domains.
        family_inputs: with a model family's values among the inputs (a KV cache), how
            its family takes them as tensors (``bound`` then holds the flat inputs).
        verbose: the caller asked to see what the libraries print (``verbose=True``).
    """

    model: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    bound: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    opset: int = TORCHLIB_OPSET
    input_names: tuple[str, ...] | None = None
    output_names: tuple[str, ...] | None = None
    model_location: Location | None = None
    registry: OnnxRegistry | None = None
    shapes: ShapeRequest = ShapeRequest()
    input_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    module_functions: bool = False
    custom_opsets: Mapping[str, int] = dataclasses.field(default_factory=dict)
    family_inputs: FamilyInputs | None = None
    verbose: bool = False

    def capture_inputs(self) -> tuple[tuple[Any, ...], Mapping[str, Any]]:
        """What capture passes torch.export: the inputs, or with a family's values the
        flat ones."""
        if self.family_inputs is not None:
            return (), self.bound
        return self.args, self.kwargs

    def label(self, input_name: str) -> str:
        """The caller's name of an input (``input_names``), else the parameter's name."""
        return self.input_labels.get(input_name, input_name)


@dataclasses.dataclass(frozen=True)
class CaptureRecord:
    """What the capture pass did, beside the program it returns: the checked request stays
    as validation left it.

    Attributes:
        strategy: the strategy that captured the program (``torch.export.export(strict=False)``),
            or ``the given ExportedProgram``.
        shapes: the shape request the program was captured with: the checked one, torch's
            refinement of it (its suggested fixes, tried once: DO125), or it with the
            dimensions a model fixes made static (a capture deferring size guards).
    """

    strategy: str
    shapes: ShapeRequest = ShapeRequest()
    shape_log: tuple[ShapeLogRecord, ...] = ()


@dataclasses.dataclass(frozen=True)
class ExportState:
    """What the export knows after each pass; each pass returns a new one.

    Attributes:
        request: the caller's arguments, as given: only the validate pass reads them.
        checked: the request as validation checked it, for every later pass (None only
            before the validate pass has run: a pass after it reads ``state.checked``).
        capture: what the capture pass did (its strategy, the request it captured with,
            torch's symbolic-shape log), for the passes after it (None only before the
            capture pass has run: a pass after it reads ``state.capture``).
        exported_program: the captured, then decomposed, program (never the caller's object).
        captured_program: the program as captured, kept by decomposition: the user's
            in-place operators as written (the semantics pass's lines for what the
            decomposed program's signature says is written). Decomposition's in-place
            rewrites (aliases, lifted copies, casts) are in it; when the program is not
            re-traced, it is the same object as ``exported_program``.
        dim_names: torch's dimension symbols (``s17``) -> names in the ONNX model.
        onnx_model: the ONNX model, from translation on.
    """

    request: ExportRequest
    checked: CheckedRequest | None = None
    capture: CaptureRecord | None = None
    exported_program: torch.export.ExportedProgram | None = None
    captured_program: torch.export.ExportedProgram | None = None
    dim_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    onnx_model: ir.Model | None = None

    def replace(self, **changes: Any) -> ExportState:
        """A copy with ``changes``: passes never change the state they were given."""
        return dataclasses.replace(self, **changes)


S = TypeVar("S")


class Pass(Protocol[S]):
    """One step of an export, or of the work after it (optimize, verify, save)."""

    name: ClassVar[str]
    error_type: ClassVar[type[OnnxExporterError]]
    #: Whether the pass changes the object it was given (an ONNX model rewritten in
    #: place), like onnx_ir's ``in_place``; the reports then describe the model again.
    changes_input: ClassVar[bool]

    def __call__(self, ctx: DiagnosticContext, state: S) -> S: ...


def run_pipeline(
    ctx: DiagnosticContext,
    passes: Sequence[Pass[S]],
    state: S,
    *,
    check_contract: bool | None = None,
) -> S:
    """Run ``passes`` in order, each inside its own ``ctx.pass_``.

    With ``check_contract`` (default: the environment's ``DYNAMO_ONNX_CHECK_PASSES``, set by
    the test suite), a pass that declares ``changes_input = False`` and changes a program,
    ONNX model or module it was given raises :class:`~dynamo_onnx.passes.contract.PassContractError`
    (:mod:`dynamo_onnx.passes.contract`).

    While the passes run, Python's garbage collector runs less often
    (:mod:`dynamo_onnx.passes.collector`); its thresholds are the caller's again after.

    An exception that no finding explains becomes the pass's failure rule (recorded by
    ``ctx.pass_``) and is raised as the pass's ``error_type``, with the context attached.
    When the context was already closed (work after the export), it is closed again with
    the outcome, so the reports recompute success; an earlier failure whose errors are
    still in the log (``warnings_as_errors``' gate, then the caller saves the model) stays
    the log's failure.
    """
    reopened = ctx.finished is not None
    check = contract.checking() if check_contract is None else check_contract
    step: Pass[S] | None = None
    record: PassRecord | None = None
    try:
        with deprecations_ignored(), collections_spaced():
            for step in passes:
                given = contract.fingerprint(state) if check and not step.changes_input else None
                with ctx.pass_(step.name) as record:
                    result = step(ctx, state)
                if given is not None:
                    contract.unchanged(step.name, given, contract.fingerprint(state))
                state = result
    except contract.PassContractError:
        raise  # a bug in the pass, not a finding
    except OnnxExporterError as error:
        error.diagnostics = error.diagnostics or ctx
        if reopened:
            ctx.finish(error)
        raise
    except Exception as exc:
        assert step is not None and record is not None
        finding = record.failure or ctx.record_exception(exc, catalog().for_pass(step.name))
        error = ctx.error_for([finding], step.error_type, finding.message)
        if reopened:
            ctx.finish(error)
        raise error from exc
    if reopened:  # what failed before (warnings made errors) still failed: the log says so
        ctx.finish(ctx.exception if ctx.has_errors() else None)
    return state
