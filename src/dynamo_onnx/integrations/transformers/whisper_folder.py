"""A Whisper checkpoint on disk, and the files onnxruntime-genai's ``whisper`` type reads.

What ``export-llm WHISPER_DIR`` needs besides the two models (:mod:`.whisper`): the model
loaded offline, its feature extractor read the way the checkpoint carries it
(``preprocessor_config.json``, or ``processor_config.json`` as transformers 5's
``WhisperProcessor.save_pretrained`` writes it), ``genai_config.json`` naming both models'
inputs and outputs, and ``audio_processor_config.json``: the feature extraction genai
performs (an STFT, then Whisper's log-mel), with its numbers taken from the checkpoint's
``WhisperFeatureExtractor`` rather than written in.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import warnings
from typing import Any

from dynamo_onnx.diagnostics import DiagnosticContext
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
from dynamo_onnx.integrations.transformers.whisper import (
    DECODER_FILENAME,
    ENCODER_FILENAME,
    DecoderNames,
    WhisperDecoderStep,
    WhisperEncoderStep,
    decoder_example,
    decoder_shapes,
    encoder_example,
    encoder_shapes,
)

__all__ = [
    "AUDIO_PROCESSOR_FILENAME",
    "GENAI_TYPE",
    "PROCESSOR_FILES",
    "SAMPLING_RATE",
    "WhisperFolder",
    "audio_processor_config",
    "genai_config",
    "is_whisper",
    "load",
]

#: onnxruntime-genai's model type for an encoder-decoder speech model of Whisper's contract.
GENAI_TYPE = "whisper"
AUDIO_PROCESSOR_FILENAME = "audio_processor_config.json"
#: The feature extractor's files a checkpoint carries, copied beside the models.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
#: The rate onnxruntime-extensions' ``AudioDecoder`` resamples every clip to.
SAMPLING_RATE = 16000


@dataclasses.dataclass(frozen=True)
class WhisperFolder:
    """A Whisper checkpoint loaded from ``path``: the model (float32, eval mode), its
    feature extractor, and the tokenizer and processor files to copy beside the models."""

    path: pathlib.Path
    model: Any  # WhisperForConditionalGeneration
    feature_extractor: Any  # WhisperFeatureExtractor
    files_to_copy: tuple[pathlib.Path, ...]

    genai_type = GENAI_TYPE
    part_filenames = (ENCODER_FILENAME, DECODER_FILENAME)

    @property
    def names(self) -> DecoderNames:
        return DecoderNames(self.model.config.decoder_layers)

    def parts(self) -> tuple[ModelPart, ...]:
        """The encoder, then the decoder, as onnxruntime-genai's ``whisper`` type runs them."""
        config, names = self.model.config, self.names
        encoder = ModelPart(
            ENCODER_FILENAME,
            WhisperEncoderStep(self.model).eval(),
            encoder_example(config),
            names.encoder_inputs(),
            names.encoder_outputs(),
            encoder_shapes(),
        )
        decoder = ModelPart(
            DECODER_FILENAME,
            WhisperDecoderStep(self.model).eval(),
            decoder_example(config),
            names.decoder_inputs(),
            names.decoder_outputs(),
            decoder_shapes(names),
        )
        return encoder, decoder

    def runtime_files(self) -> dict[str, str]:
        """The runtime's configuration files, by name: ``genai_config.json`` and
        ``audio_processor_config.json``."""
        return {
            GENAI_FILENAME: dumps(genai_config(self.model.config, self.names)),
            AUDIO_PROCESSOR_FILENAME: dumps(audio_processor_config(self.feature_extractor)),
        }


