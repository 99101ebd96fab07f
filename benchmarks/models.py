"""The benchmark's models and example inputs, built the same way in every process.

Weights are random (seeded): the figures measured do not depend on their values, and
nothing is downloaded. Sizes are the real ones (GPT-2 124M, BERT-base, a Llama-2-7B layer).
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable
from typing import Any

import torch

Built = tuple[torch.nn.Module, tuple[Any, ...]]  # inputs; a dict last is keyword inputs

_ROOT = pathlib.Path(__file__).resolve().parent.parent


def mlp() -> Built:
    """The seed's MLP (examples/mlp.py), the demo model."""
    sys.path.insert(0, str(_ROOT / "examples"))
    from mlp import MLPModel  # the example is a script, not a package

    return MLPModel().eval(), (torch.rand(97, 8),)


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(32)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(64)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def cnn() -> Built:
    return SmallCNN().eval(), (torch.rand(8, 3, 64, 64),)


def gpt2() -> Built:
    """GPT-2 124M: transformers' default GPT2Config (12 layers, 768 wide, 50257 tokens)."""
    import transformers  # only the transformer models need it

    config = transformers.GPT2Config(use_cache=False)
    return transformers.GPT2Model(config).eval(), (torch.randint(0, 50257, (1, 128)),)


def bert() -> Built:
    """BERT-base: transformers' default BertConfig (12 layers, 768 wide)."""
    import transformers

    model = transformers.BertModel(transformers.BertConfig()).eval()
    return model, (torch.randint(0, 30522, (1, 128)),)


class LlamaLayer(torch.nn.Module):
    """One Llama decoder layer at Llama-2-7B widths, with its rotary embedding."""

    def __init__(self) -> None:
        super().__init__()
        import transformers
        from transformers.models.llama import modeling_llama

        config = transformers.LlamaConfig(
            hidden_size=4096,
            intermediate_size=11008,
            num_attention_heads=32,
            num_key_value_heads=32,
            num_hidden_layers=1,
            max_position_embeddings=4096,
            use_cache=False,
            attn_implementation="eager",
        )
        self.layer = modeling_llama.LlamaDecoderLayer(config, layer_idx=0)
        self.rotary = modeling_llama.LlamaRotaryEmbedding(config)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(hidden.shape[1]).unsqueeze(0)
        embeddings = self.rotary(hidden, positions)
        out = self.layer(hidden, position_embeddings=embeddings)
        return out[0] if isinstance(out, tuple) else out


def llama_layer() -> Built:
    return LlamaLayer().eval(), (torch.randn(1, 128, 4096),)


def decoding_step(config: Any, past: int) -> dict[str, Any]:
    """One new token after ``past`` tokens, with the cache as transformers passes it."""
    import transformers

    cache = transformers.DynamicCache(config=config)
    shape = (1, config.num_key_value_heads, past, config.hidden_size // config.num_attention_heads)
    for layer in range(config.num_hidden_layers):
        cache.update(torch.randn(shape), torch.randn(shape), layer)
    return {
        "input_ids": torch.randint(0, config.vocab_size, (1, 1)),
        "attention_mask": torch.ones(1, past + 1, dtype=torch.int64),
        "position_ids": torch.tensor([[past]]),
        "past_key_values": cache,
        "use_cache": True,
    }


def llm_cache() -> Built:
    """A small Llama (4 layers, 512 wide, 32000 tokens) decoding one token after 32, with
    its DynamicCache as transformers passes it: the keyword arguments are the last item."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=512,
        intermediate_size=1376,
        num_attention_heads=8,
        num_key_value_heads=4,
        num_hidden_layers=4,
        max_position_embeddings=2048,
    )
    return transformers.LlamaForCausalLM(config).eval(), (decoding_step(config, past=32),)


MODELS: dict[str, Callable[[], Built]] = {
    "mlp": mlp,
    "cnn": cnn,
    "gpt2-124m": gpt2,
    "llama2-7b-layer": llama_layer,
    "bert-base": bert,
    "llm-cache": llm_cache,
}
