"""``dynamo-onnx export-llm QWEN2_5_VL_DIR -o OUT``: a Qwen2.5-VL checkpoint in, the folder
onnxruntime-genai's ``qwen2_5_vl`` type runs out (vision encoder, embedding step, text
decoder, genai_config.json, the image processing genai performs, tokenizer), generating
transformers' greedy tokens for an image and a prompt with the processor files the folder
carries, at two image sizes; and each capture-time rewrite of transformers' vision code
against the original function at several sizes."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnxruntime  # onnxruntime_genai needs it loaded first
import pytest
import tokenizers
import torch
import transformers
from PIL import Image
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import vision_utils

import dynamo_onnx
from cli_runner import run_cli
from dynamo_onnx.diagnostics import DiagnosticContext, Level
from dynamo_onnx.errors import InvalidOptionValueError
from dynamo_onnx.integrations.transformers import qwen2_5_vl, qwen2_5_vl_folder

og = pytest.importorskip("onnxruntime_genai")

#: Qwen2.5-VL's special tokens, first (ids 0-6): genai's processor writes the first three
#: of the vision ones around an image's pads.
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
PROMPT = "<|vision_start|><|image_pad|><|vision_end|>describe the picture"
#: (height, width) of the two images: one a multiple of 28 (no resize), one resized to
#: 112 x 140 by both processors (smart resize); the second has two windows by three.
SIZES = ((56, 84), (100, 150))
#: the patch grids (h, w) the rewrites are compared at, from one merge block to several
#: windows a side, odd multiples of the window and not
GRIDS = ((1, 2, 2), (1, 4, 4), (1, 6, 8), (1, 10, 16), (1, 14, 10), (2, 4, 6), (1, 12, 20))
NEW_TOKENS = 12


def _tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained here (no download), Qwen2.5-VL's special tokens
    first (ids 0-6), 294 tokens."""
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["describe the picture of a cat", "a dog and a cat"] * 20, trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=SPECIAL[0], eos_token=SPECIAL[2], pad_token=SPECIAL[0]
    )


def _config(vocab: int) -> transformers.Qwen2_5_VLConfig:
    """A 2-layer text decoder of width 64 with mRoPE sections (2, 3, 3), a 2-block vision
    tower of width 32 (one windowed block, one full) with windows of 2 x 2 merged tokens,
    weights large enough (0.2) that the greedy tokens vary."""
    return transformers.Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 1024,
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [2, 3, 3],
                "rope_theta": 10000.0,
            },
            "initializer_range": 0.2,
            "bos_token_id": 0,
            "eos_token_id": 2,
            "pad_token_id": 0,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
            "initializer_range": 0.2,
        },
        image_token_id=5,
        video_token_id=6,
        vision_start_token_id=3,
        vision_end_token_id=4,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=0,
    )


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    tokenizer = _tokenizer()
    return transformers.Qwen2_5_VLForConditionalGeneration(
        _config(len(tokenizer))
    ).eval(), tokenizer


@pytest.fixture(scope="module")
def saved_qwen(tiny_model, tmp_path_factory):
    """The tiny model saved as a checkpoint is: weights, tokenizer, and the image
    processor's preprocessor_config.json (transformers' PIL processor: no torchvision)."""
    model, tokenizer = tiny_model
    path = tmp_path_factory.mktemp("qwen2_5_vl")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    transformers.Qwen2VLImageProcessorPil(
        min_pixels=56 * 56, max_pixels=28 * 28 * 256
    ).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def exported(saved_qwen, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "qwen-onnx"
    sarif = out.parent / "qwen.sarif"
    # gated on warnings, as a CI job would: the clean folder has none (exit 0, not 3)
    args = ("-o", str(out), "--sarif", str(sarif), "--warnings-as-errors")
    proc = run_cli(out.parent, "export-llm", str(saved_qwen), *args)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def _image(path, height: int, width: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    image.save(path)
    return image


def _genai(folder, image_path) -> tuple[list[int], dict[str, np.ndarray]]:
    """onnxruntime-genai's greedy tokens for the prompt and the image (the whole sequence),
    and the inputs its processor made from the folder's files."""
    model = og.Model(str(folder))
    inputs = model.create_multimodal_processor()(PROMPT, images=og.Images.open(str(image_path)))
    made = {k: inputs[k].as_numpy().copy() for k in ("input_ids", "pixel_values", "image_grid_thw")}
    params = og.GeneratorParams(model)
    length = made["input_ids"].shape[1] + NEW_TOKENS
    params.set_search_options(do_sample=False, max_length=length, batch_size=1)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)], made


