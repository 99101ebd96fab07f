"""A causal LM from a Hugging Face folder on disk, ready to export with its KV cache.

What ``export-llm HF_DIR`` needs from transformers, and nothing else: the model loaded
offline (``local_files_only=True``, as onnxruntime-genai's builder and Optimum take a local
folder), example inputs of one decoding step with a ``DynamicCache`` past (the export then
serves prefill and decoding), and the tokenizer's files to copy beside the ONNX model so
that onnxruntime-genai's ``og.Tokenizer`` works on the folder. The load is checked, not
trusted (``checkpoint.py``): a folder whose model transformers had to complete or cut is
refused before anything is written.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

from dynamo_onnx.diagnostics import DiagnosticContext
from dynamo_onnx.errors import InvalidOptionValueError, WeightsMismatchError
from dynamo_onnx.integrations.transformers import genai, genai_check
from dynamo_onnx.integrations.transformers.caches import cache_parameter, with_full_layers
from dynamo_onnx.integrations.transformers.checkpoint import (
    architecture_problem,
    config_problem,
    key_report,
)
from dynamo_onnx.integrations.transformers.loading import first_line, folder_problem, quiet_loading

__all__ = [
    "TOKENIZER_FILES",
    "HFFolder",
    "example_inputs",
    "example_new_tokens",
    "fill_ids_from_tokenizer",
    "files_to_copy",
    "load",
]

#: The files a tokenizer is saved as (``tokenizer.save_pretrained``) and onnxruntime-genai
#: reads; those present in the folder are copied beside the model.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
#: The generation settings ``save_pretrained`` writes: read into the runtime's search
#: options and copied beside the model.
GENERATION_CONFIG = "generation_config.json"
#: The example step: a past of PAST tokens then NEW tokens, for BATCH sequences. Neither
#: length is 0 or 1, which torch.export would make constants; a model with sliding windows
#: takes more new tokens (:func:`example_new_tokens`).
BATCH, NEW, PAST = 2, 3, 4


@dataclasses.dataclass(frozen=True)
class HFFolder:
    """A causal LM loaded from ``path``, the inputs to export it with, and the tokenizer
    files found beside it (to copy beside the exported model)."""

    path: pathlib.Path
    model: Any  # a transformers PreTrainedModel, in eval mode
    inputs: dict[str, Any]  # forward's keyword inputs: a decoding step with its cache
    files_to_copy: tuple[pathlib.Path, ...]
    #: The runtime the output folder is for, and the file it needs to run it.
    runtime: str = genai_check.RUNTIME
    runtime_file: str = genai.FILENAME

    def runtime_unavailable(self) -> str | None:
        """Why the runtime cannot be asked to run a folder here (not installed, or not
        importable), None when it can."""
        return genai_check.unavailable()

    def runtime_problem(self, folder: pathlib.Path) -> str | None:
        """The runtime's message when it cannot generate a token from ``folder`` after the
        example prompt's first :data:`NEW` tokens (None when it generates): a
        sliding-window model's example crosses its window, which may be longer than the
        context the runtime allows. Asked once :meth:`runtime_unavailable` is None."""
        return genai_check.generation_problem(folder, self.prompt())

    def prompt(self) -> list[int]:
        """The runtime check's prompt: the example's first :data:`NEW` token ids."""
        return [int(t) for t in self.inputs["input_ids"][0][:NEW]]

    def with_whole_windows(self) -> HFFolder | None:
        """This folder with an example cache whose sliding-window layers are full layers
        (:func:`~dynamo_onnx.integrations.transformers.caches.with_full_layers`), or None
        when the model has no sliding layer.

        The plain fallback for onnxruntime-genai: exported with it, every layer's present
        is its past and the new tokens (genai's contract) and the window is the mask's,
        where a sliding layer traced as transformers runs it hands back only its last
        ``window - 1`` tokens until the fusion into GroupQueryAttention makes it whole."""
        parameter = cache_parameter(self.model)
        cache = self.inputs.get(parameter)
        full = with_full_layers(cache) if cache is not None else None
        if full is None:
            return None
        return dataclasses.replace(self, inputs={**self.inputs, parameter: full})


def example_inputs(
    model: Any, batch: int = BATCH, new: int | None = None, past: int = PAST
) -> dict:
    """``forward``'s inputs for ``new`` tokens after a past of ``past``: what a
    runtime feeds at each step, so the ONNX model takes the cache as inputs. ``new``
    defaults to :func:`example_new_tokens` of the model's cache."""
    import torch  # the module is imported by the CLI's parser too
    import transformers

    config = model.config
    if new is None:
        new = example_new_tokens(transformers.DynamicCache(config=config), past)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    cache = transformers.DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        shape = (batch, kv_heads, past, head_dim)
        cache.update(torch.randn(shape), torch.randn(shape), layer)
    return {
        "input_ids": torch.randint(1, config.vocab_size, (batch, new)),
        "attention_mask": torch.ones(batch, past + new, dtype=torch.int64),
        "position_ids": torch.arange(past, past + new).expand(batch, new),
        cache_parameter(model): cache,
        "use_cache": True,
    }


def _windows(cache: Any) -> set[int]:
    """The windows of a cache's sliding layers (a chunked layer's chunk too: transformers
    builds it as a sliding layer of that window)."""
    sizes = (getattr(layer, "sliding_window", None) for layer in getattr(cache, "layers", ()))
    return {size for size in sizes if isinstance(size, int) and size > 0}


def example_new_tokens(cache: Any, past: int = PAST) -> int:
    """The new tokens of the example step after ``past``: :data:`NEW`, or, for a cache with
    windows, enough that the step crosses the largest window, no length of the step being
    a window, one less or one more.

    torch.export keeps the example's side of every test on a length: a sliding layer traced
    with fewer tokens than its window never cuts its cache (a window of 8 after a past of 4
    and 3 new tokens: a model that runs at a total of 7 only), and an example length equal
    to a window makes that size a constant. A step past the window traces the cut, which
    the fusion for ONNX Runtime turns into GroupQueryAttention's ``local_window_size``."""
    windows = _windows(cache)
    if not windows:
        return NEW
    near = {size + shift for size in windows for shift in (-1, 0, 1)}
    new = max(NEW, max(windows) + 2 - past)
    while new in near or past + new in near:
        new += 1
    return new


def _load(folder: pathlib.Path) -> tuple[Any, str | None, str | None]:
    """The model transformers builds from ``folder`` (or None), why it is not the
    checkpoint's causal decoder (DO507), and what its weights lack or hold beyond it."""
    import torch
    import transformers

    with quiet_loading(transformers):
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        refused = config_problem(config)
        if refused is not None:
            return None, refused, None
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            folder,
            local_files_only=True,
            dtype=torch.float32,
            output_loading_info=True,
            # a tensor of another shape is reported (DO513, naming it), not raised
            ignore_mismatched_sizes=True,
        )
    report = key_report(
        info.get("missing_keys", ()),
        info.get("unexpected_keys", ()),
        info.get("mismatched_keys", ()),
        getattr(model, "all_tied_weights_keys", None) or {},
    )
    refused = architecture_problem(model, report)
    if refused is not None:
        return None, refused, None
    problem = report.problem
    return model, None, problem and problem + report.tied_note


