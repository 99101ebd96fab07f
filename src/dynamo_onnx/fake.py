"""enable_fake_mode and ONNXFakeContext: export a model without allocating its weights.

Inside ``enable_fake_mode()`` every tensor created without an explicit device is made on
torch's meta device: it has a shape and a dtype but no storage. A model built there exports
like any other (torch.export traces meta tensors), and its ONNX model can be saved without
initializers, then completed with ``ONNXProgram.apply_weights``. The meta device is public
API; torch's FakeTensorMode, which PyTorch 2.1-2.5 used here, is not.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import torch

__all__ = ["ONNXFakeContext", "enable_fake_mode", "is_fake"]


@dataclasses.dataclass(frozen=True)
class ONNXFakeContext:
    """The context a model was built in by :func:`enable_fake_mode`.

    Pass it as ``ExportOptions(fake_context=...)``: the export then knows that the weights
    are fake and says so in its findings.
    """

    device: str = "meta"


@contextlib.contextmanager
def enable_fake_mode() -> Iterator[ONNXFakeContext]:
    """Enable fake mode for the duration of the context.

    Example::

        with dynamo_onnx.enable_fake_mode() as fake_context:
            model = MyModel()            # parameters on the meta device: no memory
            x = torch.randn(2, 2, 2)
        options = dynamo_onnx.ExportOptions(fake_context=fake_context)
        program = dynamo_onnx.dynamo_export(model, x, export_options=options)
        program.save("arch.onnx", include_initializers=False, keep_initializers_as_inputs=True)
        program.apply_weights({"weight": torch.tensor(42.0)})
        program.save("model.onnx")
    """
    context = ONNXFakeContext()
    with torch.device(context.device):
        yield context


def is_fake(tensor: object) -> bool:
    """Whether a tensor has no data: on the meta device."""
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "meta"