def test_export_llm_writes_a_qwen2_5_vl_folder_genai_runs_with_transformers_greedy_tokens(
    tiny_model, saved_qwen, exported, tmp_path
):
    model, _ = tiny_model
    out, proc = exported
    # a clean export: no warning (the rotary embeddings no ONNX Runtime kernel takes are notes)
    assert "0 error(s), 0 warning(s)" in proc.stdout
    # nothing transformers or torch said while exporting: the command's own lines only
    ours = re.compile(r"  ([a-z-]+: (\w+ in \d+\.\d\d s|\d+% \(.*\)))")
    assert [line for line in proc.stderr.splitlines() if not ours.fullmatch(line)] == []
    log = json.loads((out.parent / "qwen.sarif").read_text())
    results = [r for run in log["runs"] for r in run["results"]]
    # mRoPE's three sections (temporal, height, width) in each decoder layer and the tower's
    # 2-D rotary (rows, columns) in each block: a note each, at transformers' rotary line
    rotary = sorted(
        (r["properties"]["module"], r["properties"]["variant"].split(" of one table")[0])
        for r in results
        if r["ruleId"] == "DO543"
    )
    assert rotary == [
        ("model.model.language_model.layers.0.self_attn", "its cos/sin is 3 sections"),
        ("model.model.language_model.layers.1.self_attn", "its cos/sin is 3 sections"),
        ("visual.blocks.0.attn", "its cos/sin is 2 sections"),
        ("visual.blocks.1.attn", "its cos/sin is 2 sections"),
    ]
    assert {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].rsplit("/", 1)[-1]
        for r in results
        if r["ruleId"] == "DO543"
    } == {"modeling_qwen2_5_vl.py"}
    assert not [r for r in results if r["ruleId"] == "DO505" or r.get("level") == "warning"]
    assert [r["message"]["text"] for r in results if r["ruleId"] == "DO540"] == [
        "Wrote vision.onnx, embedding.onnx, model.onnx for onnxruntime-genai's qwen2_5_vl "
        "type; not written: none (every model was exported)."
    ]
    # each rewrite of transformers' vision code, a note at the line it replaced
    rewrites = {
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].rsplit("/", 1)[-1],
            r["properties"]["function"],
        )
        for r in results
        if r["ruleId"] == "DO541"
    }
    assert rewrites == {
        ("vision_utils.py", "get_vision_position_ids"),
        ("vision_utils.py", "get_vision_cu_seqlens"),
        ("vision_utils.py", "get_vision_window_index"),
        ("modeling_qwen2_5_vl.py", "Qwen2_5_VLVisionAttention.forward"),
    }
    assert sorted(p.name for p in out.iterdir()) == [
        "embedding.onnx",
        "embedding.onnx.data",
        "genai_config.json",
        "model.onnx",
        "model.onnx.data",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vision.onnx",
        "vision.onnx.data",
        "vision_processor.json",
    ]
    config = json.loads((out / "genai_config.json").read_text())["model"]
    assert config["type"] == "qwen2_5_vl"
    assert (config["image_token_id"], config["vision_start_token_id"]) == (5, 3)
    for part in ("vision", "embedding", "decoder"):  # the names genai reads are the models'
        graph = onnx.load(out / config[part]["filename"], load_external_data=False).graph
        inputs, outputs = {i.name for i in graph.input}, {o.name for o in graph.output}
        for name in config[part]["inputs"].values():
            assert (name % 1 if "%d" in name else name) in inputs, name
        for name in config[part]["outputs"].values():
            assert (name % 1 if "%d" in name else name) in outputs, name

    processor = transformers.AutoImageProcessor.from_pretrained(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    for seed, (height, width) in enumerate(SIZES):
        image_path = tmp_path / f"image{seed}.png"
        image = _image(image_path, height, width, seed)
        tokens, made = _genai(out, image_path)
        features = processor(images=[image], return_tensors="pt")
        grid = features["image_grid_thw"]
        np.testing.assert_array_equal(made["image_grid_thw"], grid.numpy())
        np.testing.assert_allclose(
            made["pixel_values"], features["pixel_values"].numpy(), atol=1e-5
        )
        pads = int(grid.prod()) // 4
        ids = tokenizer(
            PROMPT.replace("<|image_pad|>", "<|image_pad|>" * pads), return_tensors="pt"
        )
        ids = ids.input_ids
        assert made["input_ids"].tolist() == ids.tolist()
        with torch.no_grad():
            eager = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                pixel_values=features["pixel_values"],
                image_grid_thw=grid,
                mm_token_type_ids=(ids == model.config.image_token_id).int(),
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
            )
        new = tokens[ids.shape[1] :]
        expected = eager[0, ids.shape[1] :].tolist()
        if expected[-1] == model.config.text_config.eos_token_id:
            expected = expected[:-1]  # genai's sequence ends before the end token
        assert new == expected, (height, width)
        assert len(set(new)) > 3  # a model whose tokens vary: the comparison can fail


