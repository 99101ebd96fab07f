"""The shape of the code, enforced: import direction, no cycles, one place that opens a pass,
one way to fail, and message fields that match their rules (docs/architecture.md)."""

from __future__ import annotations

import ast
import functools
import importlib
import pathlib
import re

import pytest

from dynamo_onnx.rules import catalog

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "dynamo_onnx"

#: Lower layers never import higher ones. Within a layer, a unit imports only itself, except
#: the edges in SAME_LAYER_EDGES.
LAYERS = {
    "errors": 0,
    "defaults": 0,
    "versions": 0,
    "fake": 0,
    "tensors": 0,
    "files": 0,
    "torch_onnx_names": 0,
    "deferred_imports": 0,  # onnxscript's optimizer and rewriter loaded when first used
    "rules": 1,
    "options": 2,
    "diagnostics": 3,
    "reports": 4,
    "registry": 4,
    "io": 4,
    "foreign_text": 4,
    "onnx_tools": 5,  # reads sessions (io); below families, passes and runtimes
    "specs": 5,  # the shape request: families raise its SpecMismatch
    "integrations": 6,
    "passes": 7,
    "runtimes": 7,
    "program": 8,
    "exporter": 8,
    "llm_folder": 8,
    "multimodal_folder": 8,
    "llm_stream": 8,
    "llm_copy": 8,
    "llm_template": 8,
    "cli": 9,
    "__init__": 9,
}
SAME_LAYER_EDGES = {
    ("exporter", "program"),
    ("cli", "__init__"),
    ("llm_folder", "exporter"),  # export_llm is export, then quantize and save
    ("multimodal_folder", "exporter"),  # export_multimodal too, once per model of the folder
    ("llm_folder", "multimodal_folder"),  # export_llm sends a speech or vision checkpoint there
    ("llm_folder", "llm_stream"),  # export_llm's weights read as they are written
    ("llm_folder", "llm_copy"),  # export_llm's checks on a layer copy
    ("llm_copy", "llm_stream"),  # the peak the copy's note says
    ("llm_folder", "llm_template"),  # export_llm's streamed model made from a template
}
#: What runtimes/ (the same layer as passes/) may import from passes/: the modules every
#: pass shares (a runtime's passes are passes: PassName, the dropped loggers, the metadata
#: keys). Nothing else: a rule or helper both need lives in onnx_tools/.
RUNTIME_FROM_PASSES = {
    "dynamo_onnx.passes.base",
    "dynamo_onnx.passes.logs",
    "dynamo_onnx.passes.metadata",
}
#: Packages that must know nothing of torch, ONNX or the passes.
PURE = {"diagnostics", "reports"}
FORBIDDEN_IN_PURE = {"torch", "onnx", "onnx_ir", "onnxscript", "onnxruntime"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


@functools.cache
def _tree(path: pathlib.Path) -> ast.Module:
    """The parsed source of ``path``, once per session: the checks below walk every module.
    (Read-only: no check changes a tree.)"""
    return ast.parse(path.read_text(), filename=str(path))


def _unit(module: str) -> str:
    """``dynamo_onnx.passes.translate.builder`` -> ``passes``; the package itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(
    module: str, path: pathlib.Path | None = None, *, type_hints: bool = False
) -> list[tuple[str, int]]:
    """(imported module, line) for every runtime import (not under TYPE_CHECKING, unless
    ``type_hints``) of ``module``, read from ``path`` (default: its file in src/)."""
    path = path or MODULES[module]
    tree = _tree(path)
    skip = set() if type_hints else _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + [base]
                ).strip(".")
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((candidate if candidate in MODULES else base, node.lineno))
    return found


def _local_edges(*, type_hints: bool = False) -> dict[str, list[tuple[str, int]]]:
    return {
        module: [
            (target, line)
            for target, line in _imports(module, type_hints=type_hints)
            if target in MODULES and target != module
        ]
        for module in MODULES
    }


#: The multimodal families of the transformers integration, by module name prefix: each
#: family's modules import what they share (``multimodal_parts``, ``genai``...), never
#: another family's module.
MULTIMODAL_FAMILIES = ("whisper", "qwen2_5_vl")
_TRANSFORMERS = "dynamo_onnx.integrations.transformers."


def _family(module: str) -> str | None:
    name = module.removeprefix(_TRANSFORMERS)
    if name == module:
        return None
    return next((f for f in MULTIMODAL_FAMILIES if name.startswith(f)), None)


def _across_families(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    return [
        f"{module}:{line} {module} -> {target}"
        for module, imported in edges.items()
        for target, line in imported
        if _family(module) and _family(target) and _family(module) != _family(target)
    ]


def test_no_multimodal_family_imports_another():
    offenders = _across_families(_local_edges())
    assert not offenders, offenders
    whisper = _TRANSFORMERS + "whisper_folder"
    qwen = _TRANSFORMERS + "qwen2_5_vl_folder"
    assert _across_families({qwen: [(whisper, 41)]}) == [f"{qwen}:41 {qwen} -> {whisper}"]


def test_every_unit_has_a_layer():
    assert {_unit(m) for m in MODULES} <= set(LAYERS), sorted(
        {_unit(m) for m in MODULES} - set(LAYERS)
    )


def _against_the_layers(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    """``module:line module -> target`` for each import of a unit at the same or a higher
    layer (other than SAME_LAYER_EDGES)."""
    offenders = []
    for module, imported in edges.items():
        source = _unit(module)
        for target, line in imported:
            dest = _unit(target)
            if source == dest or (source, dest) in SAME_LAYER_EDGES:
                continue
            if (source, dest) == ("runtimes", "passes") and target in RUNTIME_FROM_PASSES:
                continue
            if LAYERS[dest] >= LAYERS[source]:
                offenders.append(f"{module}:{line} {module} -> {target}")
    return offenders


def test_imports_point_one_way():
    offenders = _against_the_layers(_local_edges())
    assert not offenders, offenders


def test_a_runtime_importing_a_pass_internal_is_found():
    """The check above on made-up edges: a runtime module importing a pass's own module
    (finalize, the load check) is an offender, the shared ones and onnx_tools/ are not."""
    module = "dynamo_onnx.runtimes.onnxruntime.offender"
    edges = {
        module: [
            ("dynamo_onnx.passes.base", 3),
            ("dynamo_onnx.passes.onnx_graph.finalize", 4),
            ("dynamo_onnx.passes.onnx_graph.load_check", 5),
            ("dynamo_onnx.onnx_tools.loading", 6),
        ]
    }
    assert _against_the_layers(edges) == [
        f"{module}:4 {module} -> dynamo_onnx.passes.onnx_graph.finalize",
        f"{module}:5 {module} -> dynamo_onnx.passes.onnx_graph.load_check",
    ]


#: Type-hint imports allowed to close a cycle, with the reason. An error carries the
#: context that raised it (``error.diagnostics``), and the context raises errors: errors.py,
#: below every module, names the context's type under TYPE_CHECKING only.
HINT_CYCLE_EDGES = {("dynamo_onnx.errors", "dynamo_onnx.diagnostics")}


def _cycles(edges: dict[str, list[str]]) -> list[str]:
    """``a -> b -> a`` for each import cycle found by a depth-first walk of ``edges``."""
    state: dict[str, int] = {}
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in edges.get(module, []):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in edges:
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_cycles():
    """None at run time, and none through type hints either (but HINT_CYCLE_EDGES): a
    module's place in the layers is the same for the reader as for the interpreter."""
    assert not _cycles({m: [t for t, _ in e] for m, e in _local_edges().items()})
    hinted = {
        m: [t for t, _ in e if (m, t) not in HINT_CYCLE_EDGES]
        for m, e in _local_edges(type_hints=True).items()
    }
    cycles = _cycles(hinted)
    assert not cycles, cycles


def test_the_import_cycle_check_can_fail(tmp_path):
    """The check above on a made-up circle of three modules, one edge a type hint (as the
    options' ``OnnxRegistry`` hint closed a circle through the registry's opset constant)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from dynamo_onnx.registry import OnnxRegistry\n"
        "if TYPE_CHECKING:\n"
        "    from dynamo_onnx.diagnostics import DiagnosticContext\n"
    )
    path = tmp_path / "offender.py"
    path.write_text(source)
    module = "dynamo_onnx.options"
    hinted = [t for t, _ in _imports(module, path, type_hints=True) if t in MODULES]
    assert hinted == ["dynamo_onnx.registry", "dynamo_onnx.diagnostics"]
    assert [t for t, _ in _imports(module, path) if t in MODULES] == ["dynamo_onnx.registry"]
    edges = {
        module: hinted,
        "dynamo_onnx.registry": ["dynamo_onnx.defaults"],
        "dynamo_onnx.diagnostics": ["dynamo_onnx.errors", "dynamo_onnx.options"],
    }
    assert _cycles(edges) == [
        "dynamo_onnx.options -> dynamo_onnx.diagnostics -> dynamo_onnx.options"
    ]
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a -> b -> c -> a"]


def _impure(imports: dict[str, list[tuple[str, int]]]) -> list[str]:
    """``module:line imports target`` for each import of torch, ONNX or a pass by a module
    of the PURE packages."""
    offenders = []
    for module, imported in imports.items():
        if _unit(module) not in PURE:
            continue
        for target, line in imported:
            top = target.split(".")[0]
            if top in FORBIDDEN_IN_PURE or target.startswith("dynamo_onnx.passes"):
                offenders.append(f"{module}:{line} imports {target}")
    return offenders


def test_diagnostics_and_reports_know_nothing_of_torch_onnx_or_passes():
    offenders = _impure({module: _imports(module) for module in MODULES})
    assert not offenders, offenders


_OFFENDER = """\
from __future__ import annotations

from typing import TYPE_CHECKING

import onnx_ir as ir
from dynamo_onnx.passes.capture import CapturePass
from ..reports import sarif

if TYPE_CHECKING:
    import torch
"""


def test_the_layer_and_purity_checks_can_fail(tmp_path):
    """The two checks above, on a made-up module of diagnostics/ (layer 3) that imports a
    pass (layer 6), the reports (layer 4) and onnx_ir: each is found, with its line; the
    import under TYPE_CHECKING is not."""
    path = tmp_path / "offender.py"
    path.write_text(_OFFENDER)
    module = "dynamo_onnx.diagnostics.offender"
    imports = _imports(module, path)
    local = [(target, line) for target, line in imports if target in MODULES]
    assert _against_the_layers({module: local}) == [
        f"{module}:6 {module} -> dynamo_onnx.passes.capture",
        f"{module}:7 {module} -> dynamo_onnx.reports.sarif",
    ]
    assert _impure({module: imports}) == [
        f"{module}:5 imports onnx_ir",
        f"{module}:6 imports dynamo_onnx.passes.capture",
    ]


def _eval_calls(module: str, path: pathlib.Path | None = None) -> list[str]:
    """``module:line`` for each call of the builtin ``eval`` or ``exec`` in ``module``."""
    return [
        f"{module}:{node.lineno}"
        for node in ast.walk(_tree(path or MODULES[module]))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("eval", "exec")
    ]


def _reads_text_itself(module: str, path: pathlib.Path | None = None) -> list[str]:
    """``module:line`` for each runtime import of ``re`` by ``module`` and each ``eval`` or
    ``exec`` in it: a pass that parses text with a regular expression, or runs text,
    instead of taking the records of ``dynamo_onnx.foreign_text``."""
    path = path or MODULES[module]
    imports = [f"{module}:{line}" for target, line in _imports(module, path) if target == "re"]
    return imports + _eval_calls(module, path)


def test_foreign_text_is_read_in_one_module():
    """torch's and ONNX Runtime's words are read into typed records by
    ``dynamo_onnx/foreign_text/`` (a reader a module, tested on recorded text in
    tests/foreign_text/);
    no pass imports ``re`` or evaluates text, so a reworded message cannot hide in a pass."""
    offenders = [
        offender
        for module in MODULES
        if module.startswith("dynamo_onnx.passes")
        for offender in _reads_text_itself(module)
    ]
    assert not offenders, offenders


#: The concepts of transformers, as source names them; only integrations/ may (docs/architecture.md,
#: "Model families as plug-ins"). Checked on the whole text: code, strings, comments.
FAMILY_CONCEPTS = {
    "the cache parameter `past_key_values`": re.compile(r"\bpast_key_values\b"),
    "the cache outputs `present.N`": re.compile(r"\bpresent\.(\d|%d|<|\{)"),
    "a transformers cache class": re.compile(
        r"\b(Dynamic|Static|Hybrid|SlidingWindow|EncoderDecoder|Offloaded|Quantized)Cache\b"
        r"|\bDynamicLayer\b|\bcache_utils\b"
    ),
    "`config.model_type`": re.compile(r"\bmodel_type\b"),
    "`use_cache`": re.compile(r"\buse_cache\b"),
    "`import transformers`": re.compile(r"^\s*(import|from)\s+transformers\b"),
    "transformers' `ModelOutput`": re.compile(r"\bModelOutput\b"),
    "onnxruntime-genai's `genai_config`": re.compile(r"\bgenai_config\b"),
}
#: The families' own code; generic code reaches it only through the protocol.
INTEGRATIONS = "dynamo_onnx.integrations"
#: The modules generic code may import from integrations/: the protocol and the registry.
PROTOCOL_MODULES = {INTEGRATIONS, f"{INTEGRATIONS}.base"}


def _family_concepts(module: str, text: str) -> list[str]:
    """``module:line names <concept>`` for each line of ``text`` naming a transformers
    concept, unless ``module`` is in integrations/."""
    if module == INTEGRATIONS or module.startswith(f"{INTEGRATIONS}."):
        return []
    return [
        f"{module}:{number} names {concept}"
        for number, line in enumerate(text.splitlines(), 1)
        for concept, pattern in FAMILY_CONCEPTS.items()
        if pattern.search(line)
    ]


def _family_imports(module: str, imported: list[tuple[str, int]]) -> list[str]:
    """``module:line imports <family module>`` for each import of a family's own module
    (not the protocol) by a module outside integrations/."""
    if module == INTEGRATIONS or module.startswith(f"{INTEGRATIONS}."):
        return []
    return [
        f"{module}:{line} imports {target}"
        for target, line in imported
        if target.startswith(f"{INTEGRATIONS}.") and target not in PROTOCOL_MODULES
    ]


def test_no_generic_module_names_a_transformers_concept():
    """transformers lives in integrations/transformers/; the rest of the exporter asks
    the family that recognizes a value (issue 34)."""
    offenders = [
        found
        for module, path in MODULES.items()
        for found in _family_concepts(module, path.read_text())
        + _family_imports(module, _imports(module))
    ]
    assert not offenders, offenders


def test_nothing_evaluates_text():
    """No module of src/ calls ``eval`` or ``exec`` (a guard's text is evaluated by walking
    its syntax: ``ProgramCondition.holds_at``)."""
    offenders = [offender for module in MODULES for offender in _eval_calls(module)]
    assert not offenders, offenders


_TEXT_READER = """\
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import re as _typing_only


def cause(exc):
    return re.search("guard added", str(exc))


def holds(text):
    return eval(text, {"math": math})
"""


def test_the_foreign_text_check_can_fail(tmp_path):
    """The check above, on a made-up pass that imports ``re`` and evaluates a guard's text:
    both lines are found; the import under TYPE_CHECKING is not. A clean module is."""
    path = tmp_path / "offender.py"
    path.write_text(_TEXT_READER)
    module = "dynamo_onnx.passes.offender"
    assert _reads_text_itself(module, path) == [f"{module}:4", f"{module}:16"]
    clean = tmp_path / "clean.py"
    clean.write_text("from dynamo_onnx.foreign_text import read_ort_error\n")
    assert _reads_text_itself("dynamo_onnx.passes.clean", clean) == []


_FAMILY_OFFENDER = """\
from __future__ import annotations

from transformers import DynamicCache
from dynamo_onnx.integrations import family_of
from dynamo_onnx.integrations.transformers.caches import is_cache


def takes_cache(model, value):
    # the ONNX inputs are named past_key_values.0.key, the outputs present.0.key
    return is_cache(value) or model.config.model_type == "llama" and model.config.use_cache
"""


def test_the_transformers_concepts_check_can_fail(tmp_path):
    """The check above, on a made-up pass that imports transformers and a family's module
    and reads a config: each concept is found on its line, the protocol's import is not;
    the same text inside integrations/ is allowed."""
    path = tmp_path / "offender.py"
    path.write_text(_FAMILY_OFFENDER)
    module = "dynamo_onnx.passes.offender"
    assert _family_concepts(module, _FAMILY_OFFENDER) == [
        f"{module}:3 names a transformers cache class",
        f"{module}:3 names `import transformers`",
        f"{module}:9 names the cache parameter `past_key_values`",
        f"{module}:9 names the cache outputs `present.N`",
        f"{module}:10 names `config.model_type`",
        f"{module}:10 names `use_cache`",
    ]
    assert _family_imports(module, _imports(module, path)) == [
        f"{module}:5 imports dynamo_onnx.integrations.transformers.caches"
    ]
    inside = "dynamo_onnx.integrations.transformers.offender"
    assert _family_concepts(inside, _FAMILY_OFFENDER) == []
    for generic in ("dynamo_onnx.cli.export_llm", "dynamo_onnx.runtimes.onnxruntime.offender"):
        # the command line and the runtimes are generic code too
        assert _family_concepts(generic, "names = ['past_key_values']") == [
            f"{generic}:1 names the cache parameter `past_key_values`"
        ]
        assert _family_imports(generic, _imports(generic, path)) == [
            f"{generic}:5 imports dynamo_onnx.integrations.transformers.caches"
        ]
    assert _family_imports(inside, _imports(inside, path)) == []


#: What generic code must not name: the library a family wraps, its model families, a
#: family's attention conventions (issue 47: the runtime holds generic rewrite rules only and
#: receives a family's through ``ModelFamily.runtime_steps``; a pass asks the family through
#: the protocol). Checked on the whole text: a comment citing a family as its example is
#: written in generic terms (an attention, a KV cache, a language model) instead.
FAMILY_NAMES = {
    "the library `transformers`": re.compile(r"\btransformers\b"),
    "a model family": re.compile(
        r"\b(Gemma|Llama|Mistral|Mixtral|Qwen|Phi-?\d|GPT-?2|Whisper|T5\b)", re.IGNORECASE
    ),
    "a family's soft-capping (`attn_logit_softcapping`)": re.compile(r"softcapping"),
}
#: The folders that know no family, by their place in the source tree (a folder renamed
#: within them, ``passes/onnx_graph/`` -> ``passes/onnx_graph/``, stays covered): the runtimes,
#: the ONNX helpers below them, the command line (export-llm hands a folder to export_llm;
#: the family is found there) and every pass (a pass asks the installed families).
FAMILY_FREE = ("runtimes", "onnx_tools", "cli", "passes")


def _family_free(module: str) -> bool:
    """Whether ``module`` lives in one of the FAMILY_FREE folders of the package, at any
    depth."""
    parts = module.split(".")
    return parts[0] == "dynamo_onnx" and len(parts) > 1 and parts[1] in FAMILY_FREE


def _family_names(module: str, text: str) -> list[str]:
    """``module:line names <concept>`` for each line of a family-free module naming one."""
    if not _family_free(module):
        return []
    return [
        f"{module}:{number} names {concept}"
        for number, line in enumerate(text.splitlines(), 1)
        for concept, pattern in FAMILY_NAMES.items()
        if pattern.search(line)
    ]


def test_generic_code_names_no_model_family():
    """No module of runtimes/, onnx_tools/, cli/ or passes/ names transformers, a model
    family or a family's convention."""
    offenders = [
        found
        for module, path in MODULES.items()
        for found in _family_names(module, path.read_text())
    ]
    assert not offenders, offenders


_RUNTIME_OFFENDER = '''\
"""Rewrite rules for the graphs torch.export makes from transformers 5."""


class SoftcappedAttention:
    """Gemma 2's attn_logit_softcapping, fused as for a Llama."""
'''

_PASS_OFFENDER = """\
def reshaped(node):
    # a view whose strides changed at re-trace (GPT-2, T5): a Reshape
    return node  # T5x and Phi are other words; Phi-3 is a family
"""


def test_the_family_name_check_can_fail():
    """The check above, on made-up modules that name transformers, Gemma's soft cap and
    Llama (a runtime), GPT-2, T5 and Phi-3 (a pass, in a folder of passes that exists and
    one that does not yet): each on its line; the same text in integrations/ is allowed,
    and so is it in a module outside the family-free folders."""
    module = "dynamo_onnx.runtimes.onnxruntime.offender"
    assert _family_names(module, _RUNTIME_OFFENDER) == [
        f"{module}:1 names the library `transformers`",
        f"{module}:5 names a model family",
        f"{module}:5 names a family's soft-capping (`attn_logit_softcapping`)",
    ]
    assert _family_names("dynamo_onnx.integrations.transformers.x", _RUNTIME_OFFENDER) == []
    assert _family_names("dynamo_onnx.onnx_tools.x", "a Whisper encoder") == [
        "dynamo_onnx.onnx_tools.x:1 names a model family"
    ]
    assert _family_names("dynamo_onnx.cli.export_llm", "help='a Llama folder'") == [
        "dynamo_onnx.cli.export_llm:1 names a model family"
    ]
    assert _family_names("dynamo_onnx.cli", "import transformers") == [
        "dynamo_onnx.cli:1 names the library `transformers`"
    ]
    for module in (
        "dynamo_onnx.passes.decompose.rewrites",
        "dynamo_onnx.passes.onnx_graph.weights",  # after the planned rename
        "dynamo_onnx.passes.fx",
    ):
        assert _family_names(module, _PASS_OFFENDER) == [
            f"{module}:2 names a model family",
            f"{module}:3 names a model family",
        ]
    assert _family_names("dynamo_onnx.passes", "a Gemma 2") == [
        "dynamo_onnx.passes:1 names a model family"
    ]
    assert _family_names("dynamo_onnx.program", _PASS_OFFENDER) == []
    assert _family_names("dynamo_onnx.passes_extra", _PASS_OFFENDER) == []


def _protocol_gaps(protocol: type, family: object) -> list[str]:
    """``name: <what is wrong>`` for each method or attribute of ``protocol`` that
    ``family`` lacks or takes with other parameters."""
    import inspect

    gaps = []
    members = [n for n in vars(protocol) if not n.startswith("_") or n == "__call__"]
    for name in [*members, *getattr(protocol, "__annotations__", {})]:
        if not hasattr(family, name):
            gaps.append(f"{name}: missing")
            continue
        wanted = vars(protocol).get(name)
        if callable(wanted) and not isinstance(wanted, type):
            given = getattr(family, name)
            want = list(inspect.signature(wanted).parameters)[1:]
            have = list(inspect.signature(given).parameters)
            if want != have:
                gaps.append(f"{name}: takes {have}, the protocol {want}")
    return sorted(set(gaps))


def test_every_installed_family_implements_the_protocol():
    from dynamo_onnx.integrations import families
    from dynamo_onnx.integrations.base import ModelFamily

    assert [family.name for family in families()] == ["transformers"]
    for family in families():
        assert _protocol_gaps(ModelFamily, family) == [], family.name


def test_the_protocol_check_can_fail():
    """A made-up family taking other parameters in one method, and one that has none."""
    from dynamo_onnx.integrations import families
    from dynamo_onnx.integrations.base import ModelFamily

    class Partial(type(families()[0])):
        def output_names(self, spec):  # the protocol takes paths
            return None

    gaps = _protocol_gaps(ModelFamily, Partial())
    assert gaps == ["output_names: takes ['spec'], the protocol ['paths']"]

    class Missing:
        name = "missing"

    assert "recognizes: missing" in _protocol_gaps(ModelFamily, Missing())


def _calls(method: str):
    """(module, call node) for every ``<something>.<method>(...)`` call in src/."""
    for module, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == method
            ):
                yield module, node


