"""Is the model transformers built from a folder the checkpoint's model? Decided from
transformers' loading report (the keys it found missing, unexpected or of another shape)
and the model's own structure, never from what transformers prints.

The key check is a plain function over key sets, so that a loader that reads the weights
another way (streamed from safetensors) asks the same question with its own sets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = ["KeyReport", "architecture_problem", "config_problem", "key_report"]

#: How many tensor names a message lists before it counts the rest.
LISTED = 6


def _listed(keys: Iterable[str]) -> str:
    names = sorted(keys)
    shown = ", ".join(f"`{n}`" for n in names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


@dataclasses.dataclass(frozen=True)
class KeyReport:
    """What the checkpoint lacks or holds beyond the model, and the weights transformers
    filled on purpose from another one (a tied LM head), which are not missing."""

    missing: frozenset[str]
    unexpected: frozenset[str]
    mismatched: Mapping[str, str]  # name -> "stored [32], model [64]" (or "")
    tied: Mapping[str, str]  # filled weight -> the stored weight it is tied to

    @property
    def problem(self) -> str | None:
        """The tensors that make the model another one than the checkpoint's, or None."""
        parts = []
        if self.missing:
            parts.append(
                f"{len(self.missing)} tensor(s) the model needs are not in it ("
                + _listed(self.missing)
                + "): transformers gave them a random initialization"
            )
        if self.mismatched:
            names = sorted(self.mismatched)
            shown = ", ".join(
                f"`{n}`" + (f" {self.mismatched[n]}" if self.mismatched[n] else "")
                for n in names[:LISTED]
            )
            more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
            parts.append(
                f"{len(names)} tensor(s) have another shape than the config asks ({shown}{more})"
            )
        if self.unexpected:
            parts.append(
                f"{len(self.unexpected)} tensor(s) in it belong to no part of the model ("
                + _listed(self.unexpected)
                + ")"
            )
        return "; ".join(parts) or None

    @property
    def tied_note(self) -> str:
        """A sentence on the tied weights (empty when there are none)."""
        if not self.tied:
            return ""
        pairs = ", ".join(f"`{k}` is `{v}`" for k, v in sorted(self.tied.items()))
        return f" (not counted: tied weights the config asks for, {pairs})"


def _shape(shape: Any) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _mismatch(entry: Any) -> tuple[str, str]:
    """(name, "stored [32], model [64]") from transformers' ``(name, stored, expected)``."""
    if isinstance(entry, (tuple, list)) and len(entry) == 3:
        name, stored, expected = entry
        return str(name), f"(stored {_shape(stored)}, model {_shape(expected)})"
    if isinstance(entry, (tuple, list)):
        return str(entry[0]), ""
    return str(entry), ""


def key_report(
    missing: Collection[str],
    unexpected: Collection[str],
    mismatched: Collection[Any],
    tied: Mapping[str, str],
) -> KeyReport:
    """The report of a load from its key sets: ``missing``, ``unexpected`` and
    ``mismatched`` as transformers' ``output_loading_info`` gives them (a mismatched entry
    may be a key or a tuple ``(key, stored shape, model shape)``), ``tied`` the model's tied weights (filled
    weight -> source). A missing weight whose source was loaded is tied, not missing."""
    absent = set(missing)
    filled = {k: v for k, v in tied.items() if k in absent and v not in absent}
    return KeyReport(
        frozenset(absent - set(filled)),
        frozenset(unexpected),
        dict(_mismatch(m) for m in mismatched),
        {k: v for k, v in tied.items() if k not in absent or k in filled},
    )


def config_problem(config: Any) -> str | None:
    """Why a checkpoint of ``config`` cannot be exported as one decoder, before its weights
    are read: an encoder-decoder (Whisper, T5, BART) loads as its decoder alone."""
    if getattr(config, "is_encoder_decoder", False):
        names = ", ".join(getattr(config, "architectures", None) or []) or config.model_type
        return (
            f"it is an encoder-decoder model ({config.model_type}: {names}), and "
            "AutoModelForCausalLM would load its decoder alone, without the encoder it needs; "
            "export-llm makes decoder-only folders: export the model with dynamo_onnx.export "
            "(docs/llm.md shows Whisper's three models)"
        )
    return None


def architecture_problem(model: Any, report: KeyReport) -> str | None:
    """Why ``model`` (what AutoModelForCausalLM built) is not the checkpoint's causal
    decoder: its self-attention is not causal (an encoder such as BERT, whose
    ``is_decoder`` is False), or transformers had to create its LM head."""
    bidirectional = [
        name
        for name, module in model.named_modules()
        if getattr(module, "is_causal", None) is False
        and not getattr(module, "is_cross_attention", False)
    ]
    if bidirectional:
        return (
            f"{type(model).__name__} attends both ways (`{bidirectional[0]}` is not causal"
            + (": config.is_decoder is False" if hasattr(model.config, "is_decoder") else "")
            + "): it is an encoder, not a decoder that generates with a KV cache"
        )
    prefix = getattr(model, "base_model_prefix", "") or ""
    head = sorted(k for k in report.missing if prefix and not k.startswith(prefix + "."))
    if head:
        saved = ", ".join(getattr(model.config, "architectures", None) or []) or "no head"
        return (
            f"the checkpoint holds no LM head ({_listed(head)} missing; it was saved from "
            f"{saved}), so transformers created a random one for {type(model).__name__}"
        )
    return None
