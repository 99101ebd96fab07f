"""``python -m dynamo_onnx.cli``: the installed ``dynamo-onnx`` command."""

from dynamo_onnx.cli import console_main

console_main()