def test_only_run_pipeline_opens_a_pass():
    openers = {module for module, _ in _calls("pass_")}
    assert openers == {"dynamo_onnx.passes.base"}


#: Keyword arguments of ctx.record / ctx.fail that are not message fields.
_RESERVED = {"level", "locations", "stack", "related", "properties", "markdown"}


def _on_a_context(call: ast.Call) -> bool:
    """``ctx.record(...)``, ``self.ctx.fail(...)``: not another library's ``result.fail``."""
    receiver = call.func.value  # type: ignore[attr-defined]
    name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
    return name == "ctx"


def _checked_calls():
    for method, rule_arg in (("record", 0), ("fail", 0)):
        for module, call in _calls(method):
            if len(call.args) <= rule_arg or not isinstance(call.args[rule_arg], ast.Constant):
                continue
            if _on_a_context(call):
                yield module, method, call


def test_every_record_and_fail_call_gives_its_rules_fields():
    problems = []
    checked = 0
    for module, method, call in _checked_calls():
        rule = catalog().get(call.args[0].value)
        if any(k.arg is None for k in call.keywords):
            continue  # **fields: checked at run time by Rule.format_message
        given = {k.arg for k in call.keywords} - _RESERVED
        missing = set(rule.fields) - given
        if missing:
            problems.append(f"{module}:{call.lineno} {method}({rule.id}) misses {sorted(missing)}")
        checked += 1
    assert checked >= 30  # the check reads the calls it means to
    assert not problems, problems


