"""The rule catalog: every finding the exporter can record is described here.

Rules are loaded from ``catalog.toml`` next to this file, the single source of truth. The
catalog is parsed once per process and is immutable, so sharing it is safe.
"""

from __future__ import annotations

import dataclasses
import functools
import string
import sys
from collections.abc import Iterator, Mapping
from importlib import resources
from types import MappingProxyType

from dynamo_onnx.versions import project_urls

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Rule", "Catalog", "catalog", "get_rule"]

_LEVELS = ("none", "note", "warning", "error")
#: SARIF's result kinds that the catalog uses (SARIF 2.1.0 section 3.27.9).
_KINDS = ("fail", "pass", "informational")


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule of the catalog (see ``catalog.toml`` for the meaning of each field)."""

    id: str
    name: str
    level: str
    pass_name: str
    short: str
    full: str
    message: str
    fix: str
    help: str
    tags: tuple[str, ...] = ()
    deprecated: bool = False
    #: SARIF's ``result.kind``: "fail" (a problem), "pass" or "informational".
    kind: str = "fail"

    @property
    def fields(self) -> tuple[str, ...]:
        """The named fields of the message template, in order of appearance."""
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.message) if name)

    @property
    def help_uri(self) -> str | None:
        """The rule's anchor in the rules page, when the project declares where that page is
        (``[project.urls]`` "Rules"); None otherwise: never a made-up address."""
        rules_page = project_urls().get("rules")
        return f"{rules_page}#{self.anchor}" if rules_page else None

    @property
    def anchor(self) -> str:
        """The rule's anchor in docs/rules.md."""
        return f"{self.id.lower()}-{self.name}"

    def format_message(self, **fields: object) -> str:
        """Fill the message template; a missing field is a bug, so it raises ``KeyError``."""
        missing = [name for name in self.fields if name not in fields]
        if missing:
            raise KeyError(f"rule {self.id} needs message fields {missing}")
        return self.message.format(**fields)


@dataclasses.dataclass(frozen=True)
class Catalog:
    """All rules, reachable by id and by name, plus the failure rule of every pass."""

    rules: tuple[Rule, ...]
    pass_rules: Mapping[str, str]

    def __post_init__(self) -> None:
        by_key: dict[str, Rule] = {}
        for rule in self.rules:
            for key in (rule.id, rule.name):
                if key in by_key:
                    raise ValueError(f"duplicate rule id or name {key!r} in the catalog")
                by_key[key] = rule
        object.__setattr__(self, "_by_key", MappingProxyType(by_key))

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def get(self, id_or_name: str) -> Rule:
        """Look a rule up by id (``DO301``) or name (``unsupported-operator``)."""
        try:
            return self._by_key[id_or_name]  # type: ignore[attr-defined]
        except KeyError:
            raise KeyError(f"no rule {id_or_name!r} in the catalog") from None

    def __contains__(self, id_or_name: object) -> bool:
        return id_or_name in self._by_key  # type: ignore[attr-defined]

    def for_pass(self, pass_name: str) -> Rule:
        """The rule recorded when ``pass_name`` fails without a more specific finding."""
        return self.get(self.pass_rules.get(pass_name, "internal-error"))


def _parse(text: str) -> Catalog:
    data = tomllib.loads(text)
    rules = []
    for entry in data.get("rule", []):
        level = entry["level"]
        if level not in _LEVELS:
            raise ValueError(f"rule {entry['id']}: level must be one of {_LEVELS}")
        kind = entry.get("kind", "fail")
        if kind not in _KINDS or (kind != "fail" and level in ("warning", "error")):
            raise ValueError(
                f"rule {entry['id']}: kind must be one of {_KINDS}, and 'fail' for a {level}"
            )
        rules.append(
            Rule(
                id=entry["id"],
                name=entry["name"],
                level=level,
                pass_name=entry["pass"],
                short=entry["short"].strip(),
                full=entry["full"].strip(),
                message=entry["message"].strip(),
                fix=_one_line(entry["id"], entry["fix"]),
                help=entry["help"].strip(),
                tags=tuple(entry.get("tags", ())),
                deprecated=bool(entry.get("deprecated", False)),
                kind=kind,
            )
        )
    return Catalog(tuple(rules), MappingProxyType(dict(data.get("passes", {}))))


def _one_line(rule_id: str, fix: str) -> str:
    """A fix is one sentence on one line: it ends every error message and SARIF message."""
    fix = fix.strip()
    if not fix or "\n" in fix or not fix.endswith((".", ")")):
        raise ValueError(f"rule {rule_id}: `fix` must be one line ending a sentence, got {fix!r}")
    return fix


@functools.cache
def catalog() -> Catalog:
    """The catalog shipped with the package, parsed once."""
    text = resources.files(__package__).joinpath("catalog.toml").read_text("utf-8")
    return _parse(text)


def get_rule(id_or_name: str) -> Rule:
    """Shorthand for ``catalog().get(id_or_name)``."""
    return catalog().get(id_or_name)
