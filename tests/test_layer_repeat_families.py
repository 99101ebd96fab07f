"""The layers of a template repeated in its ONNX graph make the whole model's graph
(dynamo_onnx.onnx_tools.layer_repeat, issue 44's wall time): for each family of
``make llm-compat``, export-llm's export of the whole model (a few layers, random weights)
against the repetition of its template's (the same config with the kept layers, the same
weights): the same computation, the same initializers in the same order, the same outputs
from ONNX Runtime."""

from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import onnx_ir as ir
import pytest
import torch
import transformers

from dynamo_onnx.integrations import load_streamed_folder
from dynamo_onnx.integrations.transformers import layer_names
from dynamo_onnx.integrations.transformers.hf_folder import HFFolder, example_inputs
from dynamo_onnx.io.onnx_file import save
from dynamo_onnx.io.sessions import inference_session
from dynamo_onnx.llm_folder import _export_with_fallback
from dynamo_onnx.onnx_tools.graph_signatures import GENERATED_NAME
from dynamo_onnx.onnx_tools.layer_repeat import (
    LayerPlan,
    LayerRepeatRefused,
    graph_differences,
    plan_template,
    repeat_layers,
)
from dynamo_onnx.onnx_tools.lazy_folding import FoldedTensor, refolded
from dynamo_onnx.reports import ReportingContext

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import llm_families  # the matrix's tiny configs (benchmarks/, put on the path above)

pytestmark = pytest.mark.e2e

#: Enough layers for a family's pattern to repeat: a template keeps three of one kind (layer
#: 0 and two), five of two alternating kinds (Gemma 2, Gemma 3's pattern of two here).
LAYERS = 7
FEWER_LAYERS = 4
ALTERNATING = {"gemma2", "gemma3-text", "smollm3", "gpt-oss"}
#: Families whose small weights the optimizer folds into constants of their own (Gemma's
#: and Nemotron's ``1 + weight`` norms): their template is exported as export-llm exports it, from a
#: checkpoint whose weights are read lazily, so that the folded values stay computations
#: of each layer's weights (``onnx_tools.lazy_folding``).
FOLDED = {"gemma2", "gemma3-text", "nemotron"}
_INDEX = re.compile(r"(?:^|\.)(?:layers|h)\.(\d+)\.")


def _config(family: llm_families.Family, layers: int) -> transformers.PretrainedConfig:
    fields = dict(family.fields)
    fields["n_layer" if "n_layer" in fields else "num_hidden_layers"] = layers
    if "layer_types" in fields:  # the family's two-layer pattern, repeated
        pattern = fields["layer_types"]
        fields["layer_types"] = [pattern[i % len(pattern)] for i in range(layers)]
    return transformers.AutoConfig.for_model(family.model_type, **fields)


def _per_layer_keys(config, count: int) -> list[str]:
    return [
        key
        for key, value in vars(config).items()
        if "layer" in key and isinstance(value, (list, tuple)) and len(value) == count
    ]


def _kinds(model, count: int) -> list:
    """A layer's kind: its parameters' names and shapes and the config's entries of it."""
    config = model.config
    keys = _per_layer_keys(config, count)
    layers = next(
        m
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) == count and name
    )
    return [
        (
            tuple((n, tuple(p.shape)) for n, p in layer.named_parameters()),
            tuple(repr(getattr(config, k)[i]) for k in keys),
        )
        for i, layer in enumerate(layers)
    ]


def _template(model, kept: tuple[int, ...]):
    """The model's config with the ``kept`` layers, holding their weights."""
    config = model.config
    count = config.num_hidden_layers
    shrunk = type(config).from_dict(config.to_dict())
    for key in _per_layer_keys(config, count):
        value = getattr(config, key)
        setattr(shrunk, key, type(value)(value[i] for i in kept))
    shrunk.num_hidden_layers = len(kept)
    template = transformers.AutoModelForCausalLM.from_config(shrunk).eval()
    number = {old: new for new, old in enumerate(kept)}
    state = {}
    for name, tensor in model.state_dict().items():
        match = _INDEX.search(name)
        if match is None:
            state[name] = tensor
        elif int(match.group(1)) in number:
            start, end = match.span(1)
            state[name[:start] + str(number[int(match.group(1))]) + name[end:]] = tensor
    missing, unexpected = template.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k or "bias" in k for k in missing), missing
    return template


