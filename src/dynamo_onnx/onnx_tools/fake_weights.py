"""Meta-device (fake) weights hidden from what would read them: onnxscript's optimizer and
constant folder fail on them ("Cannot copy out of meta tensor"), and every pass or runtime
that optimizes a model exported under ``enable_fake_mode`` runs them with the weights
hidden."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import onnx_ir as ir

from dynamo_onnx.fake import is_fake

__all__ = ["fake_weights_hidden"]


@contextlib.contextmanager
def fake_weights_hidden(model: ir.Model) -> Iterator[None]:
    """Fake (meta) initializers without a value while the block runs: the optimizer and
    the constant folder would try to read them."""
    hidden = {
        name: value
        for name, value in model.graph.initializers.items()
        if is_fake(getattr(value.const_value, "raw", None))
    }
    saved = {name: value.const_value for name, value in hidden.items()}
    try:
        for value in hidden.values():
            value.const_value = None
        yield
    finally:
        for name, value in hidden.items():
            value.const_value = saved[name]
