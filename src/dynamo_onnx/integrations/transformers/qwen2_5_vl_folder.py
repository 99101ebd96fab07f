"""A Qwen2.5-VL checkpoint on disk, and the files onnxruntime-genai's ``qwen2_5_vl`` type reads.

What ``export-llm QWEN2_5_VL_DIR`` needs besides the three models (:mod:`.qwen2_5_vl`): the
model loaded offline, its image processor read the way the checkpoint carries it
(``preprocessor_config.json`` through ``AutoImageProcessor``: ``AutoProcessor`` needs
torchvision for the video processor), ``genai_config.json`` naming the models' inputs and
outputs and the token ids genai's mRoPE positions need, and the image processing genai
performs (onnxruntime-extensions' ``qwen2_5_image_processor``: smart resize, rescale,
normalize, patches) with the numbers of the checkpoint's processor. That file is
``vision_processor.json``: transformers 5 writes its own ``processor_config.json``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.errors import InvalidOptionValueError
from dynamo_onnx.integrations.transformers.genai import FILENAME as GENAI_FILENAME
from dynamo_onnx.integrations.transformers.genai import dumps
from dynamo_onnx.integrations.transformers.hf_folder import TOKENIZER_FILES
from dynamo_onnx.integrations.transformers.loading import first_line, folder_problem, quiet_loading
from dynamo_onnx.integrations.transformers.multimodal_parts import (
    ModelPart,
    is_model_type,
    token_ids,
)
from dynamo_onnx.integrations.transformers.qwen2_5_vl import (
    DECODER_FILENAME,
    EMBEDDING_FILENAME,
    VISION_FILENAME,
    DecoderStep,
    EmbeddingStep,
    Names,
    VisionStep,
    decoder_example,
    decoder_shapes,
    embedding_example,
    embedding_shapes,
    vision_example,
    vision_shapes,
)

__all__ = [
    "GENAI_TYPE",
    "IMAGE_PROCESSOR_FILENAME",
    "QwenVLFolder",
    "genai_config",
    "image_processor_config",
    "is_qwen2_5_vl",
    "load",
]

#: onnxruntime-genai's model type for Qwen2.5-VL (transformers' ``model_type`` too).
GENAI_TYPE = "qwen2_5_vl"
IMAGE_PROCESSOR_FILENAME = "vision_processor.json"
#: The image processor's files a checkpoint carries, copied beside the models.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "chat_template.jinja")


@dataclasses.dataclass(frozen=True)
class QwenVLFolder:
    """A Qwen2.5-VL checkpoint loaded from ``path``: the model (float32, eval mode), its
    image processor, and the tokenizer and processor files to copy beside the models."""

    path: pathlib.Path
    model: Any  # Qwen2_5_VLForConditionalGeneration
    image_processor: Any  # Qwen2VLImageProcessor(Pil)
    files_to_copy: tuple[pathlib.Path, ...]

    genai_type = GENAI_TYPE
    part_filenames = (VISION_FILENAME, EMBEDDING_FILENAME, DECODER_FILENAME)

    @property
    def names(self) -> Names:
        return Names(self.model.config.text_config.num_hidden_layers)

    def parts(self) -> tuple[ModelPart, ...]:
        """The vision encoder, the embedding step, then the text decoder, as
        onnxruntime-genai's ``qwen2_5_vl`` type runs them."""
        config, names = self.model.config, self.names
        vision = ModelPart(
            VISION_FILENAME,
            VisionStep(self.model).eval(),
            vision_example(config),
            [names.pixel_values, names.image_grid_thw],
            [names.image_features],
            vision_shapes(config),
        )
        embedding = ModelPart(
            EMBEDDING_FILENAME,
            EmbeddingStep(self.model).eval(),
            embedding_example(config),
            [names.input_ids, names.image_features],
            [names.inputs_embeds],
            embedding_shapes(),
        )
        decoder = ModelPart(
            DECODER_FILENAME,
            DecoderStep(self.model).eval(),
            decoder_example(config),
            names.decoder_inputs(),
            names.decoder_outputs(),
            decoder_shapes(names),
        )
        return vision, embedding, decoder

    def record_findings(self, ctx: DiagnosticContext) -> None:
        """DO542 for each setting of the image processor onnxruntime-genai's processing
        does not follow, at its line of ``preprocessor_config.json``."""
        source = self.path / "preprocessor_config.json"
        lines = source.read_text().splitlines() if source.is_file() else []
        for setting, value, genai in processor_differences(self.image_processor):
            line = next((i for i, text in enumerate(lines, 1) if f'"{setting}"' in text), 1)
            ctx.record(
                "image-processing-differs",
                locations=[Location(str(source), line)],
                setting=setting,
                value=value,
                genai=genai,
            )

    def runtime_files(self) -> dict[str, str]:
        """``genai_config.json`` and the image processing genai performs."""
        return {
            GENAI_FILENAME: dumps(genai_config(self.model.config, self.names)),
            IMAGE_PROCESSOR_FILENAME: dumps(image_processor_config(self.image_processor)),
        }


