"""Files: atomic saves of ONNX models, external data, initializer layouts, the streamed
writer, and the user's inputs as the ONNX program takes them."""