#: Modules that render a rule's fix (not an error): the rules page, SARIF and markdown.
RENDERERS = {"dynamo_onnx.rules.docs", "dynamo_onnx.reports.sarif", "dynamo_onnx.reports.markdown"}


def test_errors_are_built_in_one_place():
    """No hand-written ``Fix:`` and no message formatting outside the context and options."""
    allowed = {"dynamo_onnx.errors", "dynamo_onnx.diagnostics.context", "dynamo_onnx.options"}
    offenders = [
        f"{module}:{call.lineno}"
        for module, path in MODULES.items()
        if module not in allowed
        for call in ast.walk(_tree(path))
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "format_message"
    ]
    offenders += [
        f"{module}: 'Fix:'"
        for module, path in MODULES.items()
        if module not in allowed | RENDERERS and "Fix:" in path.read_text()
    ]
    assert not offenders, offenders


@pytest.mark.parametrize("rule", list(catalog()), ids=lambda r: r.id)
def test_each_rule_has_a_one_line_fix(rule):
    assert rule.fix.strip() == rule.fix and "\n" not in rule.fix
    assert rule.fix.endswith((".", ")")) and len(rule.fix.split()) >= 4


SHARED_PASS_MODULES = {
    "base",
    "collector",
    "contract",
    "domains",
    "fx",
    "logs",
    "metadata",
    "model",
    "probe",
    "real_weights",
}


