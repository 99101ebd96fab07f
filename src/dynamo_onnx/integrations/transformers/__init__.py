"""transformers' models as a model family: everything the exporter knows of transformers.

Its KV caches as inputs and outputs (``caches.py``: a cache taken as its tensors, named
``past_key_values.0.key`` / ``present.0.key`` as onnxruntime-genai and Optimum name them),
the forms a cache's spec takes (``spec_forms.py``) and its default dim names
(``dynamic_shapes.py``, home of the public ``cache_dynamic_shapes``), the names of a program
captured with the cache registered as a pytree node (``spec_names.py``), mixture-of-experts
layers traced with an implementation that exports (``experts.py``), rotary embeddings
that branch on the positions traced with ``torch.where`` (``rotary.py``), and the
``genai_config.json`` written beside a causal LM (``genai.py``). Nothing here imports
transformers: its objects are recognized by duck typing.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dynamo_onnx.integrations.transformers import genai, spec_names
from dynamo_onnx.integrations.transformers.caches import (
    CACHE_PARAMETERS,
    CacheInputs,
    cache_parts,
    is_cache,
)
from dynamo_onnx.integrations.transformers.dynamic_shapes import (
    cache_dynamic_shapes,
    flat_spec,
    widen_decoding_example,
)
from dynamo_onnx.integrations.transformers.experts import traceable_experts
from dynamo_onnx.integrations.transformers.qwen2_5_vl import traceable_vision
from dynamo_onnx.integrations.transformers.rotary import traceable_rotary
from dynamo_onnx.integrations.transformers.shared_buffer import genai_search_options
from dynamo_onnx.integrations.transformers.spec_forms import CACHE_EXAMPLE, cache_specs
from dynamo_onnx.onnx_tools.attention import windowed_present

if TYPE_CHECKING:
    import onnx_ir as ir
    import torch

    from dynamo_onnx.diagnostics import DiagnosticContext
    from dynamo_onnx.integrations.base import FamilyInputs, RuntimeStep
    from dynamo_onnx.registry import OnnxRegistry

__all__ = ["TransformersFamily", "cache_dynamic_shapes"]


def _fused_for_onnxruntime(model: ir.Model) -> bool:
    """Whether ``model`` went through the fusions for ONNX Runtime: an attention, a norm or
    a rotary embedding of its operators (``com.microsoft``) or a packed MatMul in it."""
    return any(node.domain == "com.microsoft" for node in model.graph)


def _unfused_sliding(model: ir.Model, inputs: CacheInputs) -> list[int]:
    """The sliding-window layers whose present is not a windowed GroupQueryAttention's
    whole cache: each hands back its last window - 1 tokens."""
    windowed = {v.name for v in model.graph.outputs if windowed_present(v)}
    return [i for i in inputs.sliding_layers() if f"present.{i}.key" not in windowed]


def _config(model: Any) -> Any:
    """The transformers configuration of ``model`` (a ``PretrainedConfig``), or None."""
    config = getattr(model, "config", None)
    return config if getattr(config, "model_type", None) is not None else None


@contextlib.contextmanager
def _capturing(
    ctx: DiagnosticContext, module: torch.nn.Module, registry: OnnxRegistry | None
) -> Iterator[None]:
    """Experts, rotary embeddings and vision towers traced with implementations that
    export."""
    with (
        traceable_experts(ctx, module, registry),
        traceable_rotary(ctx, module),
        traceable_vision(ctx, module),
    ):
        yield


class TransformersFamily:
    """transformers' models and caches (:class:`~dynamo_onnx.integrations.base.ModelFamily`)."""

    name = "transformers"

    def recognizes(self, value: Any) -> bool:
        return is_cache(value)

    def takes_structured_inputs(self, model: Any, signature: inspect.Signature) -> bool:
        """A model whose ``forward`` takes a cache may return one it made itself
        (``use_cache`` defaults to its config's): its outputs are taken as tensors too."""
        return bool(self.facts(model).get("use_cache")) and any(
            name in signature.parameters for name in CACHE_PARAMETERS
        )

    def inputs(self, signature: inspect.Signature, bound: Mapping[str, Any]) -> CacheInputs:
        return CacheInputs(signature, bound)

    def parameter_aliases(self, given: Mapping[str, Any]) -> dict[str, str]:
        """The other name of the cache parameter (``past_key_values`` for ``cache``,
        transformers 5.24's new name, and back)."""
        found = [n for n in CACHE_PARAMETERS if n in given and is_cache(given[n])]
        return {other: found[0] for other in CACHE_PARAMETERS if found and other not in given}

    def value_specs(self, entry: Any, value: Any, parameter: str) -> list[Any]:
        return cache_specs(entry, value, parameter)

    def spec_example(self, parameter: str) -> str:
        del parameter  # every cache's tensors take the same entry
        return CACHE_EXAMPLE

    def flat_spec(self, spec: Any, bound: Mapping[str, Any], inputs: FamilyInputs) -> Any:
        assert isinstance(inputs, CacheInputs)
        return flat_spec(spec, bound, inputs)

    def widen_example(
        self, flat: Mapping[str, torch.Tensor], inputs: FamilyInputs, spec: Mapping[str, Any]
    ) -> tuple[dict[str, torch.Tensor], list[tuple[str, int]]]:
        return widen_decoding_example(flat, inputs.names, spec)

    def capturing(
        self, ctx: DiagnosticContext, module: torch.nn.Module, registry: OnnxRegistry | None
    ) -> contextlib.AbstractContextManager[None]:
        return _capturing(ctx, module, registry)

    def input_names(self, paths: Sequence[tuple[str, ...]]) -> list[str | None] | None:
        return spec_names.input_names(paths)

    def output_names(self, paths: Sequence[tuple[str, ...]]) -> list[str] | None:
        return spec_names.output_names(paths)

    def output_leaves(self, value: Any) -> Any | None:
        """A cache as its tensors (as the export returns them), a ``ModelOutput`` as its
        tuple."""
        if is_cache(value):
            return [t for _, t in cache_parts(value)]
        if hasattr(value, "to_tuple"):
            return value.to_tuple()
        return None

    def files_beside(
        self, model: ir.Model, reference: Any, inputs: FamilyInputs | None, filename: str
    ) -> dict[str, str]:
        """``genai_config.json`` for a causal LM exported with its cache (onnxruntime-genai
        then runs the folder as it is)."""
        config = _config(reference)
        if not isinstance(inputs, CacheInputs) or config is None:
            return {}
        search = genai_search_options(model)
        if _unfused_sliding(model, inputs):
            # onnxruntime-genai gives every layer the whole cache; a sliding layer's
            # present holds its window until it is fused into GroupQueryAttention (DO510)
            return {}
        generation = getattr(reference, "generation_config", None)
        found = genai.genai_config(model, config, filename, generation)
        if found is None:
            return {}
        # a model fused for ONNX Runtime may share the cache's past and present buffers
        found["search"].update(search)
        return {genai.FILENAME: genai.dumps(found)}

    def files_not_beside(
        self, model: ir.Model, reference: Any, inputs: FamilyInputs | None, filename: str
    ) -> dict[str, str]:
        """``genai_config.json`` for a causal LM with sliding-window layers not fused for
        ONNX Runtime: onnxruntime-genai would refuse the folder."""
        config = _config(reference)
        if (
            not isinstance(inputs, CacheInputs)
            or config is None
            or not _unfused_sliding(model, inputs)
            or genai.genai_config(model, config, filename) is None
        ):
            return {}
        if not _fused_for_onnxruntime(model):
            return {
                genai.FILENAME: "the model's sliding-window layers hand back their last "
                "window - 1 tokens as their present, and onnxruntime-genai gives every layer's "
                "present the whole sequence (it refuses the folder); optimized for ONNX Runtime "
                '(`optimize="onnxruntime"`, the CLI\'s `--optimize-for onnxruntime`) they keep '
                "their whole cache in GroupQueryAttention and the file is written"
            }
        unfused = _unfused_sliding(model, inputs)
        return {
            genai.FILENAME: "the model is optimized for ONNX Runtime, but its sliding-window "
            f"layer(s) {', '.join(map(str, unfused))} did not fuse into GroupQueryAttention "
            "with their window (the optimization's DO503/DO511 at each attention's line say "
            "why): they hand back their last window - 1 tokens as their present, and "
            "onnxruntime-genai gives every layer's present the whole sequence (it refuses "
            "the folder); `export-llm` exports such a model as the plain model whose every "
            "layer keeps its whole cache, which it runs"
        }

    def runtime_steps(self, reference: Any, runtime: str) -> list[RuntimeStep]:
        """For the fusions for ONNX Runtime of a transformers model: Gemma 2's soft-capped
        attention, a sliding layer's cache made whole and named as the full layers'
        (:func:`~dynamo_onnx.integrations.transformers.ort_steps.onnxruntime_steps`)."""
        if runtime != "onnxruntime" or _config(reference) is None:
            return []
        # imported here: its rewrite rules need onnxscript's rewriter, which an export
        # that does not optimize never loads
        from dynamo_onnx.integrations.transformers.ort_steps import onnxruntime_steps

        return onnxruntime_steps()

    def facts(self, model: Any) -> dict[str, Any]:
        """``model_type``, ``use_cache``, the sliding window of a transformers model and its
        ``max_positions`` (``max_position_embeddings``: the rows of the rotary caches the
        fusions for ONNX Runtime write)."""
        config = _config(model)
        if config is None:
            return {}
        positions = getattr(config, "max_position_embeddings", None)
        return {
            "model_type": config.model_type,
            "use_cache": bool(getattr(config, "use_cache", False)),
            "sliding_window": getattr(config, "sliding_window", None),
            "max_positions": positions if isinstance(positions, int) else None,
        }
