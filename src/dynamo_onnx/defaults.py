"""Every default the exporter picks a number for, in one place below every other module:
opsets, verification tolerances, quantization settings, the collector's thresholds.

Layer 0 (it imports nothing): the registry and the options read the opsets here, so neither
imports the other; the runtime, the public signatures, the command line's help and the tests
read the others here, so a default changes in one line. tests/test_architecture.py fails on
a literal opset default anywhere else in src/; tests/test_defaults.py checks the docs state
these values.
"""

from __future__ import annotations

__all__ = [
    "DYNAMO_EXPORT_OPSET",
    "EXPORT_OPSET",
    "GC_THRESHOLDS_WHILE_EXPORTING",
    "PROBE_ATOL",
    "PROBE_RTOL",
    "QUANTIZATION_ACCURACY_LEVEL",
    "QUANTIZATION_BLOCK_SIZE",
    "QUANTIZATION_PRECISION",
    "QUANTIZATION_SYMMETRIC",
    "SAVE_TENSORS_AHEAD",
    "TORCHLIB_OPSET",
    "VERIFY_ATOL",
    "VERIFY_RTOL",
]

# -- opsets ------------------------------------------------------------------------------

#: The opset onnxscript's torch_lib writes its functions at: translation builds the model
#: there, and the opset-conversion pass takes it to the one asked for.
TORCHLIB_OPSET = 18

#: ``export``'s opset when none is asked for: torch.onnx.export's as of torch 2.13.
EXPORT_OPSET = 20

#: ``dynamo_export``'s opset when none is asked for: the seed's (torch_lib's).
DYNAMO_EXPORT_OPSET = TORCHLIB_OPSET

# -- tolerances --------------------------------------------------------------------------

#: ``verify()``'s tolerances unless given: tight enough to catch a wrong translation of fp32.
VERIFY_ATOL = 1e-4
VERIFY_RTOL = 1e-3

#: The probe's (the captured program against eager at sizes outside the example): two runs
#: of the same PyTorch code, so tighter than ONNX Runtime against eager.
PROBE_ATOL = 1e-5
PROBE_RTOL = 1e-4

# -- quantization (onnxruntime-genai's model builder's settings on the CPU) ---------------

#: ``ONNXProgram.quantize``'s precision when none is given (``export_llm`` keeps fp32).
QUANTIZATION_PRECISION = "int4"
#: Weights per ``MatMulNBits`` block.
QUANTIZATION_BLOCK_SIZE = 32
#: Symmetric blocks: no zero point.
QUANTIZATION_SYMMETRIC = True
#: ``MatMulNBits``' ``accuracy_level``: 4 computes with int8 activations, the fastest CPU
#: kernels (0 leaves it unset, 1 fp32, 2 fp16, 3 bf16).
QUANTIZATION_ACCURACY_LEVEL = 4

# -- Python's garbage collector ----------------------------------------------------------

#: Its thresholds while passes run (each generation's at least this; passes/collector.py
#: says why, docs/performance.md what it saves).
GC_THRESHOLDS_WHILE_EXPORTING = (10_000, 20, 100)

# -- saving ------------------------------------------------------------------------------

#: Weights made (read, converted, packed, quantized) in threads while the one before is
#: written to the external data file (io/data_file.py). One: two were no faster on a shared
#: 2-core machine and held more (docs/performance.md, issue 44's "The save"); each thread's
#: torch copies run an OpenMP team of their own, and ONNX Runtime's quantizer holds the GIL.
SAVE_TENSORS_AHEAD = 1
