"""Files: atomic saves of ONNX models, external data, initializer layouts, the streamed
writer, the user's inputs as the ONNX program takes them, and a dynamic-shape spec as
messages describe it."""
