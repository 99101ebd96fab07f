"""dynamo-onnx's own ONNX functions for ATen operators, by theme; ``extra_functions``
assembles them into the table the registry loads."""