def test_the_vision_model_takes_images_of_any_size_as_eager_does(tiny_model, exported):
    """One export, several grids: the sizes are computed from the grid's values."""
    model, _ = tiny_model
    session = onnxruntime.InferenceSession(str(exported[0] / "vision.onnx"))
    for t, h, w in GRIDS:
        grid = torch.tensor([[t, h, w]])
        pixels = torch.randn(t * h * w, 3 * 2 * 14 * 14)
        with torch.no_grad():
            expected = model.model.get_image_features(pixels, grid).pooler_output[0]
        (got,) = session.run(None, {"pixel_values": pixels.numpy(), "image_grid_thw": grid.numpy()})
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-4)


@pytest.mark.parametrize("grid", GRIDS)
def test_position_ids_rewrite_equals_transformers(grid):
    thw = torch.tensor([grid])
    n = int(thw.prod())
    expected = vision_utils.get_vision_position_ids(thw, 2)
    assert torch.equal(qwen2_5_vl.position_ids(thw, n, 2), expected)


@pytest.mark.parametrize("grid", GRIDS)
def test_cu_seqlens_rewrite_equals_transformers(grid):
    """Padded to the patch count plus one; its consecutive unique values are transformers'."""
    thw = torch.tensor([grid])
    n = int(thw.prod())
    got = qwen2_5_vl.cu_seqlens(thw, n)
    assert got.shape == (n + 1,) and got.dtype == torch.int32
    assert torch.equal(torch.unique_consecutive(got), vision_utils.get_vision_cu_seqlens(thw))


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("window", [56, 112])
def test_window_index_rewrite_equals_transformers(grid, window):
    thw = torch.tensor([grid])
    n = int(thw.prod())
    order, bounds = qwen2_5_vl.window_index(thw, n, 2, window, 14)
    expected_order, expected_bounds = vision_utils.get_vision_window_index(thw, 2, window, 14)
    assert torch.equal(order, expected_order)
    assert bounds.shape == (n + 1,)
    assert torch.equal(torch.unique_consecutive(bounds), expected_bounds)


@pytest.mark.parametrize("grid", GRIDS)
def test_attention_rewrite_equals_transformers(tiny_model, grid):
    """One masked attention equals transformers' split per segment, for its windows' and
    frames' boundaries, and for the padded boundaries the rewrites give."""
    model, _ = tiny_model
    attention = model.model.visual.blocks[0].attn
    thw = torch.tensor([grid])
    n = int(thw.prod())
    hidden = torch.randn(n, 32)
    cos, sin = torch.randn(n, 16), torch.randn(n, 16)
    _, windows = qwen2_5_vl.window_index(thw, n, 2, 56, 14)
    for padded in (windows, qwen2_5_vl.cu_seqlens(thw, n)):
        with torch.no_grad():
            expected = attention(hidden, torch.unique_consecutive(padded), (cos, sin))
            got = qwen2_5_vl.attention_forward(attention)(hidden, padded, (cos, sin))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_the_attention_rewrite_is_on_only_while_capturing(tiny_model):
    model, _ = tiny_model
    step = qwen2_5_vl.VisionStep(model)
    attentions = [block.attn for block in model.model.visual.blocks]
    ctx = DiagnosticContext()
    grid = torch.tensor([[1, 4, 6]])
    pixels = torch.randn(24, 3 * 2 * 14 * 14)
    with torch.no_grad():
        expected = step(pixels, grid)
        with qwen2_5_vl.traceable_vision(ctx, step):
            assert all("forward" in vars(a) for a in [step, *attentions])
            assert ctx.findings == []  # nothing fired yet
            for _ in range(2):
                torch.testing.assert_close(step(pixels, grid), expected)
    assert not any("forward" in vars(a) for a in [step, *attentions])
    assert sorted(f.properties["function"] for f in ctx.findings) == [
        "Qwen2_5_VLVisionAttention.forward",
        "get_vision_cu_seqlens",
        "get_vision_position_ids",
        "get_vision_window_index",
    ]
    assert {f.rule.id for f in ctx.findings} == {"DO541"}
    # a model without Qwen2.5-VL's vision attention: nothing replaced, nothing said
    other = DiagnosticContext()
    with qwen2_5_vl.traceable_vision(other, torch.nn.Linear(2, 2)):
        pass
    assert other.findings == []


