"""The layer copy's eager twin with its vocabulary matrices kept as the checkpoint stores them.

The twin (``layer_copy.eager_folder``) runs transformers on the copy's weights for the
comparison with the copy's float32 ONNX model. Its largest tensors are the embedding and
the LM head (vocabulary x hidden each: 2 x 262 MB in float32 for a 32000 x 2048 Llama, 4.2 GB
for Llama-3-8B's), and a checkpoint stores them in bfloat16 or float16, whose every value
float32 holds exactly. Held in float32 they were what set the peak of an int4 export-llm
(issue 44); here they stay 16-bit and are widened where they are used: the embedding widens
the rows it looks up (the same float32 values a float32 lookup gives), the head widens
:data:`HEAD_ROWS` rows at a time and computes their logits in float32 (each logit the same
float32 dot product of the same values; only the matrix product's blocking may differ, far
inside the comparison's tolerance). Only the plain modules are replaced (``nn.Embedding``
without ``max_norm``, ``nn.Linear``): a subclass with its own forward (Gemma's scaled
embedding) keeps float32. The 16-bit matrices are buffers, not parameters, so the model's
``dtype`` (its first parameter's) stays float32; a model that reads the module's ``weight``
(Llama 4 its device, a head's dtype) gets the float32 matrix, a transient copy.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["HEAD_ROWS", "NARROW_DTYPES", "WideningEmbedding", "WideningHead", "narrowed", "widen"]

#: Stored dtypes whose values float32 holds exactly.
NARROW_DTYPES = (torch.bfloat16, torch.float16)
#: Rows of the head widened at a time (16 MB in float32 at hidden 2048).
HEAD_ROWS = 2048


class WideningEmbedding(torch.nn.Module):
    """An ``nn.Embedding`` lookup in a 16-bit table, the rows found widened to float32."""

    def __init__(self, embedding: torch.nn.Embedding, table: torch.Tensor) -> None:
        super().__init__()
        self.padding_idx = embedding.padding_idx
        self.register_buffer("table", table, persistent=False)

    @property
    def weight(self) -> torch.Tensor:
        """The table in float32, for a model that reads it (Llama 4 its device): a
        transient copy, where only a model that reads it pays for it."""
        return self.table.float()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(ids, self.table, self.padding_idx).float()


class WideningHead(torch.nn.Module):
    """An ``nn.Linear`` of a 16-bit matrix, computed in float32 :data:`HEAD_ROWS` rows of
    the matrix (output features) at a time."""

    def __init__(self, head: torch.nn.Linear, matrix: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("matrix", matrix, persistent=False)
        self.bias = head.bias

    @property
    def weight(self) -> torch.Tensor:
        """The matrix in float32, for a model that reads it (its dtype, or the matrix
        itself): a transient copy, as :attr:`WideningEmbedding.weight`."""
        return self.matrix.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.matrix.shape[0]
        out = torch.empty((*x.shape[:-1], rows), dtype=x.dtype, device=x.device)
        for start in range(0, rows, HEAD_ROWS):
            end = min(start + HEAD_ROWS, rows)
            bias = None if self.bias is None else self.bias[start:end]
            weight = self.matrix[start:end].to(x.dtype)
            out[..., start:end] = torch.nn.functional.linear(x, weight, bias)
        return out


def narrowed(model: Any) -> dict[str, torch.nn.Module]:
    """The model's plain embedding and head, by their parameter's state name (``weight``
    included): the matrices to read in their stored dtype when it is 16-bit."""
    found: dict[str, torch.nn.Module] = {}
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    plain_embedding = type(embedding) is torch.nn.Embedding and embedding.max_norm is None
    # a head tied to an embedding kept float32 reads that float32 tensor: no 16-bit one beside
    tied = head is not None and getattr(head, "weight", None) is embedding.weight
    for name, module in model.named_modules():
        if module is embedding and plain_embedding:
            found[f"{name}.weight"] = module
        elif module is head and type(module) is torch.nn.Linear and (plain_embedding or not tied):
            found[f"{name}.weight"] = module
    return found


def widen(model: Any, modules: dict[str, torch.nn.Module], state: dict[str, torch.Tensor]) -> None:
    """Replace each module of ``modules`` whose loaded matrix in ``state`` is 16-bit by its
    widening twin (a tied head shares the embedding's 16-bit matrix)."""
    for name, module in modules.items():
        matrix = state.get(name)
        if matrix is None or matrix.dtype not in NARROW_DTYPES:
            continue
        twin: torch.nn.Module
        if isinstance(module, torch.nn.Embedding):
            twin = WideningEmbedding(module, matrix)
        else:
            twin = WideningHead(module, matrix)  # type: ignore[arg-type]
        path = name.rsplit(".", 1)[0]
        parent, _, attribute = path.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attribute, twin)