#: Folders of passes: each module of one that defines a pass is a pass of its own; the
#: folder's other modules are shared by its passes.
PASS_FOLDERS = {"onnx_graph"}


def _defines_a_pass(tree: ast.Module) -> bool:
    """Whether the module defines a pass: a class that declares ``changes_input``."""
    return any(
        isinstance(node, ast.ClassDef)
        and any(
            isinstance(item, (ast.Assign, ast.AnnAssign))
            and "changes_input"
            in ast.unparse(item.target if isinstance(item, ast.AnnAssign) else item.targets[0])
            for item in node.body
        )
        for node in tree.body
    )


def _pass_of(module: str, pass_modules: set[str]) -> str | None:
    """The pass ``module`` belongs to (``passes.capture``, ``passes.onnx_graph.opset``), or None
    for a module every pass shares (of SHARED_PASS_MODULES, or a folder's helper)."""
    parts = module.split(".")
    if parts[:2] != ["dynamo_onnx", "passes"] or len(parts) < 3:
        return None
    if parts[2] in SHARED_PASS_MODULES:
        return None
    if parts[2] in PASS_FOLDERS and len(parts) > 3:
        return ".".join(parts[:4]) if module in pass_modules else None
    return ".".join(parts[:3])


def _pass_internals(edges: dict[str, list[tuple[str, int]]], pass_modules: set[str]) -> list[str]:
    """``module:line imports target`` for each module of passes/ that imports a module of
    another pass (in another package, or another pass of the same folder)."""
    offenders = []
    for module, imported in edges.items():
        if not module.startswith("dynamo_onnx.passes."):
            continue
        own = _pass_of(module, pass_modules)
        for target, line in imported:
            other = _pass_of(target, pass_modules)
            if other is not None and other != own:
                offenders.append(f"{module}:{line} imports {target}")
    return offenders


