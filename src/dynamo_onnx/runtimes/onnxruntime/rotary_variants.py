"""Whether an unfused rotary embedding has a fused form in ONNX Runtime at all, from its graph.

ONNX Runtime's ``RotaryEmbedding`` (and ``GroupQueryAttention``'s ``do_rotary``) rotates each
token by one position: a row of a cos/sin cache indexed by ``position_ids``. A rotary whose
cos/sin is assembled from sections of one table taken at several position rows per token (a
multi-axis rotary: temporal, height and width positions, or a 2-D one over rows and
columns) has no such form: nothing we or the user can change makes it fuse, so it is a note
(DO543), not the warning of a match that failed (DO505). The decision reads the nodes that
compute the rotary's ``sin`` / ``cos`` (a ``Concat`` of sections side by side, or
``ScatterND``'s of sections interleaved, each one row of the same table), never a module's
or a value's name.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

__all__ = ["MultiAxisRotary", "multi_axis_rotary"]

#: The operators a cos/sin piece may pass through from its table: selections and layout.
_SELECTIONS = frozenset(
    {"Gather", "Slice", "Split", "Squeeze", "Unsqueeze", "Reshape", "Cast", "Transpose", "Expand"}
)
#: How far back from the rotary's multiplication the table's assembly is looked for (nodes):
#: the window reorder of a vision tower sits between them.
_SEARCHED = 400
#: How many selections a piece may pass through on its way from its table.
_PATH = 12


@dataclasses.dataclass(frozen=True)
class MultiAxisRotary:
    """A rotary's cos/sin made of ``sections`` pieces of one table, taken at ``rows``
    different position rows per token."""

    sections: int
    rows: int

    def describe(self) -> str:
        return (
            f"its cos/sin is {self.sections} sections of one table taken at {self.rows} "
            "position rows per token (a multi-axis rotary)"
        )


def _scalar_index(node: ir.Node) -> int | None:
    """The index of a ``Gather`` of one constant scalar index (one row of an axis), or None."""
    if node.op_type != "Gather" or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    index = ir.convenience.get_const_tensor(node.inputs[1])
    if index is None or index.shape.rank() != 0:
        return None
    return int(index.numpy())


def _piece(value: ir.Value) -> tuple[ir.Node, tuple[int, int]] | None:
    """The table ``value`` is one row of (the first node other than a selection or a layout
    above it: a ``Cos``/``Sin``, or the angles ``positions * inv_freq``), and the (axis, row)
    it was taken at; None when no scalar index selects a row on its way."""
    row: tuple[int, int] | None = None
    for _ in range(_PATH):
        node = value.producer()
        if node is None:
            return None
        if node.op_type not in _SELECTIONS or not node.inputs or node.inputs[0] is None:
            return (node, row) if row is not None else None
        index = _scalar_index(node)
        if index is not None and row is None:
            row = (node.attributes.get_int("axis", 0), index)
        value = node.inputs[0]
    return None


def _parts(node: ir.Node) -> list[ir.Value] | None:
    """The values ``node`` assembles a table from: a ``Concat``'s inputs (sections side by
    side), or a chain of ``ScatterND``'s data and updates (sections interleaved), else None."""
    if node.op_type == "Concat":
        return [v for v in node.inputs if v is not None]
    parts: list[ir.Value] = []
    while node is not None and node.op_type == "ScatterND" and len(node.inputs) == 3:
        data, _, updates = node.inputs
        if data is None or updates is None:
            return None
        parts.append(updates)
        producer = data.producer()
        if producer is None or producer.op_type != "ScatterND":
            parts.append(data)
        node = producer
    return parts or None


def _sections(node: ir.Node) -> MultiAxisRotary | None:
    """``node`` as the assembly of pieces of one table taken at several rows, or None."""
    values = _parts(node)
    if values is None or len(values) < 2:
        return None
    pieces = [_piece(v) for v in values]
    if any(p is None for p in pieces):
        return None
    tables = {id(p[0]) for p in pieces if p is not None}
    rows = {p[1] for p in pieces if p is not None}
    if len(tables) != 1 or len(rows) < 2 or len({axis for axis, _ in rows}) != 1:
        return None
    return MultiAxisRotary(sections=len(pieces), rows=len(rows))


def _rotary_factors(neg: ir.Node) -> list[ir.Value]:
    """The factors ``rotate_half(x)`` (``Concat(-x2, x1)``, from ``neg``) is multiplied by:
    the rotary's ``sin``."""
    factors = []
    for use in neg.outputs[0].uses():
        half = use.node
        if half.op_type != "Concat":
            continue
        for product in half.outputs[0].uses():
            mul = product.node
            if mul.op_type == "Mul":
                factors.extend(v for v in mul.inputs if v is not None and v is not half.outputs[0])
    return factors


def multi_axis_rotary(nodes: list[ir.Node]) -> MultiAxisRotary | None:
    """The multi-axis rotary computed by ``nodes`` (an unfused rotary block's, its ``Neg``
    among them), or None: its ``sin`` is searched back for the ``Concat`` that assembles it."""
    for neg in (n for n in nodes if n.op_type == "Neg"):
        seen: set[int] = set()
        stack = _rotary_factors(neg)
        while stack and len(seen) < _SEARCHED:
            producer = stack.pop().producer()
            if producer is None or id(producer) in seen:
                continue
            seen.add(id(producer))
            found = _sections(producer)
            if found is not None:
                return found
            stack.extend(v for v in producer.inputs if v is not None)
    return None