def test_embedding_step_equals_transformers_placeholder_scatter(tiny_model):
    """The features in order at the image tokens, across the batch, as transformers'
    masked_scatter puts them; with no features every position is a token's embedding."""
    model, _ = tiny_model
    step = qwen2_5_vl.EmbeddingStep(model)
    ids = torch.randint(7, 200, (2, 9))
    ids[0, 2:5] = ids[1, 1:3] = model.config.image_token_id
    features = torch.randn(5, 64)
    embeds = model.get_input_embeddings()(ids)
    mask = model.model.get_placeholder_mask(ids, inputs_embeds=embeds, image_features=features)[0]
    expected = embeds.masked_scatter(mask, features)
    with torch.no_grad():
        torch.testing.assert_close(step(ids, features), expected)
        text = ids.clone()
        text[text == model.config.image_token_id] = 9
        torch.testing.assert_close(step(text, features[:0]), model.get_input_embeddings()(text))


def test_a_qwen2_5_vl_folder_without_an_image_processor_is_do507(saved_qwen, tmp_path):
    other = tmp_path / "no-processor"
    other.mkdir()
    for source in saved_qwen.iterdir():
        if source.name != "preprocessor_config.json":
            (other / source.name).write_bytes(source.read_bytes())
    with pytest.raises(InvalidOptionValueError, match=r"DO507"):
        dynamo_onnx.export_llm(other, tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_two_images_of_two_sizes_in_one_prompt(tiny_model, exported, tmp_path):
    """genai runs the vision model once per image (its grid is ``[1, 3]``) and places each
    image's features at its own pads: the tokens are transformers' for both images."""
    model, _ = tiny_model
    out = exported[0]
    paths = [tmp_path / "a.png", tmp_path / "b.png"]
    images = [_image(paths[0], 56, 84, 3), _image(paths[1], 112, 140, 4)]
    prompt = PROMPT.replace("describe", "a cat") + PROMPT
    genai = og.Model(str(out))
    inputs = genai.create_multimodal_processor()(prompt, images=og.Images.open(*map(str, paths)))
    ids = torch.from_numpy(inputs["input_ids"].as_numpy().astype(np.int64))
    params = og.GeneratorParams(genai)
    params.set_search_options(do_sample=False, max_length=ids.shape[1] + 10, batch_size=1)
    generator = og.Generator(genai, params)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    tokens = [int(t) for t in generator.get_sequence(0)][ids.shape[1] :]
    features = transformers.AutoImageProcessor.from_pretrained(out)(
        images=images, return_tensors="pt"
    )
    assert features["image_grid_thw"].tolist() == [[1, 4, 6], [1, 8, 10]]
    assert int((ids == model.config.image_token_id).sum()) == (24 + 80) // 4
    with torch.no_grad():
        eager = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=features["pixel_values"],
            image_grid_thw=features["image_grid_thw"],
            mm_token_type_ids=(ids == model.config.image_token_id).int(),
            max_new_tokens=10,
            do_sample=False,
        )
    expected = eager[0, ids.shape[1] :].tolist()
    if expected[-1] == model.config.text_config.eos_token_id:
        expected = expected[:-1]
    assert tokens == expected
    assert len(set(tokens)) > 3