def is_qwen2_5_vl(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a Qwen2.5-VL checkpoint (its ``config.json`` says so)."""
    return is_model_type(path, GENAI_TYPE)


def load(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> QwenVLFolder:
    """The Qwen2.5-VL checkpoint in ``path``, loaded without a download; a folder
    transformers cannot load or one without an image processor fails with DO507."""
    folder = pathlib.Path(path)
    problem = folder_problem(folder)
    if problem is None:
        import torch  # the CLI's parser imports this module
        import transformers

        try:
            with quiet_loading(transformers):
                model = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
                    folder, local_files_only=True, dtype=torch.float32
                )
                processor = transformers.AutoImageProcessor.from_pretrained(
                    folder, local_files_only=True
                )
        except (OSError, ValueError, KeyError, ImportError) as exc:
            problem = first_line(exc)
    if problem is not None:
        ctx.fail("hf-folder-unusable", InvalidOptionValueError, path=os.fspath(path), cause=problem)
    names = TOKENIZER_FILES + PROCESSOR_FILES
    files = tuple(folder / name for name in names if (folder / name).is_file())
    return QwenVLFolder(folder, model.eval(), processor, files)


def _session() -> dict[str, Any]:
    return {"log_id": "onnxruntime-genai", "provider_options": []}


def genai_config(config: Any, names: Names) -> dict[str, Any]:
    """``genai_config.json`` for the three models of a Qwen2.5-VL ``config``."""
    text, vision = config.text_config, config.vision_config
    head_size = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    decoder = {
        "session_options": _session(),
        "filename": DECODER_FILENAME,
        "head_size": head_size,
        "hidden_size": text.hidden_size,
        "inputs": {
            "inputs_embeds": names.inputs_embeds,
            "attention_mask": names.attention_mask,
            "position_ids": names.position_ids,
            "past_key_names": names.past_key,
            "past_value_names": names.past_value,
        },
        "outputs": {
            "logits": names.logits,
            "present_key_names": names.present_key,
            "present_value_names": names.present_value,
        },
        "num_attention_heads": text.num_attention_heads,
        "num_hidden_layers": text.num_hidden_layers,
        "num_key_value_heads": text.num_key_value_heads,
    }
    embedding = {
        "session_options": _session(),
        "filename": EMBEDDING_FILENAME,
        "inputs": {"input_ids": names.input_ids, "image_features": names.image_features},
        "outputs": {"inputs_embeds": names.inputs_embeds},
    }
    vision_part = {
        "session_options": _session(),
        "filename": VISION_FILENAME,
        "config_filename": IMAGE_PROCESSOR_FILENAME,
        "spatial_merge_size": vision.spatial_merge_size,
        "tokens_per_second": float(getattr(vision, "tokens_per_second", 2) or 2),
        "patch_size": vision.patch_size,
        "window_size": vision.window_size,
        "inputs": {"pixel_values": names.pixel_values, "image_grid_thw": names.image_grid_thw},
        "outputs": {"image_features": names.image_features},
    }
    tokens = {
        "bos_token_id": token_ids(getattr(text, "bos_token_id", None) or config.bos_token_id),
        "eos_token_id": token_ids(getattr(text, "eos_token_id", None) or config.eos_token_id),
        "pad_token_id": token_ids(getattr(text, "pad_token_id", None) or config.pad_token_id),
        "image_token_id": token_ids(config.image_token_id),
        "video_token_id": token_ids(config.video_token_id),
        "vision_start_token_id": token_ids(config.vision_start_token_id),
    }
    context = text.max_position_embeddings
    return {
        "model": {
            **{k: v for k, v in tokens.items() if v is not None},
            "context_length": context,
            "decoder": decoder,
            "embedding": embedding,
            "vision": vision_part,
            "type": GENAI_TYPE,
            "vocab_size": text.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,  # the presents grow
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }


def _pixels(processor: Any, key: str, edge: str) -> int:
    """The processor's ``min_pixels``/``max_pixels``: an attribute, else its ``size``'s
    ``shortest_edge``/``longest_edge`` (transformers 5 keeps them there)."""
    value = getattr(processor, key, None)
    if value is None:
        size = processor.size
        value = size.get(edge) if isinstance(size, dict) else getattr(size, edge, None)
    return int(value)


#: The settings of a ``Qwen2VLImageProcessor`` onnxruntime-genai's
#: ``qwen2_5_image_processor`` takes as given: (setting, the value it assumes, what it does).
_GENAI_ASSUMES = (
    ("do_convert_rgb", True, "converts every image to RGB"),
    ("do_resize", True, "resizes every image to multiples of patch_size * merge_size"),
    ("resample", 3, "resizes with bicubic interpolation (resample 3)"),
    ("do_rescale", True, "rescales the pixel values by rescale_factor"),
    ("do_normalize", True, "normalizes by image_mean and image_std"),
    ("temporal_patch_size", 2, "repeats each image over 2 frames (temporal_patch_size 2)"),
)


def processor_differences(processor: Any) -> list[tuple[str, Any, str]]:
    """The settings of ``processor`` genai's image processing does not follow: (setting,
    its value, what genai does instead)."""
    found = []
    for setting, assumed, genai in _GENAI_ASSUMES:
        value = getattr(processor, setting, assumed)
        value = int(value) if setting == "resample" and value is not None else value
        if value != assumed:
            found.append((setting, value, genai))
    return found


def image_processor_config(processor: Any) -> dict[str, Any]:
    """onnxruntime-extensions' image processing for Qwen2.5-VL with the numbers of
    ``processor``, the checkpoint's ``Qwen2VLImageProcessor``: decode, RGB, smart resize
    between its minimum and maximum pixels, rescale, normalize, patches."""
    patch, merge = processor.patch_size, processor.merge_size
    resize = {
        "width": 540,  # unused with smart_resize: the size comes from the image
        "height": 360,
        "smart_resize": 1,
        "min_pixels": _pixels(processor, "min_pixels", "shortest_edge"),
        "max_pixels": _pixels(processor, "max_pixels", "longest_edge"),
        "patch_size": patch,
        "merge_size": merge,
    }
    operations = [
        {"name": "decode_image", "type": "DecodeImage", "attrs": {"color_space": "RGB"}},
        {"name": "convert_to_rgb", "type": "ConvertRGB"},
        {"name": "resize", "type": "Resize", "attrs": resize},
        {
            "name": "rescale",
            "type": "Rescale",
            "attrs": {"rescale_factor": float(processor.rescale_factor)},
        },
        {
            "name": "normalize",
            "type": "Normalize",
            "attrs": {
                "mean": [float(v) for v in processor.image_mean],
                "std": [float(v) for v in processor.image_std],
                "qwen2_5_vl": 1,
            },
        },
        {
            "name": "patch_image",
            "type": "PatchImage",
            "attrs": {
                "patch_size": patch,
                "temporal_patch_size": processor.temporal_patch_size,
                "merge_size": merge,
            },
        },
    ]
    return {
        "processor": {
            "name": "qwen2_5_image_processor",
            "transforms": [{"operation": op} for op in operations],
        }
    }