def _options(optimize) -> dict:
    return {
        "optimize": optimize,
        "progress": None,
        "diagnostic_options": None,
        "source_root": None,
        "verbose": False,
    }


def _export(model, optimize) -> ir.Model:
    """export-llm's export of the model, in memory (its sliding fallback included)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        inputs = example_inputs(model)
    folder = HFFolder(pathlib.Path("."), model, inputs, ())
    program = _export_with_fallback(folder, False, _options(optimize))[0]
    return program.model


def _export_streamed(model, optimize, path: pathlib.Path) -> ir.Model:
    """export-llm's export of the model saved in ``path`` (float32), its weights read
    lazily from the checkpoint (a model no deeper than its template is exported whole)."""
    model.save_pretrained(path)
    folder = load_streamed_folder(ReportingContext(None, subject=str(path)), path)
    assert folder is not None
    program = _export_with_fallback(folder, True, _options(optimize))[0]
    return program.model


def _drawn(model):
    """``model`` with its one-dimensional weights (norms, biases, attention sinks) drawn
    at random, as trained ones differ from layer to layer (transformers starts them at one
    or zero, and the optimizer merges equal tensors into one)."""
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.normal_(1.0, 0.2)
    return model


def _retarget_to(full: ir.Model, template: ir.Model, renamed, weights=None):
    """``retarget`` as a test gives it: the whole export's tensor of the name the template's
    tensor takes in layer ``i``; a value folded from layer weights computed from the
    whole model's ``weights`` of layer ``i`` (by name)."""
    name_of = {id(v.const_value): v.name for v in template.graph.initializers.values()}
    tensors = {name: v.const_value for name, v in full.graph.initializers.items()}

    def weight(leaf, i):
        return ir.tensor(weights[renamed(leaf.name, i)].detach().numpy())

    def retarget(tensor, j, i):
        if isinstance(tensor, FoldedTensor):
            return refolded(tensor, lambda leaf: weight(leaf, i))
        return tensors[renamed(name_of[id(tensor)], i)]

    return retarget


def _plan(kept, sources, full, template, weights=None) -> LayerPlan:
    return LayerPlan(
        kept,
        sources,
        layer_names.layer_of,
        layer_names.renamed,
        _retarget_to(full, template, layer_names.renamed, weights),
    )


def _initializer_names(model: ir.Model) -> list[str]:
    """The initializers' names in order, those the exporter and optimizer name themselves
    (``val_12``, ``add_128``) as ``*``: their numbers count the export's values, which the
    layers change."""
    return ["*" if GENERATED_NAME.fullmatch(n) else n for n in model.graph.initializers]


def _feeds(model: ir.Model, session) -> dict[str, np.ndarray]:
    """Inputs for ``model``: 3 new tokens after a past of 5, batch 1."""
    rng = np.random.default_rng(0)
    feeds = {}
    for value in session.get_inputs():
        dims = {"batch_size": 1, "sequence_length": 3, "past_sequence_length": 5}
        if value.name == "attention_mask":
            feeds[value.name] = np.ones((1, 8), dtype=np.int64)
        elif value.name == "position_ids":
            feeds[value.name] = np.arange(5, 8, dtype=np.int64)[None]
        elif value.name == "input_ids":
            feeds[value.name] = rng.integers(3, 100, (1, 3)).astype(np.int64)
        else:
            shape = [d if isinstance(d, int) else dims.get(d, 5) for d in value.shape]
            shape[2] = 5  # the past's length
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _run(model: ir.Model) -> list[np.ndarray]:
    session = inference_session(ir.to_proto(model).SerializeToString())
    return session.run(None, _feeds(model, session))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """(family, optimize) -> (full, template, kept, sources, the full model's weights):
    each exported once."""
    cache: dict = {}

    def get(name: str, optimize):
        if (name, optimize) not in cache:
            family = llm_families.by_name([name])[0]
            layers = LAYERS if name in ALTERNATING else FEWER_LAYERS
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(_config(family, layers))
            model = _drawn(model.eval())
            planned = plan_template(_kinds(model, layers))
            assert planned is not None
            kept, sources = planned
            full = _export(model, optimize)
            shrunk = _template(model, kept)
            if name in FOLDED:
                path = tmp_path_factory.mktemp(name)
                template = _export_streamed(shrunk, optimize, path)
            else:
                template = _export(shrunk, optimize)
            cache[name, optimize] = full, template, kept, sources, model.state_dict()
        return cache[name, optimize]

    return get


