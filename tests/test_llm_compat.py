"""A fixed sample of ``make llm-compat`` (benchmarks/llm_compat.py): tiny random folders of a
few cheap families exported by ``export_llm``, generated from by onnxruntime-genai at a prompt
longer than every window, and compared token for token with transformers' greedy
generation; and the tool's verdicts, cells and docs table on stand-in outcomes."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import llm_compat
import llm_families

pytest.importorskip("onnxruntime_genai")

#: Families of the sample: cheap, and outside the parts other work changes (windows, MoE).
SAMPLE = ("llama", "qwen3")


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("llm-compat")
    families = llm_families.by_name(list(SAMPLE))
    # in this process, ours only: the builder and fresh workers are make llm-compat's
    fp32 = llm_compat.run(families, work, ("fp32",), with_builder=False, in_process=True)
    (int4,) = llm_compat.run(
        families[:1], work / "int4", ("int4",), with_builder=False, in_process=True
    )
    return {**{row["family"]: row for row in fp32}, "llama int4": int4}


@pytest.mark.parametrize("family", SAMPLE)
def test_fp32_folder_generates_transformers_tokens_past_the_window(rows, family):
    row = rows[family]
    assert "invalid" not in row, row
    ours = row["ours fp32"]
    assert row["verdict fp32"] == "equal", ours
    assert ours["tokens"] == row["reference"]
    assert len(row["reference"]) == llm_compat.NEW_TOKENS
    assert llm_families.PROMPT_LENGTH > llm_families.WINDOW


def test_int4_folder_generates(rows):
    row = rows["llama int4"]
    assert row["verdict int4"] in ("equal", "generates"), row["ours int4"]
    assert len(row["ours int4"]["tokens"]) == llm_compat.NEW_TOKENS


def test_every_family_builds_a_config_of_its_type():
    for family in llm_families.FAMILIES:
        config = family.config()
        assert config.model_type == family.model_type
        assert config.num_hidden_layers == 2
    windows = [f for f in llm_families.FAMILIES if "sliding_window" in f.fields]
    assert {f.fields["sliding_window"] for f in windows} == {llm_families.WINDOW}
    assert {"llama", "mistral", "qwen3", "phi3-longrope", "gpt2", "gpt-oss"} <= {
        f.name for f in llm_families.FAMILIES
    }


REFERENCE = [5, 6, 7, 8]


@pytest.mark.parametrize(
    ("outcome", "precision", "verdict"),
    [
        (llm_compat.Outcome("generated", tokens=REFERENCE), "fp32", "equal"),
        (llm_compat.Outcome("generated", tokens=REFERENCE), "int4", "equal"),
        # int4 of a random model: tokens may differ by the quantization alone
        (llm_compat.Outcome("generated", tokens=[5, 6, 9, 9]), "int4", "generates"),
        (llm_compat.Outcome("generated", tokens=[5, 6, 9, 9]), "fp32", "FAILURE"),
        (llm_compat.Outcome("export-failed", "DO507", "not a causal LM"), "fp32", "refused"),
        # exit 0, but onnxruntime-genai fails on the folder
        (llm_compat.Outcome("genai-failed", detail="unknown type"), "int4", "FAILURE"),
        # an exception without a rule id is a crash, not a refusal
        (llm_compat.Outcome("crash", detail="KeyError: 'x'"), "fp32", "FAILURE"),
        (llm_compat.Outcome("export-failed", None, "Traceback"), "fp32", "FAILURE"),
        (llm_compat.Outcome("timeout"), "fp32", "FAILURE"),
    ],
)
def test_verdicts(outcome, precision, verdict):
    assert llm_compat.verdict_of(outcome, REFERENCE, precision) == verdict


def _row(**cells) -> dict:
    row = {"family": "llama", "feature": "", "reference": REFERENCE, "seconds": 1.0}
    for key, (outcome, precision) in cells.items():
        row[key.replace("_", " ")] = outcome.__dict__
        if key.startswith("ours"):
            row[f"verdict {precision}"] = llm_compat.verdict_of(outcome, REFERENCE, precision)
    return row


def test_table_cells_and_the_docs_section_between_markers(tmp_path):
    equal = llm_compat.Outcome("generated", tokens=REFERENCE, export_s=2.0)
    refused = llm_compat.Outcome("export-failed", "DO512", "a | b")
    builder_failed = llm_compat.Outcome("export-failed", detail="NotImplementedError: gpt2")
    rows = [
        _row(ours_fp32=(equal, "fp32"), builder_fp32=(builder_failed, "fp32")),
        {**_row(ours_fp32=(refused, "fp32")), "family": "gpt2"},
        {"family": "x", "feature": "", "invalid": "ValueError: bad config", "seconds": 0.1},
    ]
    report = llm_compat.report_of(rows, ("fp32",))
    table = llm_compat.markdown(report)
    lines = table.splitlines()
    assert lines[0] == llm_compat.BEGIN and lines[-1] == llm_compat.END
    assert "| llama |  | equal (100% of tokens), 2.0 s | fails (export-failed): " in table
    assert "NotImplementedError: gpt2 |" in table
    assert "| gpt2 |  | refused DO512: a \\| b | not run |" in table  # a pipe is escaped
    assert "| x |  | not run: ValueError: bad config |  |" in table
    assert "Ours: 1 equal, 0 generates, 1 refused, 0 FAILURE." in table
    assert llm_compat.failures(rows, ("fp32",)) == ["x fp32"]

    page = tmp_path / "llm.md"
    page.write_text("# LLMs\n\ntext\n")
    llm_compat.write_docs(table, page)
    llm_compat.write_docs(table.replace("2.0 s", "3.0 s"), page)  # a rerun replaces it
    text = page.read_text()
    assert text.startswith("# LLMs\n\ntext\n\n## The family matrix: `make llm-compat`\n")
    assert text.count(llm_compat.BEGIN) == 1 and "3.0 s" in text and "2.0 s" not in text


def test_an_int4_cell_says_when_its_tokens_are_the_builders():
    mine = llm_compat.Outcome("generated", tokens=[5, 6, 9, 9], export_s=1.0)
    theirs = llm_compat.Outcome("generated", tokens=[5, 6, 9, 9])
    row = _row(ours_int4=(mine, "int4"), builder_int4=(theirs, "int4"))
    assert (
        llm_compat._ours_cell(row, "int4")
        == "generates (50% of tokens; the builder's tokens), 1.0 s"
    )
    row = _row(ours_int4=(mine, "int4"))
    assert llm_compat._ours_cell(row, "int4") == "generates (50% of tokens), 1.0 s"


def test_a_worker_that_died_leaves_its_finished_cells_and_failures_for_the_rest():
    equal = llm_compat.Outcome("generated", tokens=REFERENCE, export_s=2.0)
    row = _row(ours_fp32=(equal, "fp32"))
    row = llm_compat._crashed(row, ("fp32", "int4"), "worker exit -11: ")
    assert row["verdict fp32"] == "equal"
    assert row["verdict int4"] == "FAILURE" and row["ours int4"]["status"] == "crash"
    lost = llm_compat._crashed({"family": "y"}, ("fp32",), "worker exit 1: ImportError")
    assert lost["invalid"] == "worker exit 1: ImportError"


def test_the_builder_error_line_is_the_last_exception():
    stderr = "Traceback (most recent call last):\n  File x\nNotImplementedError: The GPT2 model is not supported\n"
    assert llm_compat._error_line(stderr) == "NotImplementedError: The GPT2 model is not supported"


def test_the_rows_name_the_scratch_folder_workdir_not_its_path(tmp_path):
    work = tmp_path / "llm-compat-x1"
    rows = [{"family": "gpt2", "fp32": {"detail": f"The {work}/gpt2/hf model is not supported"}}]
    kept = llm_compat.without_workdir(rows, work)
    assert kept[0]["fp32"]["detail"] == "The <workdir>/gpt2/hf model is not supported"
    assert str(tmp_path) not in json.dumps(kept)


def test_the_report_json_names_versions_and_sizes():
    report = llm_compat.report_of([], ("fp32", "int4"))
    assert set(report["versions"]) >= {"transformers", "onnxruntime_genai", "torch"}
    assert report["prompt_length"] == llm_families.PROMPT_LENGTH
    json.dumps(report)


def test_the_families_tokens_depend_on_what_they_exercise():
    """The matrix finds a wrong window or LongRoPE only if transformers' own tokens change
    with them: at transformers' default initializer range (0.02) a tiny model's attention is
    nearly uniform and they did not."""
    import torch
    import transformers

    prompt = llm_compat.prompt_ids()

    def tokens(family: llm_families.Family, **change) -> list[int]:
        config = family.config()
        for key, value in change.items():
            setattr(config, key, value)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        return llm_compat.reference_tokens(model, prompt)

    (mistral, phi3, longrope) = llm_families.by_name(["mistral", "phi3", "phi3-longrope"])
    assert tokens(mistral) != tokens(mistral, sliding_window=None)
    assert tokens(phi3) != tokens(longrope)


def test_phimoe_exports_and_generates_transformers_tokens_on_both_sides_of_its_context(
    tmp_path,
):
    """PhiMoE's rotary embedding picks its scale by a Python branch on the positions (DO104
    before): traced with ``torch.where`` (a DO525 note at that line), its folder generates
    transformers' tokens below and past the original context (32)."""
    import dynamo_onnx

    (family,) = llm_families.by_name(["phimoe"])
    model = llm_families.save_folder(family, tmp_path / "hf")
    program = dynamo_onnx.export_llm(tmp_path / "hf", tmp_path / "out")
    (note,) = program.diagnostics.by_rule("DO525")
    assert note.level.name == "NOTE"
    assert pathlib.Path(note.primary.path).name == "modeling_phimoe.py"
    assert "seq_len >" in note.primary.snippet
    assert "`model.rotary_emb` (PhimoeRotaryEmbedding)" in note.message
    assert not program.diagnostics.by_rule("DO104")
    for length in (20, llm_families.PROMPT_LENGTH):  # 20 + 8 tokens stay under 32
        prompt = llm_compat.prompt_ids()[:length]
        expected = llm_compat.reference_tokens(model, prompt)
        assert llm_compat.genai_tokens(tmp_path / "out", prompt) == expected, length


def test_phi3_longrope_exports_without_a_buffer_warning_or_torchs_on_the_terminal(tmp_path):
    """transformers' LongRoPE rewrites its ``inv_freq`` buffer at every call (DO121 was a false
    warning) and makes ``long_inv_freq`` on its first call (torch.export's 'tensor attribute
    was assigned during export' reached the terminal): neither now, in a fresh ``export-llm``
    process, and the folder generates transformers' tokens under and past the original
    context (32)."""
    import os
    import subprocess

    (family,) = llm_families.by_name(["phi3-longrope"])
    model = llm_families.save_folder(family, tmp_path / "hf")
    proc = subprocess.run(
        [sys.executable, "-m", "dynamo_onnx.cli", "export-llm", str(tmp_path / "hf")]
        + ["-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
    )
    assert proc.returncode == 0, proc.stderr
    assert "assigned during export" not in proc.stderr
    assert "DO121" not in proc.stdout + proc.stderr
    for length in (20, llm_families.PROMPT_LENGTH):
        prompt = llm_compat.prompt_ids()[:length]
        expected = llm_compat.reference_tokens(model, prompt)
        assert llm_compat.genai_tokens(tmp_path / "out", prompt) == expected, length