def _pass_modules() -> set[str]:
    return {m for m, path in MODULES.items() if _defines_a_pass(_tree(path))}


def test_a_pass_never_imports_another_pass():
    edges = {module: _imports(module) for module in MODULES}
    offenders = _pass_internals(edges, _pass_modules())
    assert not offenders, offenders


def test_the_pass_internals_check_can_fail():
    """The check above on made-up edges: a pass of passes/onnx_graph/ importing another of the
    folder (opset -> optimize), a helper importing a pass (the load check), and a pass
    importing another package's pass are offenders; the folder's helpers, the shared
    modules and onnx_tools/ are not."""
    passes = {
        "dynamo_onnx.passes.onnx_graph.opset",
        "dynamo_onnx.passes.onnx_graph.optimize",
        "dynamo_onnx.passes.onnx_graph.load_check",
    }
    assert _defines_a_pass(ast.parse("class P:\n    changes_input: ClassVar[bool] = False\n"))
    assert not _defines_a_pass(ast.parse("def changes_input(): ...\n"))
    opset, lowerings = (
        "dynamo_onnx.passes.onnx_graph.opset",
        "dynamo_onnx.passes.onnx_graph.lowerings",
    )
    edges = {
        opset: [
            ("dynamo_onnx.passes.onnx_graph.optimize", 3),
            ("dynamo_onnx.passes.onnx_graph.steps", 4),
            ("dynamo_onnx.passes.onnx_graph.lowerings", 5),
            ("dynamo_onnx.passes.metadata", 6),
            ("dynamo_onnx.onnx_tools.older_opsets", 7),
            ("dynamo_onnx.passes.capture.causes", 8),
        ],
        lowerings: [("dynamo_onnx.passes.onnx_graph.load_check", 9)],
    }
    assert _pass_internals(edges, passes) == [
        f"{opset}:3 imports dynamo_onnx.passes.onnx_graph.optimize",
        f"{opset}:8 imports dynamo_onnx.passes.capture.causes",
        f"{lowerings}:9 imports dynamo_onnx.passes.onnx_graph.load_check",
    ]


