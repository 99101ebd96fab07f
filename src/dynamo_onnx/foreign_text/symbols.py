"""torch's size symbols in its text of an expression (``s77``, ``u0``): found, matched as
whole names, renamed."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

#: torch's size symbols: ``s77`` for an input's size, ``u0`` for a value known only at run time.
_SYMBOL = re.compile(r"\b[su]\d+\b")


def symbols_in(text: str) -> frozenset[str]:
    """The symbols (``s77``, ``u0``) in torch's text of an expression (``32*s77``)."""
    return frozenset(_SYMBOL.findall(text))


def mentions(text: str, name: str) -> bool:
    """Whether torch's expression ``text`` contains ``name`` (a symbol, or the text of a
    range constraint's key, ``32*s52``) as a whole, not inside a longer name."""
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def symbol_mentions(text: str) -> tuple[str, ...]:
    """Every mention of a symbol in ``text``, in order, repeats included."""
    return tuple(_SYMBOL.findall(text))


def symbol_renamer(names: Mapping[str, str]) -> Callable[[str], str]:
    """A function of torch's expression of a size (``2*s77``) replacing each whole symbol in
    ``names`` with its name (``2*batch``); a symbol inside another (``s7`` in ``s77``) is
    left alone. (Made once, applied to every dimension of a model.)"""
    if not names:
        return lambda text: text
    pattern = re.compile(
        r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b"
    )
    return lambda text: pattern.sub(lambda m: names[m[1]], text)
