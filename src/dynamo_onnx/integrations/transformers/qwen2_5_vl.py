"""Qwen2.5-VL as onnxruntime-genai's ``qwen2_5_vl`` type runs it: a vision encoder, an
embedding step and a text decoder with its cache.

onnxruntime-genai runs a Qwen2.5-VL folder as three models (``MultiModalLanguageModel``):
``vision.onnx`` takes one image's patches (``pixel_values``, ``[patches, C*2*14*14]``) and
its ``image_grid_thw`` (``[1, 3]``: genai calls it once per image) and returns the merged
``image_features``; ``embedding.onnx`` takes ``input_ids`` and those features and returns
``inputs_embeds`` with the features at the image-token positions; the decoder takes
``inputs_embeds``, the mask, the 3-row mRoPE ``position_ids`` genai computes from the grid
(transformers' ``get_rope_index``) and the cache. The modules here are that contract around
transformers' own ``Qwen2_5_VLForConditionalGeneration``.

transformers' vision tower reads sizes from ``grid_thw``'s values (``vision_utils.py``: the
grid loops and ``tolist()`` of ``get_vision_position_ids`` and ``get_vision_window_index``,
``repeat_interleave`` by the frame count in ``get_vision_cu_seqlens``; the attention's
``torch.split(..., lengths.tolist())``), which torch.export cannot follow (DO104). transformers
takes the first three precomputed (its ``kwargs`` ``position_ids``, ``cu_seqlens``,
``window_index``/``cu_window_seqlens``): :class:`VisionStep` computes them with tensor
arithmetic on the grid's values and the patch count (a shape torch.export keeps symbolic),
and :func:`traceable_vision` gives the attention a block-diagonal mask instead of the split
while capturing. Each is a DO541 note at the transformers line it replaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dynamo_onnx.diagnostics import DiagnosticContext, Location
from dynamo_onnx.integrations.transformers.caches import cache_parameter

__all__ = [
    "DECODER_FILENAME",
    "EMBEDDING_FILENAME",
    "VISION_FILENAME",
    "DecoderStep",
    "EmbeddingStep",
    "Names",
    "VisionStep",
    "attention_forward",
    "cu_seqlens",
    "decoder_example",
    "decoder_shapes",
    "embedding_example",
    "embedding_shapes",
    "position_ids",
    "traceable_vision",
    "vision_example",
    "vision_shapes",
    "window_index",
]

VISION_FILENAME = "vision.onnx"
EMBEDDING_FILENAME = "embedding.onnx"
DECODER_FILENAME = "model.onnx"
#: The example decoding step: BATCH sequences, NEW tokens after a past of PAST. Neither
#: is 0 or 1, which torch.export would make constants.
BATCH, NEW, PAST = 2, 3, 4
#: The example image's grid of patches (height, width): two windows by three of the tiny
#: and real configurations' window size, so every path of the window code is traced.
GRID_H, GRID_W = 12, 20


@dataclasses.dataclass(frozen=True)
class Names:
    """The I/O names of the three models for ``layers`` decoder layers (those of
    onnxruntime-genai's model builder and of its test folder)."""

    layers: int
    pixel_values: str = "pixel_values"
    image_grid_thw: str = "image_grid_thw"
    image_features: str = "image_features"
    input_ids: str = "input_ids"
    inputs_embeds: str = "inputs_embeds"
    attention_mask: str = "attention_mask"
    position_ids: str = "position_ids"
    logits: str = "logits"
    past_key: str = "past_key_values.%d.key"
    past_value: str = "past_key_values.%d.value"
    present_key: str = "present.%d.key"
    present_value: str = "present.%d.value"

    def each(self, pattern: str) -> list[str]:
        return [pattern % i for i in range(self.layers)]

    def decoder_inputs(self) -> list[str]:
        return [
            self.inputs_embeds,
            self.attention_mask,
            self.position_ids,
            *self.each(self.past_key),
            *self.each(self.past_value),
        ]

    def decoder_outputs(self) -> list[str]:
        return [self.logits, *self.each(self.present_key), *self.each(self.present_value)]


# --- the vision tower's sizes, as tensor arithmetic ------------------------------------


def _grid(grid_thw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The one image's (t, h, w) as 0-d tensors: onnxruntime-genai runs the vision model
    once per image, with a ``[1, 3]`` grid."""
    return grid_thw[0, 0], grid_thw[0, 1], grid_thw[0, 2]


def position_ids(grid_thw: torch.Tensor, patches: int, merge: int) -> torch.Tensor:
    """``get_vision_position_ids(grid_thw, merge)`` for one image of ``patches`` patches:
    each patch's (row, column), block-major over ``merge``×``merge`` blocks, repeated per
    frame; computed from the patch's index, so the length is the patch count's."""
    _, h, w = _grid(grid_thw)
    index = torch.arange(patches, device=grid_thw.device) % (h * w)
    block, inner = index // (merge * merge), index % (merge * merge)
    blocks_w = w // merge
    rows = (block // blocks_w) * merge + inner // merge
    columns = (block % blocks_w) * merge + inner % merge
    return torch.stack([rows, columns], dim=-1)


def cu_seqlens(grid_thw: torch.Tensor, patches: int) -> torch.Tensor:
    """``get_vision_cu_seqlens(grid_thw)`` for one image, as boundaries padded to a length
    known from the patch count: each patch's frame start, then the patch count (int32).
    Its consecutive unique values are transformers' (one segment per frame); the repeats
    make empty segments, which :func:`attention_forward`'s mask ignores."""
    _, h, w = _grid(grid_thw)
    frame = h * w
    starts = (torch.arange(patches, device=grid_thw.device) // frame) * frame
    end = torch.full((1,), patches, dtype=starts.dtype, device=starts.device)
    return torch.cat([starts, end]).to(torch.int32)


def window_index(
    grid_thw: torch.Tensor, patches: int, merge: int, window: int, patch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``get_vision_window_index(grid_thw, merge, window, patch_size)`` for one image: the
    merged tokens in window order (windows of ``window // merge // patch_size`` tokens a
    side, row-major, frame by frame: the argsort of that order's key) and the windows'
    boundaries in patches, padded as :func:`cu_seqlens`'s (each patch's window start)."""
    _, h, w = _grid(grid_thw)
    side = window // merge // patch_size
    unit = merge * merge
    rows, columns = h // merge, w // merge
    token = torch.arange(patches // unit, device=grid_thw.device)
    frame, place = token // (rows * columns), token % (rows * columns)
    row, column = place // columns, place % columns
    across, down = columns // side + 1, rows // side + 1  # bounds on the windows a side
    windows = (frame * down + row // side) * across + column // side
    key = windows * (side * side) + (row % side) * side + column % side
    order = torch.argsort(key)
    ordered = windows[order]
    start = (ordered[None, :] < ordered[:, None]).sum(-1) * unit  # first patch of its window
    starts = start[:, None].expand(-1, unit).reshape(-1)
    end = torch.full((1,), patches, dtype=starts.dtype, device=starts.device)
    return order, torch.cat([starts, end]).to(torch.int32)


def _segment_mask(bounds: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask of attention within the segments ``bounds`` delimits (cumulative,
    repeats allowed), ``[1, 1, length, length]``."""
    place = torch.arange(length, device=bounds.device)
    segment = (place[:, None] >= bounds[None, 1:]).sum(-1)
    same = segment[:, None] == segment[None, :]
    blocked = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=bounds.device)
    return torch.where(same, torch.zeros((), dtype=dtype, device=bounds.device), blocked)[
        None, None
    ]


def attention_forward(module: torch.nn.Module) -> Callable[..., torch.Tensor]:
    """``Qwen2_5_VLVisionAttention.forward`` with one attention call under a block-diagonal
    mask of ``cu_seqlens``'s segments, instead of a call per segment split by
    ``lengths.tolist()``: the same result, with no size read from a tensor."""
    source = inspect.getmodule(type(module))
    functions = source.ALL_ATTENTION_FUNCTIONS  # type: ignore[union-attr]
    apply_rotary = source.apply_rotary_pos_emb_vision  # type: ignore[union-attr]
    eager = source.eager_attention_forward  # type: ignore[union-attr]

    def forward(
        hidden_states: torch.Tensor,
        cu_seqlens: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        max_seqlen: int | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        del max_seqlen  # flash attention's; the mask holds the segments
        length = hidden_states.shape[0]
        query, key, value = (
            module.qkv(hidden_states)
            .reshape(length, 3, module.num_heads, -1)
            .permute(1, 0, 2, 3)
            .unbind(0)
        )
        cos, sin = position_embeddings  # type: ignore[misc]
        query, key = apply_rotary(query, key, cos, sin)
        query, key, value = (x.transpose(0, 1).unsqueeze(0) for x in (query, key, value))
        attention = functions.get_interface(module.config._attn_implementation, eager)
        output, _ = attention(
            module,
            query,
            key,
            value,
            attention_mask=_segment_mask(cu_seqlens, length, query.dtype),
            scaling=module.scaling,
            dropout=0.0,
            is_causal=False,
            **kwargs,
        )
        return module.proj(output.reshape(length, -1).contiguous())

    return forward


def _vision_attentions(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The vision attentions that split by ``lengths.tolist()`` (Qwen2.5-VL's)."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if type(m).__name__ == "Qwen2_5_VLVisionAttention"
    ]


def _line(function: Any, text: str) -> Location:
    """The line of ``function`` (unwrapped) holding ``text``: the one a rewrite replaced."""
    function = inspect.unwrap(function)
    lines, first = inspect.getsourcelines(function)
    found = next((i for i, line in enumerate(lines) if text in line), 0)
    return Location(
        inspect.getsourcefile(function) or "<unknown>", first + found, function.__name__
    )


#: transformers' functions :class:`VisionStep` computes, each with the text of the line it
#: replaces and why.
_PRECOMPUTED = (
    ("get_vision_position_ids", "tolist()", "loops over the grid's rows with tolist()"),
    ("get_vision_cu_seqlens", "repeat_interleave", "repeats h*w by the frame count's value"),
    ("get_vision_window_index", "tolist()", "loops over the grid's rows with tolist()"),
)


def _noting(
    ctx: DiagnosticContext, forward: Callable[..., Any], pending: list[tuple[Location, str, str]]
) -> Callable[..., Any]:
    """``forward``, recording the ``pending`` notes (location, function, why) as DO541 at
    its first call and emptying the list (shared by the modules of one rewrite): a rewrite
    is reported when it fired, once however many modules run it and times it is traced."""

    @functools.wraps(forward)  # its signature: torch.export binds the inputs by it
    def noted(*args: Any, **kwargs: Any) -> Any:
        while pending:
            location, function, why = pending.pop(0)
            ctx.record("vision-size-rewritten", locations=[location], function=function, why=why)
        return forward(*args, **kwargs)

    return noted


@contextlib.contextmanager
def traceable_vision(ctx: DiagnosticContext, model: torch.nn.Module) -> Iterator[None]:
    """While the block runs, Qwen2.5-VL's vision attentions attend under a block-diagonal
    mask (:func:`attention_forward`) and a :class:`VisionStep` is traced as it is; each
    forward is put back afterwards. The sizes a VisionStep computes and the attention
    replaced are DO541 notes at the transformers line replaced, when they run (a text
    decoder holding the tower never calls it: nothing is said)."""
    attentions = _vision_attentions(model)
    steps = [m for m in model.modules() if isinstance(m, VisionStep)]
    if not attentions and not steps:  # not Qwen2.5-VL: transformers is not even imported
        yield
        return
    from transformers import vision_utils

    sizes = [
        (_line(getattr(vision_utils, function), text), function, why)
        for function, text, why in _PRECOMPUTED
    ]
    for step in steps:
        step.forward = _noting(ctx, step.forward, sizes)  # type: ignore[method-assign]
    if attentions:
        cls = type(attentions[0][1])
        split = [
            (
                _line(cls.forward, "lengths.tolist()"),
                f"{cls.__name__}.forward",
                "splits the patches by lengths.tolist() into one attention per segment",
            )
        ]
        for _, module in attentions:
            module.forward = _noting(ctx, attention_forward(module), split)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for module in [*steps, *(m for _, m in attentions)]:
            del module.forward


# --- the three models ------------------------------------------------------------------


class VisionStep(torch.nn.Module):
    """``pixel_values`` ``[patches, C*T*P*P]`` and ``image_grid_thw`` ``[1, 3]`` → the
    merged ``image_features`` ``[patches / merge², text hidden]``: transformers' vision
    tower, given the sizes it would read from the grid's values as its precomputed
    ``kwargs``, computed here with tensor arithmetic."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.visual = model.model.visual
        self.config = self.visual.config

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        patches = pixel_values.shape[0]
        config = self.config
        merge = config.spatial_merge_size
        order, windows = window_index(
            image_grid_thw, patches, merge, config.window_size, config.patch_size
        )
        frames = cu_seqlens(image_grid_thw, patches)
        if not torch.compiler.is_exporting():
            # run eagerly, transformers' attention splits by the boundaries: no repeats
            frames, windows = torch.unique_consecutive(frames), torch.unique_consecutive(windows)
        sizes = {
            "position_ids": position_ids(image_grid_thw, patches, merge),
            "cu_seqlens": frames,
            "window_index": order,
            "cu_window_seqlens": windows,
        }
        return self.visual(pixel_values, image_grid_thw, **sizes).pooler_output


class EmbeddingStep(torch.nn.Module):
    """``input_ids`` and ``image_features`` → ``inputs_embeds``: the token embeddings with
    the image features in order at the image-token positions (transformers'
    ``masked_scatter``, as a gather). With no features (a decoding step) every position is
    a token's: the gather reads a zero row appended to them."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.embed = model.get_input_embeddings()
        self.image_token_id = int(model.config.image_token_id)

    def forward(self, input_ids: torch.Tensor, image_features: torch.Tensor) -> torch.Tensor:
        embeds = self.embed(input_ids)
        is_image = input_ids == self.image_token_id
        order = torch.cumsum(is_image.reshape(-1).long(), 0).reshape(is_image.shape) - 1
        pick = torch.where(is_image, order, image_features.shape[0])
        rows = torch.cat([image_features.to(embeds.dtype), embeds.new_zeros(1, embeds.shape[-1])])
        return torch.where(is_image[..., None], rows[pick], embeds)


class DecoderStep(torch.nn.Module):
    """One step of Qwen2.5-VL's text decoder with its cache as tensors: ``inputs_embeds``,
    the mask, the mRoPE ``position_ids`` ``[3, batch, new]``, the past (keys of every
    layer, then values) → logits and the presents."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.layers = model.config.text_config.num_hidden_layers
        self.cache_parameter = cache_parameter(model.model.language_model)

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        *caches: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        import transformers  # only a transformers model reaches here

        n = self.layers
        cache = transformers.DynamicCache()
        for layer in range(n):
            cache.update(caches[layer], caches[n + layer], layer)
        out = self.model.model.language_model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self.cache_parameter: cache},
        )
        logits = self.model.lm_head(out.last_hidden_state)
        keys = [cache.layers[i].keys for i in range(n)]
        values = [cache.layers[i].values for i in range(n)]
        return (logits, *keys, *values)


def _patch_dim(vision: Any) -> int:
    return vision.in_channels * vision.temporal_patch_size * vision.patch_size**2


def vision_example(config: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """One image of :data:`GRID_H` × :data:`GRID_W` patches."""
    vision = config.vision_config
    pixels = torch.randn(GRID_H * GRID_W, _patch_dim(vision))
    return pixels, torch.tensor([[1, GRID_H, GRID_W]], dtype=torch.int64)


def vision_shapes(config: Any) -> dict[str, Any]:
    """Any number of patches that is a multiple of the merge block's (as every grid's is:
    its sides are multiples of the merge size), so the tower's ``reshape(patches // unit,
    unit, -1)`` keeps its last size; one image's grid (genai calls the model per image)."""
    unit = config.vision_config.spatial_merge_size**2
    return {
        "pixel_values": {0: torch.export.Dim("merged_patches") * unit},
        "image_grid_thw": None,
    }


def embedding_example(config: Any, batch: int = BATCH, new: int = 7) -> tuple[torch.Tensor, ...]:
    ids = torch.randint(0, config.text_config.vocab_size, (batch, new))
    ids[0, 1:3] = config.image_token_id
    features = torch.randn(2, config.text_config.hidden_size)
    return ids, features


def embedding_shapes() -> dict[str, Any]:
    return {
        "input_ids": {0: "batch_size", 1: "sequence_length"},
        "image_features": {0: "num_image_tokens"},
    }


def _kv_heads(text: Any) -> tuple[int, int]:
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return text.num_key_value_heads, head_dim


def decoder_example(
    config: Any, batch: int = BATCH, new: int = NEW, past: int = PAST
) -> tuple[torch.Tensor, ...]:
    text = config.text_config
    heads, head_dim = _kv_heads(text)
    caches = [torch.randn(batch, heads, past, head_dim) for _ in range(2 * text.num_hidden_layers)]
    embeds = torch.randn(batch, new, text.hidden_size)
    mask = torch.ones(batch, past + new, dtype=torch.int64)
    positions = (torch.arange(new) + past).expand(3, batch, new).contiguous()
    return (embeds, mask, positions, *caches)


def decoder_shapes(names: Names) -> dict[str, Any]:
    """Any batch, new tokens and past (0 at the first step), by name: the mask's length is
    the past's and the new tokens' together, which torch.export works out."""
    past = {0: "batch_size", 2: "past_sequence_length"}
    return {
        "inputs_embeds": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "position_ids": {1: "batch_size", 2: "sequence_length"},
        "caches": tuple([past] * (2 * names.layers)),
    }
