"""The opsets the exporter defaults to, in one place below every other module.

Every opset default of the project is here; tests/test_architecture.py fails on a literal
one anywhere else in src/. Layer 0: the registry (torch_lib's opset) and the options (the
defaults of ``export`` and ``dynamo_export``) both read it, so neither imports the other.
"""

from __future__ import annotations

__all__ = ["DYNAMO_EXPORT_OPSET", "EXPORT_OPSET", "TORCHLIB_OPSET"]

#: The opset onnxscript's torch_lib writes its functions at: translation builds the model
#: there, and the opset-conversion pass takes it to the one asked for.
TORCHLIB_OPSET = 18

#: ``export``'s opset when none is asked for: torch.onnx.export's as of torch 2.13.
EXPORT_OPSET = 20

#: ``dynamo_export``'s opset when none is asked for: the seed's (torch_lib's).
DYNAMO_EXPORT_OPSET = TORCHLIB_OPSET
