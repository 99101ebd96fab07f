"""The installed model families, and the questions generic code asks them.

Generic code never names a family's concepts: it asks "the family that recognizes this
value" (:func:`family_of`) or each family in turn, through the protocol in
:mod:`dynamo_onnx.integrations.base`. Adding a family is a package under ``integrations/``
implementing :class:`~dynamo_onnx.integrations.base.ModelFamily` and one entry in
:data:`FAMILIES` (docs/architecture.md, "Model families as plug-ins").
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dynamo_onnx.integrations.base import FamilyInputs, ModelFamily, RuntimeStep
from dynamo_onnx.integrations.transformers import TransformersFamily

if TYPE_CHECKING:
    import onnx_ir as ir
    import torch

    from dynamo_onnx.diagnostics import DiagnosticContext
    from dynamo_onnx.integrations.transformers.hf_folder import HFFolder as SavedModel
    from dynamo_onnx.integrations.transformers.layer_copy import LayerCopy
    from dynamo_onnx.integrations.transformers.layer_template import LayerTemplate
    from dynamo_onnx.integrations.transformers.qwen2_5_vl_folder import (
        QwenVLFolder as VisionFolder,
    )
    from dynamo_onnx.integrations.transformers.streamed import StreamedFolder
    from dynamo_onnx.integrations.transformers.streamed import (
        attach_weights as attach_folder_weights,
    )
    from dynamo_onnx.integrations.transformers.whisper_folder import WhisperFolder as SpeechFolder
    from dynamo_onnx.registry import OnnxRegistry

#: The folders' names, from the modules that define them: imported when first used, as the
#: functions below import their modules, so that an export of a model that is no saved
#: folder does not load the folder code (docs/performance.md, "The overhead beyond capture").
_FOLDER_NAMES = {
    "SavedModel": ("dynamo_onnx.integrations.transformers.hf_folder", "HFFolder"),
    "VisionFolder": ("dynamo_onnx.integrations.transformers.qwen2_5_vl_folder", "QwenVLFolder"),
    "StreamedFolder": ("dynamo_onnx.integrations.transformers.streamed", "StreamedFolder"),
    "attach_folder_weights": ("dynamo_onnx.integrations.transformers.streamed", "attach_weights"),
    "SpeechFolder": ("dynamo_onnx.integrations.transformers.whisper_folder", "WhisperFolder"),
}


def __getattr__(name: str) -> Any:
    found = _FOLDER_NAMES.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(found[0]), found[1])
    globals()[name] = value  # later lookups do not come here
    return value


__all__ = [
    "FAMILIES",
    "FamilyInputs",
    "ModelFamily",
    "RuntimeStep",
    "SavedModel",
    "SpeechFolder",
    "StreamedFolder",
    "VisionFolder",
    "attach_folder_weights",
    "capturing",
    "copy_family_values",
    "facts",
    "families",
    "family_inputs_of",
    "family_of",
    "files_beside",
    "files_not_beside",
    "input_family",
    "is_speech_folder",
    "is_vision_folder",
    "layer_copy_of",
    "layer_copy_to_eager",
    "layer_template_of",
    "load_folder",
    "load_speech_folder",
    "load_streamed_folder",
    "load_vision_folder",
    "output_leaves",
    "runtime_steps",
]

#: The installed families, built once at import (each is stateless).
FAMILIES: tuple[ModelFamily, ...] = (TransformersFamily(),)


def families() -> tuple[ModelFamily, ...]:
    """Every installed model family, in the order they are asked."""
    return FAMILIES


def load_folder(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> SavedModel:
    """The model saved in the folder ``path`` (a Hugging Face folder: the one format
    saved on disk a family reads today), with the inputs to export it with and the files
    to copy beside the exported model; a folder no family can load fails with its rule."""
    from dynamo_onnx.integrations.transformers import hf_folder

    return hf_folder.load(ctx, path)


def is_speech_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a speech model a family exports as an encoder and a decoder
    (Whisper), rather than a causal LM."""
    from dynamo_onnx.integrations.transformers import whisper_folder

    return whisper_folder.is_whisper(path)


