"""Every ```python block of README.md and docs/*.md runs as written.

The names a block takes from its surroundings (``model``, ``args``, ``model_with_custom_op``
...) are defined here, in one small preamble per document, so that the docs cannot drift
from the API again. A block that is deliberately not runnable says so in the document, on
the line before it: ``<!-- not-run: the reason -->``. The blocks of a document run in order
in one namespace and one temporary directory (a later block may use what an earlier one
made, as a reader would), except docs/rules.md's, which are independent examples, one per
rule, each run from the preamble alone. Each block is compiled with its document's path and
line numbers, so a failure points at the line of the document.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import sys
import textwrap
import types
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.+?)\s*-->")


@dataclasses.dataclass(frozen=True)
class Block:
    doc: pathlib.Path
    line: int  # the line of the block's first line of code
    source: str
    not_run: str | None  # the reason the document gives, or None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: pathlib.Path) -> list[Block]:
    text = doc.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = _NOT_RUN.search(before)
        line = text[: match.start()].count("\n") + 2
        found.append(Block(doc, line, match[1], reason[1] if reason else None))
    return found


COMMON = """
import torch
import dynamo_onnx
from mlp import MLPModel
"""

#: What each document's blocks take from their surroundings.
PREAMBLES = {
    "README.md": """
model = MLPModel().eval()
args = (torch.randn(4, 8),)

@torch.library.custom_op("docsreadme::sort_on_host", mutates_args=())
def sort_on_host(x: torch.Tensor) -> torch.Tensor:
    import numpy
    return torch.from_numpy(numpy.sort(x.numpy()))      # NumPy: no trace reaches it

@sort_on_host.register_fake
def _(x):
    return torch.empty_like(x)

class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return sort_on_host(x) + 1

model_with_custom_op = UsesCustomOp()
""",
    "docs/usage.md": """
class Masked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x, mask=None):
        y = self.fc(x)
        return y if mask is None else y * mask

model = Masked().eval()
x, m = torch.randn(4, 8), torch.ones(4, 4)
args, kwargs = (x,), {"mask": m}

@torch.library.custom_op("mylib::scaled_gelu", mutates_args=())
def scaled_gelu_kernel(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.nn.functional.gelu(x) * scale

@scaled_gelu_kernel.register_fake
def _(x, scale):
    return torch.empty_like(x)

class UsesScaledGelu(torch.nn.Module):
    def forward(self, x):
        return torch.ops.mylib.scaled_gelu(x, 2.0) + 1

model_with_custom_op = UsesScaledGelu()
""",
    "docs/llm.md": """
import transformers

transformers.set_seed(0)
config = transformers.LlamaConfig(
    vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
)
transformers.LlamaForCausalLM(config).save_pretrained("tiny-llama")
checkpoint = "tiny-llama"       # a local checkpoint, as from_pretrained takes a hub id
""",
    "docs/rules.md": """
from onnxscript import opset18 as op

class MyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))

model = MyModel().eval()
model_with_real_weights = MyModel().eval()
x = torch.randn(8, 8)
args = (x,)
mask, other = x > 0, torch.zeros_like(x)
program = dynamo_onnx.export(model, args)
registry = dynamo_onnx.OnnxRegistry()

def my_onnx_function(x, scale: float = 2.0, shift: float = 1.0):
    return op.Add(op.Mul(x, scale), shift)

def my_function(self, other, alpha: float = 1.0):
    return op.Add(self, op.Mul(other, alpha))
""",
}


def _run_block(block: Block, namespace: dict) -> None:
    # padded so that the code's line numbers are the document's
    source = "\n" * (block.line - 1) + block.source
    code = compile(source, str(block.doc), "exec")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the docs show calls; warnings are tested elsewhere
        exec(code, namespace)


def _preamble(doc: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A fresh module's namespace with the document's preamble run in it (a module, as a
    reader's script is one: onnxscript.script looks its function's globals up there)."""
    module = types.ModuleType(f"docs_{doc.stem}")
    module.__file__ = str(doc)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    # from a file, as a reader's code is: torch.jit.script and onnxscript read the source
    source = pathlib.Path(f"preamble_{doc.stem}.py").resolve()
    source.write_text(textwrap.dedent(COMMON + PREAMBLES.get(str(doc.relative_to(ROOT)), "")))
    exec(compile(source.read_text(), str(source), "exec"), vars(module))
    return vars(module)


@pytest.mark.parametrize(
    "doc",
    [d for d in DOCS if any(b.not_run is None for b in blocks(d))],
    ids=lambda d: str(d.relative_to(ROOT)),
)
def test_every_python_block_runs_as_written(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runnable = [b for b in blocks(doc) if b.not_run is None]
    independent = doc.name == "rules.md"
    namespace = _preamble(doc, monkeypatch)
    for block in runnable:
        if independent:
            (tmp_path / block.where.replace("/", "_")).mkdir()
            monkeypatch.chdir(tmp_path / block.where.replace("/", "_"))
        try:
            _run_block(block, _preamble(doc, monkeypatch) if independent else namespace)
        except Exception as exc:  # the failure names the block
            pytest.fail(f"{block.where}: {type(exc).__name__}: {exc}")


def test_every_block_runs_or_says_why_not(capsys):
    """The tally: how many blocks run, and the reason each other one gives."""
    every = [b for doc in DOCS for b in blocks(doc)]
    skipped = [b for b in every if b.not_run is not None]
    assert every, "no python block found"
    assert all(len(b.not_run or "x") > 10 for b in skipped)  # a reason, not a bare marker
    with capsys.disabled():
        print(
            f"\ndocs: {len(every) - len(skipped)} of {len(every)} python blocks run; "
            f"not run: {len(skipped)}"
        )
        for b in skipped:
            print(f"  {b.where}: {b.not_run}")
    assert len(skipped) <= len(every) // 4  # most of what the docs show runs