def _steps_named_as_passes(module: str, tree: ast.Module) -> list[str]:
    """``module:line Name`` for each onnx_ir step (a subclass of ``ir.passes``' classes,
    directly or through a class of the same module) named ``...Pass``: "Pass" is our
    contract (``__call__(ctx, state)``), onnx_ir's steps (``call(model)``) are ``...Step``
    (or a kind of their own, like ``...Lowering``)."""
    steps: set[str] = set()
    found = []
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for node in sorted(classes, key=lambda n: n.lineno):
        bases = [ast.unparse(b) for b in node.bases]
        if any("passes." in b or b in steps for b in bases):
            steps.add(node.name)
            if node.name.endswith("Pass"):
                found.append(f"{module}:{node.lineno} {node.name}")
    return found


def test_onnx_ir_steps_are_not_named_as_our_passes():
    offenders = [o for m, path in MODULES.items() for o in _steps_named_as_passes(m, _tree(path))]
    assert not offenders, offenders


def test_the_step_name_check_can_fail():
    source = (
        "import onnx_ir as ir\n"
        "class RenameDimsPass(ir.passes.InPlacePass): ...\n"
        "class _Base(ir.passes.FunctionalPass): ...\n"
        "class FoldPass(_Base): ...\n"
        "class FoldStep(_Base): ...\n"
        "class CapturePass: ...\n"  # ours: allowed
    )
    assert _steps_named_as_passes("m", ast.parse(source)) == [
        "m:2 RenameDimsPass",
        "m:4 FoldPass",
    ]


#: What the passes after validation read instead of the raw request: the checked one.
_RAW_STATE = {
    "request": "the raw request (read the checked one: state.checked)",
    "model_location": "the context's report anchor (read state.checked.model_location)",
}
#: The findings log is an output: no pass decides anything from it.
_LOG_READS = {"findings", "by_rule", "passes", "visible", "has_errors"}


def _reads(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, object, attribute) for each ``obj.attr`` read where ``obj`` is a plain name."""
    return [
        (node.lineno, node.value.id, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and isinstance(node.ctx, ast.Load)
    ]


def _pass_modules_after_validation() -> list[str]:
    return [
        m
        for m in MODULES
        if m.startswith("dynamo_onnx.passes.")
        and not m.startswith("dynamo_onnx.passes.validate")
        and m != "dynamo_onnx.passes.base"
    ]


def test_no_pass_after_validation_reads_the_raw_request_or_the_findings_log():
    offenders = []
    for module in _pass_modules_after_validation():
        tree = _tree(MODULES[module])
        for line, obj, attr in _reads(tree):
            if obj == "state" and attr == "request":
                offenders.append(f"{module}:{line} reads state.request: {_RAW_STATE['request']}")
            if obj == "ctx" and attr == "model_location":
                offenders.append(f"{module}:{line} reads ctx.model_location")
            if obj == "ctx" and attr in _LOG_READS:
                offenders.append(f"{module}:{line} reads ctx.{attr}: the log is an output")
    assert not offenders, offenders


def test_the_architecture_check_catches_a_pass_reading_the_raw_request():
    """The check above on a made-up pass that reads ``state.request``: it must be found."""
    tree = ast.parse("def f(ctx, state):\n    return state.request.opset_version, ctx.by_rule('x')")
    reads = {(obj, attr) for _, obj, attr in _reads(tree)}
    assert ("state", "request") in reads and ("ctx", "by_rule") in reads


def test_every_pass_says_whether_it_changes_its_input():
    """Each pass declares it; whether the declaration is true is checked by run_pipeline on
    every pipeline the suite runs (the check is on, tests/conftest.py), and the check catches
    a pass that lies (tests/passes/test_pass_contract.py)."""
    import inspect

    from dynamo_onnx.passes import contract

    assert contract.checking(), f"tests/conftest.py sets {contract.CHECK_VARIABLE}"

    for module in _pass_modules_after_validation() + ["dynamo_onnx.passes.validate"]:
        mod = importlib.import_module(module)
        for name, cls in vars(mod).items():
            if inspect.isclass(cls) and cls.__module__ == module and hasattr(cls, "error_type"):
                assert isinstance(vars(cls).get("changes_input"), bool), f"{module}.{name}"


def _frame_local_channels(module: str, source: str, tree: ast.Module | None = None) -> list[str]:
    """Values handed from one function to another through a stack frame: a read of a frame's
    ``f_locals``, a dunder-named local assigned in a function (read by a callee walking the
    stack), a local kept only for that (``noqa: F841``)."""
    tree = tree or ast.parse(source)
    offenders = [
        f"{module}:{node.lineno} reads f_locals"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "f_locals"
    ]
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            offenders += [
                f"{module}:{node.lineno} sets the frame local {target.id}"
                for target in targets
                if isinstance(target, ast.Name)
                and target.id.startswith("__")
                and target.id.endswith("__")
            ]
    offenders += [
        f"{module}:{i} keeps an unused local (noqa: F841)"
        for i, line in enumerate(source.splitlines(), 1)
        if "noqa: F841" in line
    ]
    return sorted(set(offenders))


def test_no_value_is_passed_through_a_stack_frame():
    offenders = [
        o
        for module, path in MODULES.items()
        for o in _frame_local_channels(module, path.read_text(), _tree(path))
    ]
    assert not offenders, offenders


def test_the_frame_local_check_can_fail():
    """The check above, on a made-up caller and callee that talk through a frame."""
    source = (
        "import sys\n"
        "def callee():\n"
        "    return sys._getframe(1).f_locals.get('__where__')\n"
        "def caller():\n"
        "    __where__ = 'here'  # noqa: F841\n"
        "    return callee()\n"
        "__all__ = ['caller']\n"  # a module's dunder is no frame local
    )
    assert _frame_local_channels("m", source) == [
        "m:3 reads f_locals",
        "m:5 keeps an unused local (noqa: F841)",
        "m:5 sets the frame local __where__",
    ]


#: A module longer than this says at its top why it is not split: a line ``# size: <reason>``
#: among the comments between its docstring and its first statement (issue 47).
MAX_MODULE_LINES = 500
_SIZE_REASON = re.compile(r"^# size: (?P<reason>\S.{19,})$")


def _size_reason(text: str) -> str | None:
    """The reason written at the top of a module (``# size: ...``), or None."""
    body = ast.parse(text).body
    first = body[0] if body else None
    has_docstring = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    statements = body[1:] if has_docstring else body
    lines = text.splitlines()
    top = lines[: statements[0].lineno - 1] if statements else lines
    found = (_SIZE_REASON.match(line) for line in top)
    return next((m["reason"] for m in found if m), None)


def _oversized(module: str, text: str) -> list[str]:
    """``module: N lines`` when ``module`` is over MAX_MODULE_LINES with no reason at its top."""
    count = len(text.splitlines())
    if count <= MAX_MODULE_LINES or _size_reason(text) is not None:
        return []
    return [f"{module}: {count} lines, and no '# size: <reason>' at its top"]


def test_no_module_is_over_500_lines_without_a_reason_at_its_top():
    offenders = [
        o for module, path in MODULES.items() for o in _oversized(module, path.read_text())
    ]
    assert not offenders, offenders


def test_the_module_size_check_can_fail(tmp_path):
    """The check above on made-up modules: a long one without a reason, with one below its
    first statement or too short to say anything is found; a reason at its top, or a
    module of 500 lines, is not."""
    filler = "".join(f"x{i} = {i}\n" for i in range(MAX_MODULE_LINES))
    docstring = '"""A module that grew."""\n\n'
    reason = "# size: one table of 500 constants, read top to bottom\n\n"
    cases = {
        "no_reason": docstring + "from __future__ import annotations\n" + filler,
        "reason_below": docstring + "import os\n" + reason + filler,
        "empty_reason": docstring + "# size: long\n" + filler,
        "reason": docstring + reason + "from __future__ import annotations\n" + filler,
        "reason_without_docstring": reason + filler,
        "at_the_limit": filler,
    }
    found = {}
    for name, text in cases.items():
        (tmp_path / f"{name}.py").write_text(text)
        found[name] = _oversized(name, (tmp_path / f"{name}.py").read_text())
    assert {name for name, offenders in found.items() if offenders} == {
        "no_reason",
        "reason_below",
        "empty_reason",
    }
    assert found["no_reason"] == [
        f"no_reason: {MAX_MODULE_LINES + 3} lines, and no '# size: <reason>' at its top"
    ]


def _is_opset_number(node: ast.AST | None) -> bool:
    """An int literal an export could target (7 and up: 0 stands for "none", 1 for a custom
    domain's first version)."""
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
        and node.value >= 7
    )


