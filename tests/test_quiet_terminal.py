"""What reaches the terminal during an export is dynamo-onnx's own: torch's, onnxscript's,
onnx_ir's and ONNX Runtime's messages (Python and C++) are captured or dropped.

Run in a fresh process so that standard error is read at the file-descriptor level, where
ONNX Runtime's C++ logger and torch's ``print(..., file=sys.stderr)`` write."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

TESTS = pathlib.Path(__file__).resolve().parent

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    import hf_models, dynamo_onnx

    model, args, kwargs, shapes = hf_models.gpt2()  # transformers' remarks come before


    class Branch(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1


    sys.stderr.write("---EXPORTS---\\n")
    sys.stderr.flush()
    for opset in (None, 17):  # 17: through the version converter
        program = dynamo_onnx.export(
            model, args, kwargs=kwargs, dynamic_shapes=shapes, verify=True, opset_version=opset
        )
        print("GPT2", [f.rule.id for f in program.diagnostics.findings if f.level >= 30])
    try:
        dynamo_onnx.export(Branch(), (torch.randn(3),))
    except dynamo_onnx.CaptureError as error:
        print("FAILED", error.rule_id)
    mh = dynamo_onnx.export(lambda x: x.mH, (torch.rand(2, 3, 4) > 0.5,))  # a fallback (DO306)
    print("FALLBACK", [f.rule.id for f in mh.diagnostics.by_rule("DO306")])
    with dynamo_onnx.enable_fake_mode() as fake:
        tiny = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        fake_program = dynamo_onnx.dynamo_export(
            tiny, torch.randn(2, 4), export_options=dynamo_onnx.ExportOptions(fake_context=fake)
        )
    fake_program.optimize()
    print("FAKE", len(fake_program.model.graph))
    """
)


def _our_line(line: str) -> bool:
    """A line dynamo-onnx writes: one of its warnings (category, or the message's rule)."""
    return "DynamoOnnxWarning" in line or line.startswith(("[DO", "dynamo-onnx"))


def test_exports_leave_only_our_lines_on_stderr(terminal):
    stdout, stderr = terminal["exports"]
    assert stdout.splitlines()[:3] == ["GPT2 []", "GPT2 []", "FAILED DO104"], stdout
    assert stdout.splitlines()[3] == "FALLBACK ['DO306']"
    assert stdout.splitlines()[4].startswith("FAKE ")
    _, _, during = stderr.partition("---EXPORTS---\n")
    foreign = [line for line in during.splitlines() if line.strip() and not _our_line(line)]
    assert foreign == [], "\n".join(foreign[:40])


AFTER_EXPORT = textwrap.dedent(
    """
    import sys, warnings, torch, transformers
    sys.path.insert(0, {tests!r})
    import hf_models, dynamo_onnx

    config = transformers.LlamaConfig(**{{**hf_models.DECODER, "use_cache": True}})
    model = transformers.LlamaForCausalLM(config).eval()
    cache = transformers.DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        cache.update(torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), layer)
    inputs = {{
        "input_ids": torch.randint(0, 100, (2, 3)),
        "attention_mask": torch.ones(2, 7, dtype=torch.int64),
        "position_ids": torch.arange(4, 7).expand(2, 3),
        "past_key_values": cache,  # the parameter before transformers 5.24: deprecated after
        "use_cache": True,
    }}


    class Reshape(torch.nn.Module):
        def forward(self, x):
            return x.reshape(-1, 4) * 2


    filters = list(warnings.filters)
    sys.stderr.write("---EXPORTS---\\n")
    sys.stderr.flush()
    program = dynamo_onnx.export(model, (), kwargs=inputs, verify=True)
    print("LLM", len(program(**inputs)), [f.rule.id for f in program.diagnostics.findings if f.level >= 30])
    reshape = dynamo_onnx.export(Reshape(), (torch.randn(2, 8),), dynamic_shapes={{"x": {{0: "b", 1: "f"}}}})
    try:
        reshape(torch.randn(3, 5))  # 15 values into rows of 4: the Reshape kernel fails
    except Exception as error:
        print("RAISED", type(error).__name__)
    print("FILTERS", warnings.filters == filters)
    """
)


#: Between the two scripts, on standard output and standard error.
BETWEEN = "---AFTER-EXPORT---"


@pytest.fixture(scope="module")
def terminal(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Each script's standard output and error, the two run one after the other in one fresh
    process (a process each only added torch's and transformers' import)."""
    directory = tmp_path_factory.mktemp("terminal")
    script = directory / "noisy.py"
    between = f"print({BETWEEN!r}, flush=True)\nsys.stderr.write({BETWEEN!r} + '\\n')\n"
    script.write_text(
        SCRIPT.format(tests=str(TESTS)) + between + AFTER_EXPORT.format(tests=str(TESTS))
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=directory
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out, _, out_after = proc.stdout.partition(BETWEEN + "\n")
    err, _, err_after = proc.stderr.partition(BETWEEN + "\n")
    return {"exports": (out, err), "after": (out_after, err_after)}


def test_running_and_verifying_leave_only_our_lines_on_stderr(terminal):
    """ONNX Runtime's ``[E:onnxruntime ... ExecuteKernel]`` when a call fails (the exception
    says it), its load-time warnings, and transformers' "`past_key_values` is deprecated"
    on every eager call of a capture and a verification stay off the terminal; the caller's
    warnings filters are as they were."""
    stdout, stderr = terminal["after"]
    assert stdout.splitlines() == ["LLM 5 []", "RAISED Fail", "FILTERS True"], stdout
    _, _, during = stderr.partition("---EXPORTS---\n")
    foreign = [line for line in during.splitlines() if line.strip() and not _our_line(line)]
    assert foreign == [], "\n".join(foreign[:40])