#: The special ids a runtime's configuration takes from the tokenizer when neither the
#: generation config nor the model config gives them.
TOKENIZER_IDS = ("bos_token_id", "pad_token_id")


def fill_ids_from_tokenizer(model: Any, folder: pathlib.Path) -> None:
    """Give ``model.generation_config`` the bos and pad ids of the tokenizer saved in
    ``folder`` where neither config gives one (onnxruntime-genai pads a batch with the
    pad id), so the runtime's configuration is the checkpoint's."""
    generation = getattr(model, "generation_config", None)
    wanted = [
        n
        for n in TOKENIZER_IDS
        if generation is not None
        and getattr(generation, n, None) is None
        and getattr(model.config, n, None) is None
    ]
    if not wanted or not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return
    import transformers

    try:
        with quiet_loading(transformers):
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError):  # no usable tokenizer: config ids only
        return
    for name in wanted:
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            setattr(generation, name, value)


def load(ctx: DiagnosticContext, path: str | os.PathLike[str]) -> HFFolder:
    """The causal LM saved in ``path`` (float32, eval mode), loaded without a download.
    A folder that is no causal decoder transformers loads offline fails with DO507 and
    the reason; weights that are not the model's (missing, unexpected, of another shape)
    with DO513, naming them."""
    folder = pathlib.Path(path)
    problem, mismatch = folder_problem(folder), None
    if problem is None:
        try:
            model, problem, mismatch = _load(folder)
        except (OSError, ValueError, KeyError, ImportError, RuntimeError) as exc:
            problem = first_line(exc)
    if problem is not None:
        ctx.fail("hf-folder-unusable", InvalidOptionValueError, path=os.fspath(path), cause=problem)
    if mismatch is not None:
        ctx.fail(
            "checkpoint-mismatch", WeightsMismatchError, path=os.fspath(path), tensors=mismatch
        )
    model = model.eval()
    fill_ids_from_tokenizer(model, folder)
    return HFFolder(folder, model, example_inputs(model), files_to_copy(folder))


def files_to_copy(folder: pathlib.Path) -> tuple[pathlib.Path, ...]:
    """The tokenizer's files and the generation config found in ``folder``, to copy beside
    the exported model."""
    names = (*TOKENIZER_FILES, GENERATION_CONFIG)
    return tuple(folder / name for name in names if (folder / name).is_file())