FUSED = [
    "llama",
    "qwen3",
    "mistral",
    "qwen2-window",
    "gemma2",
    "gemma3-text",
    "gpt2",
    "mixtral",
    "phi3",
    "olmo",
    "granite",
    "smollm3",
    "nemotron",
    "phimoe",
]


#: The plain graph (no optimizer: each layer computes its mask and shapes again), a full
#: attention family and a sliding one.
PLAIN = ["llama", "mistral"]


@pytest.mark.parametrize(
    ("name", "optimize"),
    [(name, "onnxruntime") for name in FUSED] + [(name, False) for name in PLAIN],
)
def test_the_repeated_template_is_the_whole_export(exports, name, optimize, tmp_path):
    full, template, kept, sources, weights = exports(name, optimize)
    repeated = repeat_layers(template, _plan(kept, sources, full, template, weights))
    assert graph_differences(repeated, full) == []
    assert _initializer_names(repeated) == _initializer_names(full)
    # the weights in the same order: the external data file is the whole export's
    save(repeated, tmp_path / "repeated.onnx", external_data=True)
    save(full, tmp_path / "full.onnx", external_data=True)
    data = (tmp_path / "repeated.onnx.data").read_bytes()
    assert data == (tmp_path / "full.onnx.data").read_bytes()
    for got, want in zip(_run(repeated), _run(full), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_layers_that_differ_by_their_index_are_refused():
    """GPT-2 scaling each layer's attention by 1 / (its index + 1): the template's two
    layers are not the same computation, and the repetition says which."""
    family = llm_families.by_name(["gpt2"])[0]
    config = _config(family, LAYERS)
    config.scale_attn_by_inverse_layer_idx = True
    torch.manual_seed(0)
    model = _drawn(transformers.AutoModelForCausalLM.from_config(config).eval())
    kept, sources = plan_template(_kinds(model, LAYERS))
    template = _export(_template(model, kept), "onnxruntime")
    plan = LayerPlan(kept, sources, layer_names.layer_of, layer_names.renamed, lambda t, j, i: t)
    with pytest.raises(LayerRepeatRefused) as refused:
        repeat_layers(template, plan)
    assert "layers 1 and 2" in refused.value.reason


class _IndexedLayer(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(x)) * (self.index + 1)


class _Stack(torch.nn.Module):
    """A user's own stack whose layer ``k`` scales by ``k + 1``: its layers' weights are
    named by their index (``layers.k.linear.weight``), their graphs differ by it."""

    def __init__(self, indices: list[int]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_IndexedLayer(i) for i in indices)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("optimize", [True, False])
def test_a_users_layers_that_differ_by_their_index_are_refused(optimize):
    import dynamo_onnx

    template = dynamo_onnx.export(_Stack([0, 1, 2]), (torch.randn(2, 8),), optimize=optimize)
    kept, sources = plan_template(["layer"] * 6)
    plan = LayerPlan(kept, sources, layer_names.layer_of, layer_names.renamed, lambda t, j, i: t)
    with pytest.raises(LayerRepeatRefused) as refused:
        repeat_layers(template.model, plan)
    assert "layers 1 and 2" in refused.value.reason


def test_a_wrong_plan_gives_another_graph(exports):
    """Gemma 2's full-attention layer 5 repeating the template's sliding layer: each part
    reads what it should, so nothing refuses it, and the graph is not the model's."""
    full, template, kept, sources, weights = exports("gemma2", "onnxruntime")
    wrong = (*sources[:5], sources[4], *sources[6:])
    assert wrong != sources
    repeated = repeat_layers(template, _plan(kept, wrong, full, template, weights))
    assert graph_differences(repeated, full) != []
