"""ONNXProgram: the result of an export, callable with torch tensors.

Work on the program after the export (``optimize``, ``verify``, ``save``) runs as passes
of the export's diagnostic context, so the log records them and recomputes success.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, TypeVar

import onnx
import onnx_ir as ir
import torch

from dynamo_onnx.defaults import (
    QUANTIZATION_ACCURACY_LEVEL,
    QUANTIZATION_BLOCK_SIZE,
    QUANTIZATION_PRECISION,
    QUANTIZATION_SYMMETRIC,
    VERIFY_ATOL,
    VERIFY_RTOL,
)
from dynamo_onnx.diagnostics import Location
from dynamo_onnx.errors import OnnxExporterError
from dynamo_onnx.integrations import (
    FamilyInputs,
    facts,
    files_beside,
    files_not_beside,
    runtime_steps,
)
from dynamo_onnx.io import onnx_file
from dynamo_onnx.io.inputs import call_arguments
from dynamo_onnx.io.runner import OrtRunner
from dynamo_onnx.options import ONNXRuntimeOptions
from dynamo_onnx.passes.base import Pass, run_pipeline
from dynamo_onnx.passes.onnx_graph.describe import describe_into
from dynamo_onnx.passes.onnx_graph.optimize import OptimizePass
from dynamo_onnx.passes.onnx_graph.weights import ApplyWeightsPass, WeightsRequest
from dynamo_onnx.passes.save import SavePass, SaveRequest
from dynamo_onnx.passes.session import SessionPass, SessionRequest, default_session
from dynamo_onnx.passes.verify import (
    Comparison,
    VerifyPass,
    VerifyRequest,
)
from dynamo_onnx.reports import ReportingContext

__all__ = ["ONNXProgram"]

S = TypeVar("S")


class ONNXProgram:
    """A class to represent an ONNX program that is callable with torch tensors.

    Attributes:
        model: the ``onnx_ir.Model``.
        exported_program: the decomposed ``torch.export.ExportedProgram`` it came from.
        diagnostics: the diagnostic context of the export (``.findings``...).
    """

    def __init__(
        self,
        model: ir.Model,
        exported_program: torch.export.ExportedProgram | None,
        diagnostics: ReportingContext | None = None,
        *,
        reference: Callable[..., Any] | None = None,
        model_location: Location | None = None,
        inputs: FamilyInputs | None = None,
    ) -> None:
        self.model = model
        #: How the caller's inputs become the model's when a model family's values (a KV
        #: cache) are among them.
        self.inputs = inputs
        #: Where the model's code is: the anchor of findings about the program as a whole
        #: (its weights).
        self.model_location = model_location
        #: What ``verify`` compares with by default: the caller's model (so that
        #: ``program.verify(args)`` and ``export(..., verify=True)`` agree), else the
        #: exported program.
        self.reference = reference
        self.exported_program = exported_program
        self.diagnostics = diagnostics
        self._runner: OrtRunner | None = None
        #: Where export(report=True) wrote the reports; a failure after export rewrites them.
        self.report_dir: str | None = None

    def __repr__(self) -> str:
        return (
            f"ONNXProgram(model=<{len(self.model.graph)} nodes>, diagnostics={self.diagnostics!r})"
        )

    def _context(self) -> ReportingContext:
        if self.diagnostics is None:
            self.diagnostics = ReportingContext()
        return self.diagnostics

    def _run(self, passes: Sequence[Pass[S]], state: S) -> S:
        """Run passes after the export; a failure rewrites the reports export wrote. After
        a pass that changed the model, the reports describe the model as it is now."""
        ctx = self._context()
        try:
            state = run_pipeline(ctx, passes, state)
        except OnnxExporterError as error:
            if self.report_dir is not None:
                error.report_paths = ctx.try_write_reports(self.report_dir)
            raise
        if any(p.changes_input for p in passes):
            describe_into(ctx.summary, self.model)
        return state

    # -- weights ---------------------------------------------------------------------------

    def fake_weights(self) -> list[str]:
        """Names of the initializers that are fake (meta tensors, no data)."""
        return onnx_file.fake_weight_names(self.model)

    def apply_weights(
        self, state_dict: Mapping[str, torch.Tensor] | str | os.PathLike[str]
    ) -> None:
        """Replace the model's initializers with the tensors of ``state_dict``, by name.

        ``state_dict`` may also be the path of a safetensors checkpoint (a folder that
        ``save_pretrained`` wrote, with one file or shards and their index, or one
        ``.safetensors`` file): its tensors are then read one at a time when the model is
        saved (or run), converted to each initializer's dtype, so a model exported in fake
        mode is saved with its weights without ever holding them all.

        Use it to replace fake weights or other weights. Every name must be an initializer,
        every fake initializer must be given, and shapes and dtypes must match: otherwise a
        ``weights-mismatch`` finding is recorded, :class:`WeightsMismatchError` raised, and
        nothing is applied.
        """
        self._run([ApplyWeightsPass()], WeightsRequest(self.model, state_dict, self.model_location))
        self.release()

    def optimize(self, runtime: str | None = None) -> None:
        """Optimize the ONNX model in place with the onnxscript optimizer.

        Constant folding and the elimination of redundancies. Fake weights are hidden from
        the optimizer while it runs, so it works before and after ``apply_weights``. A
        ``model-optimized`` finding records the node counts before and after.

        ``runtime="onnxruntime"`` also fuses the model for ONNX Runtime (attention with its
        cache into ``GroupQueryAttention``, rotary embeddings, RMS norms: docs/llm.md); a
        ``runtime-optimized`` note says what fused per layer, a warning each block that did
        not.
        """
        if runtime is None:
            self._run([OptimizePass()], self.model)
        else:
            # onnxscript's ORT fusions build their patterns when imported: an export that
            # does not fuse does not pay for them
            from dynamo_onnx.runtimes.onnxruntime.fusion_pass import (
                FusionRequest,
                OnnxRuntimeFusionPass,
            )

            # the model's family says how many positions its rotary caches hold, and which
            # steps of its own it wants among and after the fusions
            request = FusionRequest(
                self.model,
                facts(self.reference).get("max_positions"),
                tuple(runtime_steps(self.reference, runtime)),
            )
            self.model = self._run([OnnxRuntimeFusionPass()], request).model
            describe_into(self._context().summary, self.model)
            if self.inputs is not None:  # the fusion may change a family value's contract
                self.inputs = self.inputs.for_model(self.model)
        self.release()

    def quantize(
        self,
        precision: str = QUANTIZATION_PRECISION,
        *,
        block_size: int = QUANTIZATION_BLOCK_SIZE,
        symmetric: bool = QUANTIZATION_SYMMETRIC,
        accuracy_level: int = QUANTIZATION_ACCURACY_LEVEL,
    ) -> None:
        """Quantize the MatMul weights for ONNX Runtime: ``precision`` "int4" or "int8"
        (``MatMulNBits``), or "fp32" (nothing changes).

        ONNX Runtime's ``MatMulNBitsQuantizer`` does the work, with onnxruntime-genai's
        model builder's CPU settings as defaults (blocks of 32, symmetric, accuracy level
        4: int8 activations); the embedding stays in float, the LM head is quantized. A
        ``model-quantized`` note counts what was quantized. The outputs then differ from
        eager by the quantization error, so ``verify`` is expected to report it.

        Raises:
            InvalidOptionValueError: an unknown precision, block size or accuracy level (DO109).
            OptimizationError: the quantizer failed (DO508).
        """
        from dynamo_onnx.runtimes.onnxruntime.quantize import (  # only when quantizing
            Quantization,
            QuantizePass,
            QuantizeRequest,
        )

        request = QuantizeRequest(
            self.model,
            Quantization(precision, block_size, symmetric, accuracy_level),
            self.model_location,
        )
        self.model = self._run([QuantizePass()], request).model
        self.release()

    # -- the model -------------------------------------------------------------------------

    @property
    def model_proto(self) -> onnx.ModelProto:
        """Return the ONNX ``ModelProto`` object."""
        return onnx_file.to_proto(self.model)

    def save(
        self,
        destination: str | os.PathLike[str] | IO[bytes],
        *,
        include_initializers: bool = True,
        keep_initializers_as_inputs: bool = False,
        external_data: bool | None = None,
    ) -> None:
        """Save the ONNX model to ``destination``: a file path (written atomically) or a
        binary file object such as ``io.BytesIO`` (weights inline), as torch.onnx does.

        When ``external_data`` is True, or the weights exceed 2 GB, tensors larger than 256
        bytes are saved in ``<destination>.data`` beside the model (smaller ones stay
        inline); a file object cannot hold that second file (DO412). Without the weights
        (``include_initializers=False``) a ``weights-not-saved`` note says where they are.

        Raises:
            TypeError: if the destination is neither a file path nor a file object.
            SaveError: if it cannot be written (also an ``OSError``).
            FakeWeightsError: if the weights are fake and ``include_initializers`` is True.
        """
        if not isinstance(destination, (str, os.PathLike)) and not onnx_file.is_file_object(
            destination
        ):
            raise TypeError(
                "destination must be a file path or a binary file object, "
                f"got {type(destination).__name__}"
            )
        request = SaveRequest(
            self.model,
            destination,
            include_initializers,
            keep_initializers_as_inputs,
            external_data,
            self.model_location,
            self._beside(destination) if isinstance(destination, (str, os.PathLike)) else {},
            self._not_beside(destination) if isinstance(destination, (str, os.PathLike)) else {},
        )
        self._run([SavePass()], request)

    def _beside(self, destination: str | os.PathLike[str]) -> dict[str, str | bytes]:
        """Files saved beside the model: what the model's family writes there (the
        configuration a runtime reads to run the folder as it is)."""
        filename = os.path.basename(os.fspath(destination))
        return files_beside(self.model, self.reference, self.inputs, filename)

    def _not_beside(self, destination: str | os.PathLike[str]) -> dict[str, str]:
        """Files the model's family cannot write beside this model, with the reason."""
        filename = os.path.basename(os.fspath(destination))
        return files_not_beside(self.model, self.reference, self.inputs, filename)

    def verify(
        self,
        args: Sequence[Any] | torch.Tensor = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        atol: float = VERIFY_ATOL,
        rtol: float = VERIFY_RTOL,
        find_divergence: bool = False,
        reference: Callable[..., Any] | None = None,
        second_shape: bool = True,
    ) -> list[Comparison]:
        """Compare ONNX Runtime with eager PyTorch on these inputs, output by output.

        Every output beyond ``atol + rtol * |eager|`` is an ``output-mismatch`` warning with
        its max absolute and relative difference (an error under warnings-as-errors); all
        within them is an ``outputs-match`` note. ``find_divergence`` also names the first
        FX node whose ONNX value diverges (``first-divergence``), with its source line.
        ``reference`` computes the eager outputs (default: the model that was exported,
        run as the caller gave it; its buffers are restored afterwards, so verifying a
        training-mode model does not update its running statistics).
        With dynamic dimensions, ``second_shape`` also compares at another size of each
        (random inputs of the same dtypes and value range), so a size baked into the graph
        is a mismatch, not a silent success. An output computed from random numbers is
        compared on shape only, and the ``outputs-match`` note counts and names it; every
        other output is compared on values. ``args`` is read as ``export`` reads it: a lone
        tensor is the one positional input.
        """
        args, kwargs = call_arguments(args, kwargs)
        request = VerifyRequest(
            self.model,
            self.exported_program,
            self._session_runner(),
            args,
            kwargs,
            reference if reference is not None else self.reference,
            atol,
            rtol,
            find_divergence,
            second_shape,
            longer_output=self.inputs.longer_output if self.inputs is not None else None,
        )
        return list(self._run([VerifyPass()], request).comparisons)

    def save_diagnostics(self, destination: str | os.PathLike[str]) -> None:
        """Save the export's diagnostics as a SARIF log, as the PyTorch 2.1-2.5 API did."""
        if self.diagnostics is None:
            raise ValueError(
                "this ONNXProgram was not produced by an export: it has no diagnostics"
            )
        self.diagnostics.save_sarif(destination)

    # -- running it ------------------------------------------------------------------------

    def initialize_inference_session(
        self,
        initializer: Callable[[str | bytes], Any] | None = None,
        *,
        options: ONNXRuntimeOptions | None = None,
    ) -> None:
        """Create the ONNX Runtime session.

        ``initializer(model)`` receives the serialized model (bytes, or a file path when the
        weights are large) and returns a session; by default an ``InferenceSession``
        configured by ``options`` (providers, session options), on the CPU otherwise.
        """
        self.release()
        if initializer is None:
            initializer = functools.partial(default_session, options=options)
        elif options is not None:
            raise TypeError("give either an initializer or options, not both")
        request = SessionRequest(self.model, initializer, self.model_location)
        session = self._run([SessionPass()], request).session
        self._runner = OrtRunner(session, self.exported_program, self.inputs)

    def _session_runner(self) -> OrtRunner:
        if self._runner is None:
            self.initialize_inference_session()
        assert self._runner is not None
        return self._runner

    @property
    def _session(self) -> Any:
        """The ONNX Runtime session, once created (None before and after ``release``)."""
        return self._runner.session if self._runner is not None else None

    def release(self) -> None:
        """Release the inference session and the memory it holds."""
        self._runner = None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        """Run the model in ONNX Runtime with torch tensors; returns the outputs as a tuple
        of tensors, as torch.onnx's ``ONNXProgram.__call__`` does."""
        return tuple(self._session_runner()(*args, **kwargs))
