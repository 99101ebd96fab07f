"""torch_lib's functions made when first used (registry/torchlib_deferred.py): an export
types and compiles only those it dispatches to, and they are the functions torch_lib's own
import makes. Each check runs in a fresh process: this one has made them already."""

from __future__ import annotations

import onnxscript
import pytest
from onnxscript import values as onnxscript_values

from dynamo_onnx.registry import torchlib_deferred
from fresh_process import last_json_line

#: A model with one traced torch_lib function (``aten::mul``) and two scripted ones
#: (``aten::addcmul``, ``aten::log1p``), exported after the registry is built.
_DISPATCHED = r"""
import json, sys
import onnxscript
import torch
import dynamo_onnx
from dynamo_onnx.registry import _torchlib_table

def made(function):  # onnxscript sets these when it makes a function
    state = vars(function)
    return "_signature" in state and ("function_ir" in state or "func" in state)

class Model(torch.nn.Module):
    def forward(self, x, y):
        return torch.log1p(torch.addcmul(x, x, y).abs()) * y

table = _torchlib_table()
torchlib = {id(e.function): e.function for entries in table.values() for e in entries
            if not e.is_extra}
made_before = sum(made(f) for f in torchlib.values())
registry = dynamo_onnx.OnnxRegistry()
(looked_up,) = [f.function for f in registry.get_op_functions("aten", "mul", "Tensor")
                if not f.is_extra and not f.is_complex]
typed = [p.name for p in looked_up.op_signature.params]
x, y = torch.rand(2, 3), torch.rand(2, 3)
program = dynamo_onnx.export(Model(), (x, y), optimize=False)
notes = {f.properties["op"]: f.properties["function"]
         for f in program.diagnostics.by_rule("node-dispatched")}
print(json.dumps({
    "functions": len(torchlib),
    "made_before": made_before,
    "looked_up": [type(looked_up).__name__, isinstance(looked_up, onnxscript.TracedOnnxFunction),
                  typed],
    "made_after": sorted(f.name for f in torchlib.values() if made(f)),
    "difference": float((program(x, y)[0] - Model()(x, y)).abs().max()),
    "notes": notes,
}))
"""

#: Every torch_lib function's signature and, for a scripted one, its ONNX function, either
#: as torch_lib's own import makes them (``plain``) or as dynamo-onnx's registry does, after
#: an export and torch.onnx's export of the same model in the same process (``ours``).
_DUMP = r"""
import json, sys
import torch

def parameter(p):
    constraint = getattr(p, "type_constraint", None)
    allowed = sorted(map(str, constraint.allowed_types)) if constraint else None
    return [p.name, type(p).__name__, str(getattr(p, "type", "")), allowed, repr(p.default),
            getattr(p, "variadic", None), p.required]

def signature(s):  # its text lists the allowed types of a set in this process's order
    return [s.domain, s.name, s.overload, [parameter(p) for p in s.params],
            [parameter(p) for p in s.outputs]]

def dump(registry):
    out = {}
    for name, overloads in registry.items():
        for i, f in enumerate(overloads.overloads + overloads.complex):
            entry = [signature(f.op_signature)]
            if isinstance(f, onnxscript.OnnxFunction):
                entry.append(f.to_function_proto().SerializeToString().hex())
            out[f"{name}/{i}"] = entry
    return out

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.log1p(torch.nn.functional.gelu(x)) + x.isnan()

x = torch.rand(2, 3)
if sys.argv[1] == "ours":
    import dynamo_onnx
    ours = dynamo_onnx.export(Model(), (x,), optimize=False)
    theirs = torch.onnx.export(Model(), (x,), dynamo=True, optimize=False)
    import onnxruntime
    session = onnxruntime.InferenceSession(theirs.model_proto.SerializeToString())
    (got,) = session.run(None, {"x": x.numpy()})
    differences = [float((ours(x)[0] - Model()(x)).abs().max()),
                   float(abs(got - Model()(x).numpy()).max())]
else:
    import onnxscript.function_libs.torch_lib.ops
    differences = []
import onnxscript
from onnxscript.function_libs.torch_lib.registration import default_registry
print(json.dumps({"differences": differences, "functions": dump(default_registry)}))
"""


def test_torchlib_functions_are_made_when_an_export_first_uses_them():
    """Building the registry makes none of torch_lib's ~470 functions; a lookup hands out a
    typed ``TracedOnnxFunction``; an export makes those it dispatches to (traced and
    scripted), matches eager and notes them as before."""
    result = last_json_line(_DISPATCHED)
    assert result["functions"] > 400
    assert result["made_before"] == 0
    assert result["looked_up"] == ["DeferredTraced", True, ["self", "other"]]
    made = result["made_after"]
    assert {"aten_mul", "aten_addcmul", "aten_log1p", "aten_abs"} <= set(made)
    assert len(made) < 40, made
    assert result["difference"] < 1e-5
    assert result["notes"]["aten::addcmul"] == "aten_addcmul"
    assert result["notes"]["aten::log1p"] == "aten_log1p"


def test_deferred_functions_are_the_ones_torchlib_makes_and_torch_onnx_uses_them():
    """After dynamo-onnx's export and torch.onnx's in one process, every torch_lib function
    has the signature (and a scripted one the ONNX function) torch_lib's own import gives
    it, and both exports match eager."""
    plain = last_json_line(_DUMP, "plain")
    ours = last_json_line(_DUMP, "ours")
    assert all(d < 1e-5 for d in ours["differences"]) and len(ours["differences"]) == 2
    assert ours["functions"].keys() == plain["functions"].keys()
    differing = [k for k, v in ours["functions"].items() if plain["functions"][k] != v]
    assert differing == []
    assert sum(len(v) == 2 for v in plain["functions"].values()) > 30  # scripted ones


def test_onnxscript_constructors_are_put_back_when_the_import_fails():
    with pytest.raises(RuntimeError), torchlib_deferred.functions_made_when_used():
        assert onnxscript.script is not torchlib_deferred._SCRIPT
        raise RuntimeError("import failed")
    assert onnxscript.script is torchlib_deferred._SCRIPT
    assert onnxscript_values.TracedOnnxFunction is torchlib_deferred._TRACED


def test_a_deferred_function_copies_without_being_made():
    """copy/pickle protocols probe for attributes a deferred function lacks: the probe is
    an AttributeError (no recursion), and the copy makes its function when used."""
    import copy

    from onnxscript.function_libs.torch_lib.ops import core

    function = torchlib_deferred.DeferredTraced(core.aten_mul.opset, core.aten_mul.func)
    assert not torchlib_deferred.is_made(function)
    duplicate = copy.copy(function)
    assert [p.name for p in duplicate.op_signature.params] == ["self", "other"]
    assert torchlib_deferred.is_made(duplicate)
