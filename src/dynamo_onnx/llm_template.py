"""``export_llm``'s streamed model exported as a template of a few layers, its layers then
repeated in the ONNX graph (issue 44's wall time: torch.export's capture grows with the
layers, and every layer of a kind is traced from the same code).

The template (``integrations.transformers.layer_template``) is the model's config with
layer 0 and the first two layers of each kind after it, reading the checkpoint's tensors of
those layers; it is exported as the model would be (the same options, fusions, weights
attached and optimized), then ``onnx_tools.layer_repeat.repeat_layers`` makes the model's
graph of it, each repeated layer's weights read from that layer's tensors. The program then
stands for the whole model: its ONNX model, its reference (the model's, whose config the runtime's
files are written from) and its inputs (the model's cache, every layer). Its exported program
is the template's, so it is dropped: the program is run by its inputs' names.

DO536 says the folder was made so; DO537, with the reason, that the model was exported whole
(no template with fewer layers, or its layers could not be repeated: ``repeat_layers``
refuses a weight the optimizer merged with equal ones of other layers, as an untrained
checkpoint's norms all at one are). A layer's small weights the optimizer folds into
constants (Gemma's ``1 + weight`` norms) are no refusal: the folded values stay computations
of the layer's lazy weights (``onnx_tools.lazy_folding``), which a repeated layer evaluates
on its own.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dynamo_onnx.errors import OnnxExporterError, WarningsAsErrorsError
from dynamo_onnx.integrations import StreamedFolder, family_inputs_of, layer_template_of
from dynamo_onnx.passes.onnx_graph.describe import describe_into

if TYPE_CHECKING:
    from dynamo_onnx.integrations.transformers.layer_template import LayerTemplate
    from dynamo_onnx.io.streamed_weights import WeightStream
    from dynamo_onnx.program import ONNXProgram

__all__ = ["Exported", "export_repeated"]

#: an export of a folder: the program, the gate error ``warnings_as_errors`` raised, the
#: weight stream
Exported = tuple["ONNXProgram", "WarningsAsErrorsError | None", "WeightStream | None"]


@dataclasses.dataclass(frozen=True)
class _Refused:
    """Why the model was exported whole: the reason DO537 gives."""

    reason: str


def export_repeated(
    folder: StreamedFolder,
    whole_windows: bool,
    export_one: Callable[[StreamedFolder], Exported],
) -> Exported:
    """``folder``'s model exported by ``export_one`` through its template, its layers
    repeated (DO536); exported whole by ``export_one`` when there is no template or its
    layers cannot be repeated (DO537 with the reason). ``whole_windows``: the folder's
    sliding layers keep their whole cache (the plain fallback), and so do the template's."""
    template = layer_template_of(folder)
    if isinstance(template, str):
        return _whole(folder, export_one, template)
    shrunk = template.folder
    if whole_windows:
        shrunk = shrunk.with_whole_windows() or shrunk  # type: ignore[assignment]
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        try:
            program, gate, stream = export_one(shrunk)
        except OnnxExporterError as error:  # the model's own export says it at its lines
            return _whole(folder, export_one, f"the template's export failed ({error.rule_id})")
    repeated = _repeat(program, template)
    if isinstance(repeated, _Refused):  # the template's warnings are not the model's
        return _whole(folder, export_one, repeated.reason)
    for w in issued:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if stream is not None:  # what the export read, under the model's names
        stream.rename(template.model_weight)
    _stand_for_the_model(program, repeated, folder)
    program._context().record(
        "layers-repeated-from-template",
        locations=[program.model_location],
        kept=len(template.kept),
        layers=template.layers,
        indices=", ".join(map(str, template.kept)),
    )
    return program, gate, stream


def _repeat(program: ONNXProgram, template: LayerTemplate) -> Any:
    """The model's graph made of the template's, or why it cannot be."""
    from dynamo_onnx.onnx_tools.layer_repeat import LayerRepeatRefused, repeat_layers

    try:
        return repeat_layers(program.model, template.plan())
    except LayerRepeatRefused as refused:
        return _Refused(str(getattr(refused, "reason", None) or refused))


def _stand_for_the_model(program: ONNXProgram, repeated: Any, folder: StreamedFolder) -> None:
    """The template's program made the model's: its graph ``repeated``, the model's
    reference, inputs and summary."""
    program.model = repeated
    program.reference = folder.model
    inputs = family_inputs_of(folder.model, folder.inputs)
    program.inputs = inputs.for_model(program.model) if inputs is not None else None
    program.exported_program = None  # the template's: its inputs are the template's
    program.release()
    describe_into(program._context().summary, program.model)


def _whole(
    folder: StreamedFolder, export_one: Callable[[StreamedFolder], Exported], reason: str
) -> Exported:
    program, gate, stream = export_one(folder)
    program._context().record(
        "template-refused",
        locations=[program.model_location],
        layers=folder.model.config.num_hidden_layers,
        reason=reason.rstrip("."),
    )
    return program, gate, stream