def load_speech_folder(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> SpeechFolder:
    """The speech model saved in ``path`` with its feature extractor (DO507 when it cannot
    be loaded)."""
    from dynamo_onnx.integrations.transformers import whisper_folder

    return whisper_folder.load(ctx, path)


def is_vision_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a vision-language model a family exports as a vision
    encoder, an embedding step and a text decoder (Qwen2.5-VL), rather than a causal LM."""
    from dynamo_onnx.integrations.transformers import qwen2_5_vl_folder

    return qwen2_5_vl_folder.is_qwen2_5_vl(path)


def load_vision_folder(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> VisionFolder:
    """The vision-language model saved in ``path`` with its image processor (DO507 when
    it cannot be loaded)."""
    from dynamo_onnx.integrations.transformers import qwen2_5_vl_folder

    return qwen2_5_vl_folder.load(ctx, path)


def load_streamed_folder(
    ctx: DiagnosticContext, path: str | os.PathLike[str]
) -> StreamedFolder | None:
    """The model saved in the folder ``path`` built without its weights, with where each
    weight is in its checkpoint (read one at a time when the ONNX weights are written);
    None when the folder's weights cannot be read that way (then :func:`load_folder`)."""
    from dynamo_onnx.integrations.transformers import streamed

    return streamed.load_streamed(ctx, path)


def layer_copy_of(folder: StreamedFolder) -> LayerCopy | None:
    """``folder``'s model with the first layer of each kind, reading the same checkpoint:
    what the checks that would hold the whole model's weights run on (None: no such copy)."""
    from dynamo_onnx.integrations.transformers import layer_copy

    return layer_copy.layer_copy(folder)


def layer_copy_to_eager(copy_of: LayerCopy, whole_windows: bool) -> SavedModel:
    """The layer copy with its weights in memory and example inputs with values, to run
    eagerly."""
    from dynamo_onnx.integrations.transformers import layer_copy

    return layer_copy.eager_folder(copy_of, whole_windows)


def layer_template_of(folder: StreamedFolder) -> LayerTemplate | str:
    """``folder``'s model as a template of a few layers that the ONNX graph repeats, reading
    the same checkpoint; or why there is none."""
    from dynamo_onnx.integrations.transformers import layer_template

    return layer_template.layer_template(folder)


def family_inputs_of(model: Any, kwargs: dict[str, Any]) -> FamilyInputs | None:
    """How an export of ``model`` with the keyword inputs ``kwargs`` takes them, when a
    family's values are among them (as the export's validation finds it); else None."""
    from dynamo_onnx.io.inputs import spread

    signature = inspect.signature(model.forward)
    bound = spread(signature, signature.bind(**kwargs).arguments)
    family = input_family(model, signature, bound.values())
    return family.inputs(signature, bound) if family is not None else None


def family_of(value: Any) -> ModelFamily | None:
    """The family that recognizes ``value`` as one of its objects, or None."""
    return next((f for f in FAMILIES if f.recognizes(value)), None)


def input_family(
    model: Any, signature: inspect.Signature, values: Iterable[Any]
) -> ModelFamily | None:
    """The family whose inputs the export takes apart for this call: the first that
    recognizes one of ``values`` (the inputs, bound and spread) or takes the model's
    inputs as its own (a model that makes its own cache)."""
    values = list(values)
    for family in FAMILIES:
        if any(family.recognizes(v) for v in values) or family.takes_structured_inputs(
            model, signature
        ):
            return family
    return None


@contextlib.contextmanager
def capturing(
    ctx: DiagnosticContext, module: torch.nn.Module, registry: OnnxRegistry | None
) -> Iterator[None]:
    """While the block runs, every family's capture wrapper is on (each puts its settings
    back afterwards, in reverse order)."""
    with contextlib.ExitStack() as stack:
        for family in FAMILIES:
            stack.enter_context(family.capturing(ctx, module, registry))
        yield


def output_leaves(value: Any) -> Any | None:
    """A family value a model returned, as plain containers and tensors; None when no
    family recognizes it."""
    for family in FAMILIES:
        found = family.output_leaves(value)
        if found is not None:
            return found
    return None


def copy_family_values(values: Any) -> Any:
    """``values`` (args, kwargs, nested) with every family value deep-copied: running the
    model may change one in place (a KV cache grows), and the caller's must not change."""
    if family_of(values) is not None:
        return copy.deepcopy(values)
    if isinstance(values, dict):
        return {k: copy_family_values(v) for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return type(values)(copy_family_values(v) for v in values)
    return values


def files_beside(
    model: ir.Model, reference: Any, inputs: FamilyInputs | None, filename: str
) -> dict[str, str | bytes]:
    """Every family's files to save beside ``model`` saved as ``filename``."""
    found: dict[str, str | bytes] = {}
    for family in FAMILIES:
        found.update(family.files_beside(model, reference, inputs, filename))
    return found


def files_not_beside(
    model: ir.Model, reference: Any, inputs: FamilyInputs | None, filename: str
) -> dict[str, str]:
    """Every family's files it cannot write beside ``model``, with the reason."""
    found: dict[str, str] = {}
    for family in FAMILIES:
        found.update(family.files_not_beside(model, reference, inputs, filename))
    return found


def facts(model: Any) -> dict[str, Any]:
    """What the families read from the caller's ``model`` (later families win a key)."""
    found: dict[str, Any] = {}
    for family in FAMILIES:
        found.update(family.facts(model))
    return found


def runtime_steps(reference: Any, runtime: str) -> list[RuntimeStep]:
    """The rewrites the families hand ``runtime``'s optimization, in family order."""
    return [s for f in FAMILIES for s in f.runtime_steps(reference, runtime)]