def test_image_processor_settings_genai_does_not_follow_are_do542(saved_qwen, tmp_path):
    """A processor that does not normalize and resizes bilinearly: genai's processing does
    both its own way, a DO542 warning each at the setting's line of preprocessor_config.json;
    the tiny checkpoint's processor (genai's defaults) gives none."""
    other = tmp_path / "other-processor"
    other.mkdir()
    for source in saved_qwen.iterdir():
        (other / source.name).write_bytes(source.read_bytes())
    transformers.Qwen2VLImageProcessorPil(
        min_pixels=56 * 56, max_pixels=28 * 28 * 256, do_normalize=False, resample=2
    ).save_pretrained(other)
    for path, expected in ((saved_qwen, {}), (other, {"do_normalize": False, "resample": 2})):
        ctx = DiagnosticContext()
        qwen2_5_vl_folder.load(ctx, path).record_findings(ctx)
        assert {f.properties["setting"]: f.properties["value"] for f in ctx.findings} == expected
        lines = (path / "preprocessor_config.json").read_text().splitlines()
        for finding in ctx.findings:
            assert finding.rule.id == "DO542" and finding.level == Level.WARNING
            assert f'"{finding.properties["setting"]}"' in lines[finding.primary.line - 1]


def test_a_do542_warning_under_warnings_as_errors_exits_3_with_the_folder_written(
    saved_qwen, tmp_path
):
    """A CI job gating on warnings: the image processor's DO542 warning fails the command
    (exit 3) after the whole folder is written, and the log has it as the error it became."""
    other = tmp_path / "other-processor"
    other.mkdir()
    for source in saved_qwen.iterdir():
        (other / source.name).write_bytes(source.read_bytes())
    transformers.Qwen2VLImageProcessorPil(
        min_pixels=56 * 56, max_pixels=28 * 28 * 256, do_normalize=False
    ).save_pretrained(other)
    out, sarif = tmp_path / "out", tmp_path / "run.sarif"
    args = ("-o", str(out), "--sarif", str(sarif), "--warnings-as-errors")
    proc = run_cli(tmp_path, "export-llm", str(other), *args)
    assert proc.returncode == 3, proc.stderr
    assert "DO542" in proc.stderr
    assert {"vision.onnx", "embedding.onnx", "model.onnx", "genai_config.json"} <= {
        p.name for p in out.iterdir()
    }
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    assert [r["level"] for r in results if r["ruleId"] == "DO542"] == ["error"]  # gated


def test_a_decoder_that_cannot_be_exported_leaves_the_vision_and_embedding_models_and_says_so(
    saved_qwen, tmp_path
):
    """A checkpoint whose text rotary is dynamic NTK (``rope_type: dynamic``: transformers
    recomputes its frequencies when ``max(position_ids)`` passes the cached length, a branch
    on a tensor's value): the vision and embedding models are written, the decoder's capture
    stops at transformers' line (DO104), and the summary says which models were written and
    which were not; the command exits 1 and writes no genai_config.json."""
    other = tmp_path / "dynamic-rope"
    other.mkdir()
    for source in saved_qwen.iterdir():
        (other / source.name).write_bytes(source.read_bytes())
    config = json.loads((other / "config.json").read_text())
    config["text_config"]["rope_parameters"].update(rope_type="dynamic", factor=2.0)
    (other / "config.json").write_text(json.dumps(config))
    out, sarif = tmp_path / "out", tmp_path / "run.sarif"
    proc = run_cli(tmp_path, "export-llm", str(other), "-o", str(out), "--sarif", str(sarif))
    assert proc.returncode == 1, proc.stderr
    summary = (
        "Wrote vision.onnx, embedding.onnx for onnxruntime-genai's `qwen2_5_vl` type; "
        "not written: model.onnx (the export of model.onnx failed)."
    )
    assert summary in proc.stdout.splitlines()
    assert "[DO104 data-dependent-control-flow]" in proc.stderr
    assert "modeling_rope_utils.py" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "embedding.onnx",
        "embedding.onnx.data",
        "vision.onnx",
        "vision.onnx.data",
    ]
    results = [r for run in json.loads(sarif.read_text())["runs"] for r in run["results"]]
    assert [r["message"]["text"] for r in results if r["ruleId"] == "DO540"] == [
        summary.replace("`", "")
    ]
    assert [r["ruleId"] for r in results if r.get("level") == "error"] == ["DO104"]