def _names_opset(node: ast.AST) -> bool:
    return "opset" in ast.unparse(node).lower()


def _literal_opset_defaults(module: str, tree: ast.Module) -> list[str]:
    """Where ``module`` picks an opset by a number of its own: a name or parameter with
    "opset" in it given an int literal (``opset: int = 18``, ``def f(opset_version=20)``,
    ``OPSET = 18``), ``opset_imports.get("", 18)``, ``opset or 18``, ``20 if opset is None
    else opset``. Every default opset comes from dynamo_onnx.defaults."""
    found: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            if _is_opset_number(node.value) and any(_names_opset(t) for t in node.targets):
                found.append(node.lineno)
        elif isinstance(node, ast.AnnAssign):
            if _is_opset_number(node.value) and _names_opset(node.target):
                found.append(node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = [*a.posonlyargs, *a.args]
            pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            found += [
                d.lineno for arg, d in pairs if "opset" in arg.arg.lower() and _is_opset_number(d)
            ]
        elif isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in ("get", "setdefault", "pop")
                and _names_opset(func.value)
                and len(node.args) == 2
                and _is_opset_number(node.args[1])
            ):
                found.append(node.lineno)
            found += [
                k.value.lineno
                for k in node.keywords
                if k.arg and "opset" in k.arg.lower() and _is_opset_number(k.value)
            ]
        elif isinstance(node, ast.IfExp):
            if _names_opset(node.test) and (
                _is_opset_number(node.body) or _is_opset_number(node.orelse)
            ):
                found.append(node.lineno)
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            if _names_opset(node.values[0]) and any(_is_opset_number(v) for v in node.values[1:]):
                found.append(node.lineno)
    return [f"{module}:{line}" for line in sorted(set(found))]


def test_every_default_opset_comes_from_the_defaults_module():
    """One place defines the opset defaults (dynamo_onnx.defaults: 20 for export, 18 for
    dynamo_export, torch_lib's 18); no other module picks one by a number of its own."""
    offenders = [
        o
        for module, path in MODULES.items()
        if module != "dynamo_onnx.defaults"
        for o in _literal_opset_defaults(module, _tree(path))
    ]
    assert not offenders, offenders


def test_the_default_opset_check_can_fail():
    """The check above, on a made-up module with each way of picking an opset by number."""
    source = (
        "OPSET = 18\n"
        "opset: int = 20\n"
        "def convert(model, opset_version=18, *, target_opset=17, size=64):\n"
        "    version = model.opset_imports.get('', 18)\n"
        "    custom = model.opset_imports.get('custom', 1)\n"  # a custom domain's: allowed
        "    chosen = opset_version or 20\n"
        "    return 20 if opset_version is None else opset_version\n"
        "build(opset_version=19)\n"
    )
    assert _literal_opset_defaults("m", ast.parse(source)) == [
        "m:1",
        "m:2",
        "m:3",
        "m:4",
        "m:6",
        "m:7",
        "m:8",
    ]
    assert _literal_opset_defaults("m", ast.parse("size = 20\nopset = model.opset\n")) == []


def _is_context(node: ast.AST) -> bool:
    """``ctx`` or ``<anything>.ctx``: the diagnostic context, by the name the code gives it."""
    return (isinstance(node, ast.Name) and node.id == "ctx") or (
        isinstance(node, ast.Attribute) and node.attr == "ctx"
    )