def is_whisper(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a Whisper checkpoint (its ``config.json`` says so)."""
    return is_model_type(path, GENAI_TYPE)


def load(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> WhisperFolder:
    """The Whisper checkpoint in ``path``, loaded without a download; a folder transformers
    cannot load, one without a feature extractor or one whose extractor does not sample
    at genai's rate fails with DO507 and the reason."""
    folder = pathlib.Path(path)
    problem = folder_problem(folder)
    if problem is None:
        import torch  # the CLI's parser imports this module
        import transformers

        try:
            with quiet_loading(transformers):
                model = transformers.WhisperForConditionalGeneration.from_pretrained(
                    folder, local_files_only=True, dtype=torch.float32
                )
                with warnings.catch_warnings():  # its mel filters' remarks: not ours to print
                    warnings.simplefilter("ignore")
                    extractor = transformers.WhisperFeatureExtractor.from_pretrained(
                        folder, local_files_only=True
                    )
        except (OSError, ValueError, KeyError, ImportError) as exc:
            problem = first_line(exc)
        else:
            if extractor.sampling_rate != SAMPLING_RATE:
                problem = (
                    f"its feature extractor samples at {extractor.sampling_rate} Hz, and "
                    f"onnxruntime-genai's audio decoder gives {SAMPLING_RATE} Hz"
                )
    if problem is not None:
        ctx.fail("hf-folder-unusable", InvalidOptionValueError, path=os.fspath(path), cause=problem)
    names = TOKENIZER_FILES + PROCESSOR_FILES
    files = tuple(folder / name for name in names if (folder / name).is_file())
    return WhisperFolder(folder, model.eval(), extractor, files)


def _part(filename: str, config: Any, inputs: dict, outputs: dict, layers: int, heads: int) -> dict:
    return {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": filename,
        "head_size": config.d_model // heads,
        "hidden_size": config.d_model,
        "inputs": inputs,
        "outputs": outputs,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": heads,
    }


def genai_config(config: Any, names: DecoderNames) -> dict[str, Any]:
    """``genai_config.json`` for the two models of a Whisper ``config``, under ``names``."""
    encoder = _part(
        ENCODER_FILENAME,
        config,
        {"audio_features": names.audio_features},
        {
            "encoder_hidden_states": names.hidden_states,
            "cross_present_key_names": names.present_key_cross,
            "cross_present_value_names": names.present_value_cross,
        },
        config.encoder_layers,
        config.encoder_attention_heads,
    )
    decoder = _part(
        DECODER_FILENAME,
        config,
        {
            "input_ids": names.input_ids,
            "past_key_names": names.past_key_self,
            "past_value_names": names.past_value_self,
            "cross_past_key_names": names.past_key_cross,
            "cross_past_value_names": names.past_value_cross,
        },
        {
            "logits": names.logits,
            "present_key_names": names.present_key_self,
            "present_value_names": names.present_value_self,
        },
        config.decoder_layers,
        config.decoder_attention_heads,
    )
    tokens = {
        "bos_token_id": token_ids(config.bos_token_id),
        "eos_token_id": token_ids(config.eos_token_id),
        "pad_token_id": token_ids(config.pad_token_id),
    }
    context = config.max_target_positions
    return {
        "model": {
            **{k: v for k, v in tokens.items() if v is not None},
            "context_length": context,
            "decoder": decoder,
            "encoder": encoder,
            "type": GENAI_TYPE,
            "vocab_size": config.vocab_size,
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
            "past_present_share_buffer": False,  # the self-attention presents grow
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }


def audio_processor_config(extractor: Any) -> dict[str, Any]:
    """``audio_processor_config.json``: onnxruntime-extensions' steps (decode the audio,
    an STFT, Whisper's log-mel) with the numbers of ``extractor``, a
    ``WhisperFeatureExtractor``: its FFT size, hop, clip length and mel bins. The STFT's
    window is its own periodic Hann window, the one transformers uses
    (``window_function(n_fft, "hann")``): the builder writes it as a ``_comment``, which
    the operator does not read, so it is not written here."""
    stft = {
        "n_fft": extractor.n_fft,
        "frame_length": extractor.n_fft,
        "hop_length": extractor.hop_length,
    }
    mel = {
        "chunk_size": extractor.chunk_length,
        "hop_length": extractor.hop_length,
        "n_fft": extractor.n_fft,
        "n_mel": extractor.feature_size,
    }
    operations = [
        {"name": "audio_decoder", "type": "AudioDecoder"},
        {"name": "STFT", "type": "STFTNorm", "attrs": stft},
        {"name": "log_mel_spectrogram", "type": "LogMelSpectrum", "attrs": mel},
    ]
    return {"feature_extraction": {"sequence": [{"operation": op} for op in operations]}}
