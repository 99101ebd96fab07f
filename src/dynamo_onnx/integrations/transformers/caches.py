"""transformers' KV caches as inputs and outputs of an export, with no registration.

A ``DynamicCache`` (or an ``EncoderDecoderCache`` of two) is a Python object torch.export
cannot take as an input. The export takes its tensors instead, one input per layer's keys
and values, named as onnxruntime-genai and Optimum name them (``past_key_values.0.key``),
and the model is called with a cache rebuilt from those tensors while it is traced: no
pytree registration, nothing global changed. Outputs that are caches come back as their
tensors (``present.0.key``). Recognized by duck typing (the class comes from
``transformers``), so nothing here imports transformers.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.export import pytree

from dynamo_onnx.io.inputs import spread
from dynamo_onnx.onnx_tools.attention import windowed_present

__all__ = [
    "CACHE_PARAMETERS",
    "CacheInputs",
    "cache_parameter",
    "cache_parts",
    "copy_caches",
    "is_cache",
    "output_parts",
    "rebuild_cache",
    "with_full_layers",
]


def is_cache(value: Any) -> bool:
    """Whether ``value`` is a transformers cache (a subclass of ``transformers...Cache``)."""
    return any(
        c.__name__ == "Cache" and c.__module__.startswith("transformers.")
        for c in type(value).__mro__
    )


def _is_encoder_decoder(cache: Any) -> bool:
    return hasattr(cache, "self_attention_cache") and hasattr(cache, "cross_attention_cache")


def _layer_parts(cache: Any, infix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    for index, layer in enumerate(cache.layers):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise ValueError(
                f"layer {index} of the {type(cache).__name__} holds no tensors: give the "
                "example cache a past for every layer (a length of 0 works)"
            )
        yield f"{index}{infix}.key", keys
        yield f"{index}{infix}.value", values


def cache_parts(cache: Any) -> list[tuple[str, torch.Tensor]]:
    """(suffix, tensor) of every tensor of the cache, in layer order: ``0.key``,
    ``0.value``... (``0.decoder.key``, ``0.encoder.key`` for an encoder-decoder cache)."""
    if _is_encoder_decoder(cache):
        decoder = dict(_layer_parts(cache.self_attention_cache, ".decoder"))
        encoder = dict(_layer_parts(cache.cross_attention_cache, ".encoder"))
        layers = len(cache.self_attention_cache.layers)
        parts = []
        for i in range(layers):
            for side in (decoder, encoder):
                parts += [(k, v) for k, v in side.items() if k.startswith(f"{i}.")]
        return parts
    return list(_layer_parts(cache))


def _filled(template: Any, tensors: Mapping[str, torch.Tensor], infix: str) -> Any:
    """A copy of a layered cache whose layers hold ``tensors`` (by suffix)."""
    cache = copy.copy(template)
    cache.layers = []
    # The tokens seen so far: a full-attention layer holds them all; a sliding one only
    # its window's (transformers counts the rest in ``cumulative_length``).
    full = [i for i, layer in enumerate(template.layers) if not getattr(layer, "is_sliding", False)]
    seen = tensors[f"{full[0]}{infix}.key"].shape[-2] if full else None
    for index, layer in enumerate(template.layers):
        filled = copy.copy(layer)
        keys, values = tensors[f"{index}{infix}.key"], tensors[f"{index}{infix}.value"]
        filled.keys, filled.values = keys, values
        filled.dtype, filled.device = keys.dtype, keys.device
        filled.is_initialized = True
        if getattr(layer, "is_sliding", False) and hasattr(layer, "sliding_window"):
            _sliding(filled, seen if seen is not None else keys.shape[-2])
        else:
            # transformers asks ``keys.numel() == 0`` to tell an empty past, a branch on
            # the size that would make the past length >= 1; the length itself says it,
            # and one model serves prefill (past 0) and decoding.
            filled.get_seq_length = lambda _keys=keys: _keys.shape[-2]
        cache.layers.append(filled)
    return cache


def _sliding(layer: Any, seen: Any) -> None:
    """A sliding-window layer that has seen ``seen`` tokens (a size of the export).

    transformers sizes its mask with ``if seen >= window`` on Python ints: traced, that
    branch would fix the model to one side of the window. The same sizes as min and max
    of symbolic ints hold on both sides."""
    window = layer.sliding_window
    layer.cumulative_length = seen
    layer.get_seq_length = lambda: seen

    def get_mask_sizes(query_length: int) -> tuple[int, int]:
        return torch.sym_min(seen, window - 1) + query_length, torch.sym_max(seen - window + 1, 0)

    layer.get_mask_sizes = get_mask_sizes


def rebuild_cache(template: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """A cache like ``template`` (same classes, layer kinds and settings) holding
    ``tensors``, by the suffixes of :func:`cache_parts`. The template is not changed."""
    if _is_encoder_decoder(template):
        rebuilt = copy.copy(template)
        rebuilt.self_attention_cache = _filled(template.self_attention_cache, tensors, ".decoder")
        rebuilt.cross_attention_cache = _filled(template.cross_attention_cache, tensors, ".encoder")
        if hasattr(rebuilt, "is_updated"):
            rebuilt.is_updated = dict.fromkeys(
                range(len(template.cross_attention_cache.layers)), True
            )
        return rebuilt
    return _filled(template, tensors, "")


def copy_caches(values: Any) -> Any:
    """``values`` (args, kwargs, nested) with every cache deep-copied: running the model
    grows a cache in place, and the caller's must not change."""
    if is_cache(values):
        return copy.deepcopy(values)
    if isinstance(values, dict):
        return {k: copy_caches(v) for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return type(values)(copy_caches(v) for v in values)
    return values


def output_parts(output: Any) -> list[tuple[str, Any]]:
    """A model's output as (name, value) pairs, caches as their tensors named as runtimes
    expect (``present.0.key``); a ``ModelOutput`` or dict by its keys."""
    if hasattr(output, "items") and hasattr(output, "to_tuple"):
        items = list(output.items())
    elif isinstance(output, Mapping):
        items = list(output.items())
    elif isinstance(output, (list, tuple)):
        items = [(f"output_{i}", v) for i, v in enumerate(output)]
    else:
        items = [("output_0", output)]
    parts: list[tuple[str, Any]] = []
    for key, value in items:
        if is_cache(value):
            prefix = "present" if key in CACHE_PARAMETERS else str(key)
            parts += [(f"{prefix}.{suffix}", t) for suffix, t in cache_parts(value)]
        else:
            parts.append((str(key), value))
    return parts


def _holds_tensors(value: Any) -> bool:
    leaves, _ = pytree.tree_flatten(value)
    return any(isinstance(leaf, torch.Tensor) for leaf in leaves)


#: The parameter (and output field) of a transformers model that holds its cache:
#: ``past_key_values`` up to transformers 5.23, ``cache`` from 5.24. Either way the ONNX
#: inputs are named as the runtimes expect, ``past_key_values.<i>.key``.
CACHE_PARAMETERS = ("past_key_values", "cache")


def cache_parameter(model: Any) -> str:
    """The parameter of ``model.forward`` that takes the cache: ``cache`` from transformers
    5.24 on, ``past_key_values`` before."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _onnx_prefix(name: str) -> str:
    return "past_key_values" if name in CACHE_PARAMETERS else name


def _key(name: str) -> str:
    """A flat input's parameter name (``past_key_values_0_key``): torch.export binds inputs
    to parameters, whose names are identifiers."""
    return name.replace(".", "_")


class CacheInputs:
    """The inputs of a model that takes caches, as the export takes them
    (:class:`~dynamo_onnx.integrations.base.FamilyInputs`): every tensor
    input by its parameter name, every cache as its tensors (parameter
    ``past_key_values_0_key``, named ``past_key_values.0.key`` in the ONNX model), as keyword
    inputs; other values (``use_cache=True``) are constants of the export."""

    def __init__(self, signature: inspect.Signature, bound: Mapping[str, Any]) -> None:
        self.signature = signature
        self.templates = {name: v for name, v in bound.items() if is_cache(v)}
        #: containers of tensors (``encoder_outputs=(hidden,)``): their structure, and the
        #: leaves that are not tensors
        self.structures = {
            name: pytree.tree_flatten(v)
            for name, v in bound.items()
            if not is_cache(v) and not isinstance(v, torch.Tensor) and _holds_tensors(v)
        }
        self.constants = {
            name: v
            for name, v in bound.items()
            if not is_cache(v) and not isinstance(v, torch.Tensor) and name not in self.structures
        }
        #: flat parameter name -> the ONNX input's name, in input order.
        self.names = {_key(n): n for n in self._named(bound)}
        #: the model's parameter -> its prefix in the ONNX names (a cache's is
        #: ``past_key_values`` whatever the parameter is called)
        self.prefixes = {name: _onnx_prefix(name) for name in self.templates}
        #: whether the model's sliding layers take and return their whole cache (fused
        #: into GroupQueryAttention with their window, DO510) instead of their window
        self.whole_windows = False

    @staticmethod
    def parts(bound: Mapping[str, Any]) -> list[tuple[str, int, str, torch.Tensor]]:
        """(parameter, position within it, ONNX input name, tensor) of every tensor the
        export takes, in input order: a tensor itself (position 0), a cache's tensors in
        layer order, a container's tensor leaves (position = leaf index)."""
        found: list[tuple[str, int, str, torch.Tensor]] = []
        for name, value in bound.items():
            if is_cache(value):
                prefix = _onnx_prefix(name)
                found += [
                    (name, i, f"{prefix}.{suffix}", t)
                    for i, (suffix, t) in enumerate(cache_parts(value))
                ]
            elif isinstance(value, torch.Tensor):
                found.append((name, 0, name, value))
            elif _holds_tensors(value):
                leaves, _ = pytree.tree_flatten(value)
                found += [
                    (name, i, f"{name}.{i}", t)
                    for i, t in enumerate(leaves)
                    if isinstance(t, torch.Tensor)
                ]
        return found

    @classmethod
    def _named(cls, bound: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        return {onnx_name: t for _, _, onnx_name, t in cls.parts(bound)}

    @staticmethod
    def key(onnx_name: str) -> str:
        """The export's keyword (``past_key_values_0_key``) of an ONNX input name."""
        return _key(onnx_name)

    def flat(self, bound: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Bound ``forward`` arguments -> the export's keyword inputs. For a model whose
        sliding layers take the whole cache, a sliding layer's window is put at the end of
        the whole past's length, zeros before it: the model reads no token before the
        window."""
        named = self._named(bound)
        if self.whole_windows:
            for name, value in bound.items():
                if is_cache(value):
                    named.update(_whole_windows(value, _onnx_prefix(name)))
        return {_key(name): t for name, t in named.items()}

    def for_model(self, model: Any) -> CacheInputs:
        """A copy that feeds the sliding layers their whole cache when ``model``'s
        sliding layers keep it (:func:`keeps_whole_windows`)."""
        whole = self.sliding() and keeps_whole_windows(model)
        if whole == self.whole_windows:
            return self
        adapted = copy.copy(self)
        adapted.whole_windows = whole
        return adapted

    def longer_output(self, name: str) -> int | None:
        """A present of a whole-cache model holds past + new tokens along axis 2, where
        transformers' sliding layer holds the last window - 1 of them."""
        return 2 if self.whole_windows and name.startswith("present.") else None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The caller's inputs (as ``forward`` takes them) -> the export's, ((), flat)."""
        bound = self.signature.bind(*args, **kwargs).arguments
        return (), self.flat(spread(self.signature, bound))

    def output_parts(self, output: Any) -> list[tuple[str, Any]]:
        """The model's output as (name, value) pairs, caches as ``present.0.key``..."""
        return output_parts(output)

    def model_inputs(self, flat: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The export's inputs -> the model's keyword arguments, caches rebuilt."""
        named = {self.names[k]: v for k, v in flat.items()}
        if self.whole_windows:  # what transformers keeps of the whole cache: the window
            for name, template in self.templates.items():
                named.update(_windows_of(template, named, self.prefixes[name]))
        kwargs: dict[str, Any] = dict(self.constants)
        for name, template in self.templates.items():
            prefix = f"{self.prefixes[name]}."
            tensors = {k[len(prefix) :]: v for k, v in named.items() if k.startswith(prefix)}
            kwargs[name] = rebuild_cache(template, tensors)
        for name, (leaves, spec) in self.structures.items():
            given = [named.get(f"{name}.{i}", leaf) for i, leaf in enumerate(leaves)]
            kwargs[name] = pytree.tree_unflatten(given, spec)
        kwargs.update({k: v for k, v in named.items() if "." not in k})
        ordered = {p: kwargs.pop(p) for p in self.signature.parameters if p in kwargs}
        return {**ordered, **kwargs}  # the rest go through ``**kwargs``

    def sliding(self) -> bool:
        """Whether a cache has sliding-window layers (Mistral, Gemma 2)."""
        return any(
            getattr(layer, "is_sliding", False)
            for cache in self.templates.values()
            for layer in getattr(cache, "layers", ())
        )

    def sliding_layers(self) -> list[int]:
        """The indices of the cache's sliding-window layers."""
        return sorted({i for cache in self.templates.values() for i, _ in _sliding_layers(cache)})

    def forward_signature(self) -> inspect.Signature:
        """The signature the flat forward has: one keyword parameter per flat input."""
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(k, kind) for k in self.names])


def keeps_whole_windows(model: Any) -> bool:
    """Whether ``model`` (an ``ir.Model``) returns some ``present.*`` as a windowed
    GroupQueryAttention's whole cache (the fusion for ONNX Runtime, DO510)."""
    return any(
        (value.name or "").startswith("present.") and windowed_present(value)
        for value in getattr(getattr(model, "graph", None), "outputs", ())
    )


def _sliding_layers(cache: Any) -> list[tuple[int, Any]]:
    return [
        (i, layer)
        for i, layer in enumerate(getattr(cache, "layers", ()))
        if getattr(layer, "is_sliding", False) and hasattr(layer, "sliding_window")
    ]


def _full_layer_class(layer: Any) -> type | None:
    """transformers' ``DynamicLayer`` among the classes of a sliding ``layer`` (its
    ``DynamicSlidingWindowLayer`` derives from it), or None."""
    return next((c for c in type(layer).__mro__ if c.__name__ == "DynamicLayer"), None)


def with_full_layers(cache: Any) -> Any | None:
    """A copy of ``cache`` whose sliding-window layers are full layers holding the same
    tensors, or None when it has no sliding layer that can be one.

    Traced with it, a sliding layer keeps its whole cache (its present is its past and the
    new tokens, as onnxruntime-genai feeds every layer) and the window is applied by the
    mask alone: transformers builds the sliding mask from the config's window whatever the
    layer, so the attention's values are those of the layer that cut its cache (the tokens
    it cut are the ones the mask hides)."""
    sliding = _sliding_layers(cache)
    if not sliding or any(_full_layer_class(layer) is None for _, layer in sliding):
        return None
    copied = copy.copy(cache)
    copied.layers = list(cache.layers)
    for index, layer in sliding:
        full = _full_layer_class(layer)()  # type: ignore[misc]
        full.keys, full.values = layer.keys, layer.values
        full.dtype, full.device = layer.keys.dtype, layer.keys.device
        full.is_initialized = True
        copied.layers[index] = full
    return copied


def _whole_windows(cache: Any, prefix: str) -> dict[str, torch.Tensor]:
    """A cache's sliding layers as whole caches: each window at the end of the tokens the
    layer has seen (``cumulative_length``), zeros before it."""
    found = {}
    for index, layer in _sliding_layers(cache):
        seen = int(getattr(layer, "cumulative_length", 0) or 0)
        for kind, tensor in (("key", layer.keys), ("value", layer.values)):
            missing = seen - tensor.shape[-2]
            if missing > 0:
                zeros = tensor.new_zeros((*tensor.shape[:-2], missing, tensor.shape[-1]))
                tensor = torch.cat([zeros, tensor], dim=-2)
            found[f"{prefix}.{index}.{kind}"] = tensor
    return found


def _windows_of(
    template: Any, named: Mapping[str, torch.Tensor], prefix: str
) -> dict[str, torch.Tensor]:
    """The whole caches of ``template``'s sliding layers as transformers keeps them: their
    last ``window - 1`` tokens."""
    found = {}
    for index, layer in _sliding_layers(template):
        for kind in ("key", "value"):
            name = f"{prefix}.{index}.{kind}"
            if name in named:
                found[name] = named[name][..., -(layer.sliding_window - 1) :, :]
    return found
