"""ONNX helpers that passes, runtimes and model families all need: constants read off
values, the slices and attention nodes they recognize, the onnxscript optimizer pipeline,
the attributes of older opsets, whether ONNX Runtime loads a model. Below all three, so none
imports another's internals for them; nothing here knows a model family."""