def _unpacked(target: ast.expr) -> list[ast.expr]:
    """The targets of one assignment target: ``a, (b, *c)`` -> a, b, c."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for element in target.elts for t in _unpacked(element)]
    if isinstance(target, ast.Starred):
        return _unpacked(target.value)
    return [target]


def _context_writes(module: str, tree: ast.Module) -> list[str]:
    """Where ``module`` sets an attribute of the diagnostic context (``ctx.x = ...``,
    ``self.ctx.x += ...``, ``setattr(ctx, ...)``): outside diagnostics/ the context is
    changed through its methods, and what it holds from the start is given to its
    constructor."""
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in _unpacked(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        found += [
            f"{module}:{node.lineno} sets ctx.{t.attr}"
            for t in targets
            if isinstance(t, ast.Attribute) and _is_context(t.value)
        ]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and _is_context(node.args[0])
        ):
            found.append(f"{module}:{node.lineno} calls {node.func.id} on ctx")
    return sorted(found, key=lambda text: int(text.split(":")[1].split()[0]))


def test_no_module_outside_diagnostics_sets_an_attribute_of_the_context():
    offenders = [
        o
        for module, path in MODULES.items()
        if not module.startswith("dynamo_onnx.diagnostics")
        for o in _context_writes(module, _tree(path))
    ]
    assert not offenders, offenders


def test_the_context_write_check_can_fail():
    """The check above, on a made-up module writing the context each way it could."""
    source = (
        "def run(ctx, other):\n"
        "    ctx.model_location = where\n"
        "    other.model_location = where\n"  # not the context: allowed
        "    ctx.summary.operators = []\n"  # the summary's field, filled by the passes
        "    a, ctx.subject = 1, 'x'\n"
        "    ctx.count += 1\n"
        "    setattr(ctx, 'all_rules', True)\n"
        "class Pass:\n"
        "    def __call__(self):\n"
        "        self.ctx.listener: object = None\n"
        "        del ctx.sources\n"
        "        print(ctx.model_location)\n"  # a read: allowed
    )
    assert _context_writes("m", ast.parse(source)) == [
        "m:2 sets ctx.model_location",
        "m:5 sets ctx.subject",
        "m:6 sets ctx.count",
        "m:7 calls setattr on ctx",
        "m:10 sets ctx.listener",
        "m:11 sets ctx.sources",
    ]


#: Where a traceback becomes locations: diagnostics/findings.py's frame_locations (and the
#: context's exception_frames on it). Other modules that read Python's frame summaries, each
#: with its reason.
TRACEBACK_READERS = {
    "dynamo_onnx.diagnostics.findings": "frame_locations: the one place",
    "dynamo_onnx.diagnostics.context": "exception_frames: an exception's, through it",
    "dynamo_onnx.passes.capture.causes": "a library check's source line text, not locations",
    "dynamo_onnx.cli.user_code": "the user's traceback printed as Python prints it (format_list)",
}


def _traceback_readers(module: str, tree: ast.Module) -> list[str]:
    """``module:line calls <call>`` for each call of ``traceback.extract_tb`` /
    ``extract_stack`` / ``walk_tb`` / ``walk_stack``."""
    wanted = {"extract_tb", "extract_stack", "walk_tb", "walk_stack"}
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in wanted
        and ast.unparse(node.func.value) == "traceback"
    ]
    return [
        f"{module}:{node.lineno} calls {ast.unparse(node.func)}"
        for node in sorted(calls, key=lambda n: n.lineno)
    ]


def test_a_traceback_becomes_locations_in_one_place():
    offenders = [
        o
        for module, path in MODULES.items()
        if module not in TRACEBACK_READERS
        for o in _traceback_readers(module, _tree(path))
    ]
    assert not offenders, offenders


def test_the_traceback_check_can_fail():
    source = (
        "import traceback\n"
        "frames = [Location(f.filename, f.lineno, f.name) for f in traceback.extract_tb(tb)]\n"
        "here = traceback.extract_stack()\n"
        "text = traceback.format_exc()\n"  # text, not frames: allowed
    )
    assert _traceback_readers("m", ast.parse(source)) == [
        "m:2 calls traceback.extract_tb",
        "m:3 calls traceback.extract_stack",
    ]


#: Calls that only the one session factory and the one atomic writer make.
SINGLE_DOORS = {
    "InferenceSession": "dynamo_onnx.io.sessions",
    "os.replace": "dynamo_onnx.files",
    "os.rename": "dynamo_onnx.files",
    "shutil.move": "dynamo_onnx.files",
    "tempfile.NamedTemporaryFile": "dynamo_onnx.files",
    "tempfile.mkstemp": "dynamo_onnx.files",
}
BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def _side_doors(module: str, tree: ast.Module) -> list[str]:
    """Where ``module`` makes an ONNX Runtime session or moves a file into place itself
    instead of through ``io.sessions.inference_session`` / ``files``' atomic writer."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = ast.unparse(node.func)
        for door, owner in SINGLE_DOORS.items():
            if module != owner and (called == door or called.endswith("." + door)):
                found.append(f"{module}:{node.lineno} calls {called}")
    return found


def test_sessions_and_atomic_writes_have_one_door_each():
    """One session factory (one SessionOptions policy: logging, threads) and one atomic
    writer, in src/ and in the benchmarks."""
    sources = {**MODULES, **{f"benchmarks.{p.stem}": p for p in sorted(BENCHMARKS.glob("*.py"))}}
    offenders = [o for module, path in sources.items() for o in _side_doors(module, _tree(path))]
    assert not offenders, offenders


def test_the_side_door_check_can_fail():
    source = (
        "import os, onnxruntime as ort, onnxruntime, tempfile\n"
        "s = ort.InferenceSession(path, providers=['CPUExecutionProvider'])\n"
        "t = onnxruntime.InferenceSession(path)\n"
        "os.replace(staged, path)\n"
        "with tempfile.NamedTemporaryFile(delete=False) as f: pass\n"
        "text = path.replace('a', 'b')\n"  # str.replace: not a file
        "inference_session(path)\n"
    )
    assert _side_doors("m", ast.parse(source)) == [
        "m:2 calls ort.InferenceSession",
        "m:3 calls onnxruntime.InferenceSession",
        "m:4 calls os.replace",
        "m:5 calls tempfile.NamedTemporaryFile",
    ]
    assert _side_doors("dynamo_onnx.io.sessions", ast.parse(source))[:1] == [
        "dynamo_onnx.io.sessions:4 calls os.replace"
    ]


def test_the_unit_layer_refuses_a_full_export():
    """This module is in the unit layer (`make test-fast`): an export in it fails, so the
    layer cannot grow slow unnoticed (tests/conftest.py)."""
    import torch

    import dynamo_onnx

    linear, inputs = torch.nn.Linear(2, 2), (torch.randn(1, 2),)
    with pytest.raises(AssertionError, match="a unit test .* ran a full export"):
        dynamo_onnx.export(linear, inputs)
    with pytest.raises(AssertionError, match="a unit test .* ran a full export"):
        torch.onnx.export(linear, inputs, dynamo=True)
