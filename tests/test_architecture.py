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
    "versions": 0,
    "fake": 0,
    "tensors": 0,
    "files": 0,
    "torch_onnx_names": 0,
    "rules": 1,
    "options": 2,
    "diagnostics": 3,
    "reports": 4,
    "registry": 4,
    "io": 4,
    "foreign_text": 4,
    "onnx_tools": 4,
    "integrations": 5,
    "passes": 6,
    "runtimes": 6,
    "program": 7,
    "exporter": 7,
    "llm_folder": 7,
    "speech_folder": 7,
    "llm_stream": 7,
    "llm_copy": 7,
    "cli": 8,
    "__init__": 8,
}
SAME_LAYER_EDGES = {
    ("exporter", "program"),
    ("cli", "__init__"),
    ("llm_folder", "exporter"),  # export_llm is export, then quantize and save
    ("speech_folder", "exporter"),  # export_speech too, once per model of the folder
    ("llm_folder", "speech_folder"),  # export_llm sends a speech checkpoint there
    ("llm_folder", "llm_stream"),  # export_llm's weights read as they are written
    ("llm_folder", "llm_copy"),  # export_llm's checks on a layer copy
    ("llm_copy", "llm_stream"),  # the peak the copy's note says
}
#: What runtimes/ (the same layer as passes/) may import from passes/: the modules every
#: pass shares (a runtime's passes are passes: PassName, the dropped loggers, the metadata
#: keys), and the pass modules a runtime still reads until they move below both (issue 47:
#: the fused model's load check, the attributes of older opsets, the optimizer pipeline).
#: Nothing else: a rule or helper both need lives in onnx_tools/.
RUNTIME_FROM_PASSES = {
    "dynamo_onnx.passes.base",
    "dynamo_onnx.passes.logs",
    "dynamo_onnx.passes.metadata",
    "dynamo_onnx.passes.onnx.load_check",
    "dynamo_onnx.passes.onnx.older_opsets",
    "dynamo_onnx.passes.onnx.optimizer_pipeline",
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


def _imports(module: str, path: pathlib.Path | None = None) -> list[tuple[str, int]]:
    """(imported module, line) for every runtime import (not under TYPE_CHECKING) of
    ``module``, read from ``path`` (default: its file in src/)."""
    path = path or MODULES[module]
    tree = _tree(path)
    skip = _type_checking_lines(tree)
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


def _local_edges() -> dict[str, list[tuple[str, int]]]:
    return {
        module: [
            (target, line)
            for target, line in _imports(module)
            if target in MODULES and target != module
        ]
        for module in MODULES
    }


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
    (finalize) is an offender, the shared ones and those listed are not."""
    module = "dynamo_onnx.runtimes.onnxruntime.offender"
    edges = {
        module: [
            ("dynamo_onnx.passes.base", 3),
            ("dynamo_onnx.passes.onnx.finalize", 4),
            ("dynamo_onnx.passes.onnx.load_check", 5),
        ]
    }
    assert _against_the_layers(edges) == [
        f"{module}:4 {module} -> dynamo_onnx.passes.onnx.finalize"
    ]


def test_no_import_cycles():
    edges = {m: [t for t, _ in e] for m, e in _local_edges().items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in edges[module]:
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in MODULES:
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


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
    ``dynamo_onnx/foreign_text.py`` (tested on recorded text, tests/test_foreign_text.py);
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
    assert _family_imports(inside, _imports(inside, path)) == []


#: What a runtime and the ONNX helpers below it must not name: the library a family wraps,
#: its model families, a family's attention conventions (issue 47: the runtime holds generic
#: rewrite rules only and receives a family's through ``ModelFamily.runtime_steps``).
RUNTIME_CONCEPTS = {
    "the library `transformers`": re.compile(r"\btransformers\b"),
    "a model family": re.compile(
        r"\b(Gemma|Llama|Mistral|Mixtral|Qwen|Phi-?\d|GPT-?2|Whisper)", re.IGNORECASE
    ),
    "a family's soft-capping (`attn_logit_softcapping`)": re.compile(r"softcapping"),
}
#: The packages that know no family.
FAMILY_FREE = ("dynamo_onnx.runtimes", "dynamo_onnx.onnx_tools")


def _runtime_concepts(module: str, text: str) -> list[str]:
    """``module:line names <concept>`` for each line of a family-free module naming one."""
    if not any(module == p or module.startswith(p + ".") for p in FAMILY_FREE):
        return []
    return [
        f"{module}:{number} names {concept}"
        for number, line in enumerate(text.splitlines(), 1)
        for concept, pattern in RUNTIME_CONCEPTS.items()
        if pattern.search(line)
    ]


def test_the_runtimes_know_no_model_family():
    offenders = [
        found
        for module, path in MODULES.items()
        for found in _runtime_concepts(module, path.read_text())
    ]
    assert not offenders, offenders


_RUNTIME_OFFENDER = '''\
"""Rewrite rules for the graphs torch.export makes from transformers 5."""


class SoftcappedAttention:
    """Gemma 2's attn_logit_softcapping, fused as for a Llama."""
'''


def test_the_runtime_family_check_can_fail():
    """The check above, on a made-up runtime module that names transformers, Gemma's soft
    cap and Llama: each on its line; the same text in integrations/ is allowed."""
    module = "dynamo_onnx.runtimes.onnxruntime.offender"
    assert _runtime_concepts(module, _RUNTIME_OFFENDER) == [
        f"{module}:1 names the library `transformers`",
        f"{module}:5 names a model family",
        f"{module}:5 names a family's soft-capping (`attn_logit_softcapping`)",
    ]
    assert _runtime_concepts("dynamo_onnx.integrations.transformers.x", _RUNTIME_OFFENDER) == []
    assert _runtime_concepts("dynamo_onnx.onnx_tools.x", "a Whisper encoder") == [
        "dynamo_onnx.onnx_tools.x:1 names a model family"
    ]


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


def test_a_pass_never_imports_another_pass():
    offenders = []
    for module in MODULES:
        parts = module.split(".")
        if parts[:2] != ["dynamo_onnx", "passes"] or len(parts) < 3:
            continue
        own = parts[2]
        for target, line in _imports(module):
            tparts = target.split(".")
            if tparts[:2] != ["dynamo_onnx", "passes"] or len(tparts) < 3:
                continue
            if tparts[2] not in SHARED_PASS_MODULES | {own}:
                offenders.append(f"{module}:{line} imports {target}")
    assert not offenders, offenders


#: What the passes after validation read instead of the raw request: the checked one.
_RAW_STATE = {
    "request": "the raw request (read the checked one: state.valid)",
    "model_location": "the context's report anchor (read state.valid.model_location)",
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
    else opset``. Every default opset comes from dynamo_onnx.options."""
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


def test_every_default_opset_comes_from_the_options():
    """One place defines the opset defaults (dynamo_onnx.options: 20 for export, 18 for
    dynamo_export, torch_lib's 18); no other module picks one by a number of its own."""
    offenders = [
        o
        for module, path in MODULES.items()
        if module != "dynamo_onnx.options"
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
