"""ONNX Runtime: fusions and weight quantization."""
