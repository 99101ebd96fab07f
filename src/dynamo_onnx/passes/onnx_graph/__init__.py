"""onnx_ir passes over the translated model: finalize, opset conversion, module functions,
weight checks, and the optimizer (run after export by ``ONNXProgram.optimize``)."""
