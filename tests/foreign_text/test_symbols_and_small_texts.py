"""dynamo_onnx.foreign_text.symbols (torch's size symbols in its expressions) and
small_texts (the converter's, the dispatcher's, an FX node's and a traceback's one-liners)."""

from __future__ import annotations

import torch

from dynamo_onnx import foreign_text
from dynamo_onnx.foreign_text import (
    converter_message,
    fx_node_target,
    kernel_registered_in_python,
    rewrite_traceback_paths,
    symbol_renamer,
    symbols_in,
)


def test_symbols_and_their_renaming_respect_whole_names():
    assert symbols_in("32*((s77//32)) + u0 >= s7") == {"s77", "u0", "s7"}
    rename = symbol_renamer({"s7": "batch", "s77": "seq"})
    assert rename("2*s77 + s7") == "2*seq + batch"
    assert symbol_renamer({})("s7") == "s7"


def test_the_small_texts_of_onnx_torch_and_tracebacks():
    assert converter_message("No Adapter From Version $13 for Gemm") == (
        "No Adapter From Version 13 for Gemm"
    )
    kernel = torch.library.get_kernel("aten::relu", "CPU")
    assert not kernel_registered_in_python(repr(kernel))  # a C++ kernel
    assert kernel_registered_in_python("SafeKernelFunction(... registered at /m/ops.py:12)")
    assert fx_node_target(
        "%relu : [num_users=1] = call_function[target=torch.ops.aten.relu.default]"
    ) == ("aten.relu.default")
    trace = '  File "/a/model.py", line 3, in forward\n    x = 1\n  File "/lib/t.py", line 9, in f'
    rewritten = rewrite_traceback_paths(trace, lambda p: "model.py" if p == "/a/model.py" else None)
    assert rewritten == (
        '  File "model.py", line 3, in forward\n    x = 1\n  File "/lib/t.py", line 9, in f'
    )


def test_a_mention_is_of_a_whole_name_or_expression():
    assert foreign_text.mentions("32*s52", "s52") and foreign_text.mentions("32*s52", "32*s52")
    assert not foreign_text.mentions("32*s520", "s52")
