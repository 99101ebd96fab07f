"""The models and call forms of ``make compat`` (benchmarks/compat.py): each case is a small
Python file, a model and the export call a user would write, generated from a seed.

A case is drawn from ``random.Random(f"{seed}:{index}")``: the same seed and index give the
same file on every machine. Families and call forms cycle with the index (every family meets
every call form), the rest (operators, sizes, spellings, opset) comes from the draw. The file
is the repro: ``python case.py`` exports it with dynamo-onnx and prints the outputs.

Sizes are symbols (``batch``, ``seq``...) with an example size and a second size; a call form
asks some symbols dynamic (by ``dynamic_axes``, ``dynamic_shapes`` in torch.export's
structures, or an exported program), and the runner checks both sizes of each.
"""

from __future__ import annotations

import dataclasses
import random
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence

#: Example size and second size of each symbol; no example size equals a static size used by
#: the templates (2, 4, 6, 8), so torch.export never confuses one with the other.
SYMBOLS: dict[str, tuple[int, int]] = {
    "batch": (3, 5),
    "seq": (5, 9),
    "kv": (7, 4),
    "h": (10, 13),
    "w": (12, 9),
    "length": (11, 6),
}

Shape = tuple[int | str, ...]


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One example tensor: its shape (ints and symbols) and how its values are drawn."""

    shape: Shape
    #: float | positive | bool | int:<high> (int64 in [0, high))
    kind: str = "float"

    def source(self) -> str:
        dims = ", ".join(f'size["{d}"]' if isinstance(d, str) else str(d) for d in self.shape)
        shape = f"({dims},)" if len(self.shape) == 1 else f"({dims})"
        if self.kind == "float":
            return f"torch.randn({shape}, generator=g)"
        if self.kind == "positive":
            return f"torch.rand({shape}, generator=g) + 0.5"
        if self.kind == "bool":
            return f"torch.rand({shape}, generator=g) > 0.5"
        high = int(self.kind.split(":")[1])
        return f"torch.randint(0, {high}, {shape}, generator=g)"


Value = Leaf | tuple[Leaf, ...] | dict[str, Leaf]


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter of ``forward`` and its example value (a tensor, a tuple or a dict)."""

    name: str
    value: Value
    #: ``name=None`` in the signature (passed all the same, by keyword)
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model: ``__init__`` and ``forward`` bodies, module-level helpers, its parameters."""

    family: str
    title: str
    params: tuple[Param, ...]
    body: tuple[str, ...]
    init: tuple[str, ...] = ()
    helpers: tuple[str, ...] = ()
    #: parameters that must be passed by keyword (``forward(self, x, *, mask)``)
    keyword_only: tuple[str, ...] = ()

    def symbols(self) -> list[str]:
        found: dict[str, None] = {}
        for param in self.params:
            for leaf in leaves(param.value):
                found.update((d, None) for d in leaf.shape if isinstance(d, str))
        return list(found)


def leaves(value: Value) -> list[Leaf]:
    if isinstance(value, Leaf):
        return [value]
    if isinstance(value, tuple):
        return list(value)
    return list(value.values())


# --------------------------------------------------------------------------------------
# The families: each draws one model
# --------------------------------------------------------------------------------------

Template = Callable[[random.Random], ModelSpec]
FAMILIES: dict[str, Template] = {}


def family(name: str) -> Callable[[Template], Template]:
    def register(template: Template) -> Template:
        FAMILIES[name] = template
        return template

    return register


def _x(*shape: int | str, kind: str = "float", name: str = "x") -> Param:
    return Param(name, Leaf(tuple(shape), kind))


UNARY = (
    "torch.relu({})",
    "torch.sigmoid({})",
    "torch.tanh({})",
    "torch.exp(-{}.abs())",
    "torch.sin({})",
    "F.gelu({})",
    "F.silu({})",
    "{}.clamp(-0.5, 0.5)",
    "torch.sqrt({}.abs() + 1)",
    "torch.log1p({}.abs())",
    "{}.pow(2)",
    "torch.where({0} > 0, {0}, {0} * 0.1)",
    "F.leaky_relu({}, 0.2)",
    "F.softplus({})",
    "torch.erf({})",
    "{}.reciprocal().clamp(-3, 3)",
    "F.hardswish({})",
    "torch.floor({} * 3) / 3",
)


@family("elementwise-unary")
def _unary(rng: random.Random) -> ModelSpec:
    shape: Shape = rng.choice([("batch", 6), ("batch", "seq", 4), ("batch", 2, "seq")])
    ops = rng.sample(UNARY, rng.randint(1, 3))
    body = ["y = x"] + [f"y = {op.format('y')}" for op in ops] + ["return y"]
    return ModelSpec("elementwise-unary", " > ".join(ops), (_x(*shape),), tuple(body))


BINARY = (
    "x + y",
    "x - y",
    "x * y",
    "x / (y.abs() + 1)",
    "torch.maximum(x, y)",
    "torch.minimum(x, y)",
    "torch.atan2(x, y)",
    "torch.where(x > y, x, y)",
    "(x > y).to(x.dtype) + x",
    "x.abs().pow(y.abs().clamp(max=2))",
    "torch.remainder(x, y.abs() + 1)",
    "x * y + torch.lerp(x, y, 0.3)",
)


@family("elementwise-binary")
def _binary(rng: random.Random) -> ModelSpec:
    y_shape: Shape = rng.choice([("batch", 6), (6,), (1, 6), ("batch", 1)])
    op = rng.choice(BINARY)
    kind = rng.choice(["float", "float", "int:5"])
    body = [f"return {op}"]
    if kind != "float" and not op.startswith(("x + y", "x - y", "x * y")):
        body.insert(0, "y = y.to(x.dtype)")  # + - * keep the promotion of float and int64
    params = (_x("batch", 6), Param("y", Leaf(y_shape, kind)))
    return ModelSpec("elementwise-binary", f"{op}, y {kind}{list(y_shape)}", params, tuple(body))


REDUCTIONS = (
    "x.sum({dim}, keepdim={keep})",
    "x.mean({dim}, keepdim={keep})",
    "x.amax({dim}, keepdim={keep})",
    "x.amin({dim}, keepdim={keep})",
    "x.std({dim}, keepdim={keep})",
    "x.var({dim}, keepdim={keep}, correction=0)",
    "torch.logsumexp(x, {dim}, keepdim={keep})",
    "x.norm(dim={dim}, keepdim={keep})",
    "(x > 0).any({dim}, keepdim={keep}).to(torch.int64)",
    "torch.count_nonzero(x > 0, dim={dim})",
)
SINGLE_DIM = (
    "x.argmax({dim}, keepdim={keep})",
    "x.argmin({dim}, keepdim={keep})",
    "x.max({dim}, keepdim={keep})",
    "x.min({dim}, keepdim={keep})",
    "torch.cumsum(x, {dim})",
    "torch.cumprod(x.tanh(), {dim})",
    "x.prod({dim}, keepdim={keep})",
    "torch.softmax(x, {dim})",
    "torch.log_softmax(x, {dim})",
    "x.sort({dim}, descending={keep})",
    "x.topk(2, {dim})",
)


@family("reduction")
def _reduction(rng: random.Random) -> ModelSpec:
    keep = rng.choice([True, False])
    if rng.random() < 0.5:
        op = rng.choice(REDUCTIONS).format(dim=rng.choice(["-1", "1", "(1, 2)", "0"]), keep=keep)
    else:
        op = rng.choice(SINGLE_DIM).format(dim=rng.choice(["-1", "1", "2", "0"]), keep=keep)
    if op.startswith("x.topk") and op.endswith("1)"):
        op = op.replace("2, 1)", "2, -1)")  # the seq dim may be short at the second size
    return ModelSpec("reduction", op, (_x("batch", "seq", 4),), (f"return {op}",))


@family("matmul")
def _matmul(rng: random.Random) -> ModelSpec:
    variant = rng.choice(["linear", "param", "bmm", "einsum", "addmm", "flinear", "matmul3"])
    bias = rng.choice([True, False])
    x = _x("batch", "seq", 8)
    if variant == "linear":
        return ModelSpec(
            "matmul",
            f"nn.Linear(bias={bias})",
            (x,),
            ("return self.proj(x)",),
            (f"self.proj = nn.Linear(8, 6, bias={bias})",),
        )
    if variant == "param":
        return ModelSpec(
            "matmul",
            "x @ weight",
            (x,),
            ("return x @ self.weight",),
            ("self.weight = nn.Parameter(torch.randn(8, 6))",),
        )
    if variant == "bmm":
        y = Param("y", Leaf(("batch", 8, "kv")))
        return ModelSpec("matmul", "bmm", (x, y), ("return torch.bmm(x, y)",))
    if variant == "einsum":
        return ModelSpec(
            "matmul",
            "einsum",
            (x,),
            ('return torch.einsum("bsf,fh->bhs", x, self.weight)',),
            ("self.weight = nn.Parameter(torch.randn(8, 6))",),
        )
    if variant == "addmm":
        return ModelSpec(
            "matmul",
            "addmm",
            (_x("batch", 8),),
            ("return torch.addmm(self.bias, x, self.weight, beta=0.5)",),
            (
                "self.weight = nn.Parameter(torch.randn(8, 6))",
                "self.bias = nn.Parameter(torch.randn(6))",
            ),
        )
    if variant == "flinear":
        return ModelSpec(
            "matmul",
            "F.linear",
            (x, Param("w", Leaf((6, 8)))),
            ("return F.linear(x, w)",),
        )
    y = Param("y", Leaf((8, "kv")))
    return ModelSpec("matmul", "matmul broadcast", (x, y), ("return torch.matmul(x, y)",))


@family("conv-pool")
def _conv(rng: random.Random) -> ModelSpec:
    if rng.random() < 0.3:
        kernel, stride, pad = rng.choice([3, 5]), rng.choice([1, 2]), rng.choice([0, 1])
        pool = rng.choice(
            ["", "F.max_pool1d(y, 2)", "F.avg_pool1d(y, 2)", "F.adaptive_avg_pool1d(y, 3)"]
        )
        body = ["y = self.conv(x)"] + ([f"y = {pool}"] if pool else []) + ["return y"]
        init = (f"self.conv = nn.Conv1d(4, 6, {kernel}, stride={stride}, padding={pad})",)
        return ModelSpec(
            "conv-pool",
            f"conv1d k{kernel} s{stride} {pool}",
            (_x("batch", 4, "length"),),
            tuple(body),
            init,
        )
    groups = rng.choice([1, 2])
    kernel, stride = rng.choice([1, 3]), rng.choice([1, 2])
    padding = rng.choice(["0", "1", '"same"']) if stride == 1 else rng.choice(["0", "1"])
    dilation = rng.choice([1, 2]) if stride == 1 else 1
    conv = (
        f"nn.Conv2d(4, 6, {kernel}, stride={stride}, padding={padding}, "
        f"dilation={dilation}, groups={groups})"
    )
    if rng.random() < 0.15:
        conv = f"nn.ConvTranspose2d(4, 6, {kernel}, stride={stride}, groups={groups})"
    pool = rng.choice(
        [
            "",
            "F.max_pool2d(y, 2)",
            "F.avg_pool2d(y, 2, ceil_mode=True)",
            "F.adaptive_avg_pool2d(y, 1)",
            "F.adaptive_avg_pool2d(y, (2, 2))",
            "F.max_pool2d(y, 3, stride=2, padding=1)",
            "F.interpolate(y, scale_factor=2, mode='nearest')",
            "F.interpolate(y, size=(4, 4), mode='bilinear', align_corners=False)",
        ]
    )
    body = ["y = self.conv(x)"] + ([f"y = {pool}"] if pool else []) + ["return y.relu()"]
    shape: Shape = rng.choice([("batch", 4, "h", "w"), ("batch", 4, 10, 12), (2, 4, "h", "h")])
    return ModelSpec(
        "conv-pool", f"{conv} {pool}", (_x(*shape),), tuple(body), (f"self.conv = {conv}",)
    )


INDEXING = (
    ("x[:, 1:3]", ()),
    ("x[..., ::2]", ()),
    ("x[:, -1]", ()),
    ("x[:, :, 1]", ()),
    ("x[:, None, 2:]", ()),
    ("x.narrow(-1, 1, 2)", ()),
    ("x.select(1, 0)", ()),
    ("x[..., idx]", ("idx", Leaf((3,), "int:6"))),
    ("x.index_select(-1, idx)", ("idx", Leaf((3,), "int:6"))),
    ("torch.gather(x, -1, idx)", ("idx", Leaf(("batch", "seq", 2), "int:6"))),
    ("torch.take_along_dim(x, idx, dim=-1)", ("idx", Leaf(("batch", "seq", 2), "int:6"))),
    ("x.scatter(-1, idx, 1.0)", ("idx", Leaf(("batch", "seq", 2), "int:6"))),
    (
        "x.scatter_add(-1, idx, torch.ones_like(x[..., :2]))",
        ("idx", Leaf(("batch", "seq", 2), "int:6")),
    ),
    ("x.masked_fill(mask, -1.0)", ("mask", Leaf(("batch", "seq", 6), "bool"))),
    ("x.masked_fill(x > 0.5, 0.0)", ()),
    ("x[mask]", ("mask", Leaf(("batch", "seq", 6), "bool"))),
    ("x[:, :, [0, 2, 5]]", ()),
    ("x.index_fill(-1, idx, 2.0)", ("idx", Leaf((2,), "int:6"))),
)
INDEX_PUT = (
    "y = x.clone()\n        y[:, 0] = 1.0\n        return y",
    "y = x.clone()\n        y[..., idx] = 0.5\n        return y",
    "y = x.clone()\n        y[mask] = 0.0\n        return y",
    "y = x.clone()\n        y.index_put_((idx,), torch.ones(6), accumulate=True)\n        return y",
    "y = torch.zeros_like(x)\n        y[:, 1:] = x[:, :-1]\n        return y",
)


@family("indexing")
def _indexing(rng: random.Random) -> ModelSpec:
    x = _x("batch", "seq", 6)
    if rng.random() < 0.3:
        body = rng.choice(INDEX_PUT)
        params: tuple[Param, ...] = (x,)
        if "idx" in body:
            high = "int:3" if "index_put_" in body else "int:6"
            params += (Param("idx", Leaf((3,), high)),)
            if "index_put_" in body:
                params = (_x(3, "seq", 6), params[1])
        if "mask" in body:
            params += (Param("mask", Leaf(("batch", "seq", 6), "bool")),)
        return ModelSpec(
            "indexing", body.splitlines()[1].strip(), params, tuple(body.split("\n        "))
        )
    op, extra = rng.choice(INDEXING)
    params = (x,) + ((Param(extra[0], extra[1]),) if extra else ())
    return ModelSpec("indexing", op, params, (f"return {op}",))


RESHAPES = (
    "x.view(x.shape[0], -1)",
    "x.reshape(-1, 6)",
    "x.permute(2, 0, 1)",
    "x.transpose(1, 2).contiguous().view(x.shape[0], -1)",
    "x.transpose(1, 2).reshape(x.shape[0], 6, -1)",
    "x.flatten(1)",
    "x.flatten()",
    "x.unsqueeze(1).squeeze(1)",
    "x.unflatten(-1, (2, 3))",
    "x.movedim(-1, 0)",
    "torch.cat([x, x * 2], dim={dim})",
    "torch.stack([x, x + 1], dim={dim})",
    "x.split(2, dim=-1)",
    "x.split([2, 4], dim=-1)",
    "x.chunk(3, dim=-1)",
    "x.unbind(-1)",
    "x[:, :1].expand(-1, x.shape[1], -1)",
    "x.repeat(1, 2, 1)",
    "x.new_zeros(x.shape[0], 2).to(x.dtype)",
    "x.view(-1).reshape(x.shape)",
    "torch.cat([x, y], dim=1)",
    "torch.cat((x.view(x.size(0), -1), y.flatten(1)), dim=-1)",
    "x.tile((2, 1, 1))",
    "torch.roll(x, 1, 1)",
    "torch.flip(x, [1])",
    "torch.tril(x)",
)


@family("reshape")
def _reshape(rng: random.Random) -> ModelSpec:
    op = rng.choice(RESHAPES).format(dim=rng.choice([0, 1, -1]))
    params: tuple[Param, ...] = (_x("batch", "seq", 6),)
    if re.search(r"\by\b", op):
        params += (Param("y", Leaf(("batch", "kv", 6))),)
    return ModelSpec("reshape", op, params, (f"return {op}",))


@family("normalization")
def _norm(rng: random.Random) -> ModelSpec:
    variants = (
        ("nn.LayerNorm(6)", ("batch", "seq", 6)),
        ("nn.LayerNorm([4, 6])", ("batch", 4, 6)),
        ("nn.BatchNorm1d(6)", ("batch", 6)),
        ("nn.BatchNorm1d(4)", ("batch", 4, "length")),
        ("nn.BatchNorm2d(4)", ("batch", 4, "h", "w")),
        ("nn.GroupNorm(2, 4)", ("batch", 4, "h", "w")),
        ("nn.InstanceNorm1d(4, affine=True)", ("batch", 4, "length")),
        ("nn.RMSNorm(6)", ("batch", "seq", 6)),
        ("nn.LocalResponseNorm(2)", ("batch", 4, "length")),
    )
    if rng.random() < 0.15:
        op = rng.choice(
            ["F.normalize(x, dim=-1)", "F.layer_norm(x, (6,))", "F.normalize(x, p=1, dim=1)"]
        )
        return ModelSpec("normalization", op, (_x("batch", "seq", 6),), (f"return {op}",))
    module, shape = rng.choice(variants)
    init = [f"self.norm = {module}"]
    if "BatchNorm" in module:  # running statistics that are not the defaults
        init += [
            "self.norm.running_mean.uniform_(-1, 1)",
            "self.norm.running_var.uniform_(0.5, 2)",
        ]
    if "affine" in module or "LayerNorm" in module or "GroupNorm" in module:
        init.append("nn.init.uniform_(self.norm.weight, 0.5, 1.5)")
    return ModelSpec("normalization", module, (_x(*shape),), ("return self.norm(x)",), tuple(init))


@family("attention")
def _attention(rng: random.Random) -> ModelSpec:
    if rng.random() < 0.25:
        init = ("self.attn = nn.MultiheadAttention(8, 2, batch_first=True)",)
        mask = rng.choice([False, True])
        params: tuple[Param, ...] = (_x("batch", "seq", 8),)
        call = "self.attn(x, x, x, need_weights=False)[0]"
        if mask:
            params += (Param("key_padding_mask", Leaf(("batch", "seq"), "bool")),)
            call = (
                "self.attn(x, x, x, key_padding_mask=key_padding_mask.logical_and(torch.arange("
                "x.shape[1]) > 0), need_weights=False)[0]"
            )
        return ModelSpec(
            "attention", f"MultiheadAttention mask={mask}", params, (f"return {call}",), init
        )
    kv = rng.choice(["seq", "kv"])
    heads_kv = rng.choice([2, 1]) if kv == "seq" else 2
    q = _x("batch", 2, "seq", 4, name="q")
    k = Param("k", Leaf(("batch", heads_kv, kv, 4)))
    v = Param("v", Leaf(("batch", heads_kv, kv, 4)))
    options = []
    params = (q, k, v)
    mask_kind = rng.choice(["none", "none", "bool", "float", "causal"])
    if mask_kind == "causal" and kv == "seq":
        options.append("is_causal=True")
    elif mask_kind == "bool":
        params += (Param("mask", Leaf(("seq", kv), "bool")),)
        options.append(
            "attn_mask=mask.logical_or(torch.eye(mask.shape[0], mask.shape[1], dtype=torch.bool))"
        )
    elif mask_kind == "float":
        params += (Param("mask", Leaf(("batch", 1, "seq", kv))),)
        options.append("attn_mask=mask")
    if rng.random() < 0.3:
        options.append("scale=0.3")
    if heads_kv == 1:
        options.append("enable_gqa=True")
    call = ", ".join(["q", "k", "v", *options])
    return ModelSpec(
        "attention",
        f"sdpa({', '.join(options)})",
        params,
        (f"return F.scaled_dot_product_attention({call})",),
    )


@family("embedding")
def _embedding(rng: random.Random) -> ModelSpec:
    ids = Param("ids", Leaf(("batch", "seq"), "int:10"))
    variant = rng.choice(["embedding", "padding", "positions", "functional", "bag", "one_hot"])
    if variant == "embedding":
        return ModelSpec(
            "embedding",
            "nn.Embedding",
            (ids,),
            ("return self.emb(ids)",),
            ("self.emb = nn.Embedding(10, 6)",),
        )
    if variant == "padding":
        return ModelSpec(
            "embedding",
            "nn.Embedding(padding_idx=0)",
            (ids,),
            ("return self.emb(ids).sum(1)",),
            ("self.emb = nn.Embedding(10, 6, padding_idx=0)",),
        )
    if variant == "positions":
        return ModelSpec(
            "embedding",
            "token + position embeddings",
            (ids,),
            (
                "positions = torch.arange(ids.shape[1], device=ids.device)",
                "return self.tok(ids) + self.pos(positions)[None]",
            ),
            ("self.tok = nn.Embedding(10, 6)", "self.pos = nn.Embedding(32, 6)"),
        )
    if variant == "functional":
        return ModelSpec(
            "embedding",
            "F.embedding",
            (ids, Param("table", Leaf((10, 4)))),
            ("return F.embedding(ids, table)",),
        )
    if variant == "bag":
        return ModelSpec(
            "embedding",
            "nn.EmbeddingBag(mean)",
            (ids,),
            ("return self.bag(ids)",),
            ('self.bag = nn.EmbeddingBag(10, 6, mode="mean")',),
        )
    return ModelSpec("embedding", "F.one_hot", (ids,), ("return F.one_hot(ids, 10).float()",))


@family("control-flow")
def _control_flow(rng: random.Random) -> ModelSpec:
    variant = rng.choice(["cond", "cond-shape", "cond-method", "while", "scan", "map"])
    x = _x("batch", 6)
    if variant == "cond":
        helpers = (
            "def when_true(x):\n    return x.sin() + 1\n",
            "def when_false(x):\n    return x.cos() * 2\n",
        )
        return ModelSpec(
            "control-flow",
            "torch.cond on values",
            (x,),
            ("return torch.cond(x.sum() > 0, when_true, when_false, (x,))",),
            helpers=helpers,
        )
    if variant == "cond-shape":
        helpers = (
            "def when_true(x):\n    return x.sin() + 1\n",
            "def when_false(x):\n    return x.cos() * 2\n",
        )
        return ModelSpec(
            "control-flow",
            "torch.cond on a size",
            (x,),
            ("return torch.cond(x.shape[0] > 4, when_true, when_false, (x,))",),
            helpers=helpers,
        )
    if variant == "cond-method":
        return ModelSpec(
            "control-flow",
            "torch.cond, branches read a weight",
            (x,),
            (
                "def when_true(x):",
                "    return x @ self.weight",
                "def when_false(x):",
                "    return (x - 1) @ self.weight",
                "return torch.cond(x.mean() > 0, when_true, when_false, (x,))",
            ),
            ("self.weight = nn.Parameter(torch.randn(6, 4))",),
        )
    if variant == "while":
        steps = rng.choice([1, 3])
        helpers = (
            f"def keep_going(i, x):\n    return i < {steps}\n",
            "def step(i, x):\n    return i + 1, x * 0.5 + 1\n",
        )
        return ModelSpec(
            "control-flow",
            f"while_loop x{steps}",
            (x,),
            (
                "i, y = while_loop(keep_going, step, (torch.tensor(0), x))",
                "return y",
            ),
            helpers=("from torch._higher_order_ops import while_loop\n", *helpers),
        )
    if variant == "scan":
        reverse = rng.choice([False, True])
        helpers = (
            "from torch._higher_order_ops import scan\n",
            "def accumulate(carry, x):\n    carry = carry + x\n    return carry, carry * 2\n",
        )
        return ModelSpec(
            "control-flow",
            f"scan reverse={reverse}",
            (_x("seq", "batch", 6),),
            (
                f"last, ys = scan(accumulate, torch.zeros_like(x[0]), x, reverse={reverse})",
                "return last, ys",
            ),
            helpers=helpers,
        )
    helpers = (
        "from torch._higher_order_ops.map import map as hop_map\n",
        "def row(x, w):\n    return (x @ w).relu()\n",
    )
    return ModelSpec(
        "control-flow",
        "map over rows",
        (x,),
        ("return hop_map(row, x, self.weight)",),
        ("self.weight = nn.Parameter(torch.randn(6, 3))",),
        helpers,
    )


@family("buffers")
def _buffers(rng: random.Random) -> ModelSpec:
    persistent = rng.choice([True, False])
    variant = rng.choice(["scale", "int", "sub", "constant", "shape"])
    x = _x("batch", "seq", 6)
    if variant == "scale":
        init = (f'self.register_buffer("scale", torch.rand(6) + 0.5, persistent={persistent})',)
        return ModelSpec(
            "buffers",
            f"scale buffer persistent={persistent}",
            (x,),
            ("return x * self.scale",),
            init,
        )
    if variant == "int":
        init = (f'self.register_buffer("offsets", torch.arange(6), persistent={persistent})',)
        return ModelSpec("buffers", "int64 buffer", (x,), ("return x + self.offsets",), init)
    if variant == "sub":
        init = (
            "self.inner = nn.Module()",
            f'self.inner.register_buffer("mean", torch.randn(6), persistent={persistent})',
        )
        return ModelSpec("buffers", "submodule buffer", (x,), ("return x - self.inner.mean",), init)
    if variant == "constant":
        init = ("self.table = torch.linspace(-1, 1, 6)",)
        return ModelSpec("buffers", "tensor attribute", (x,), ("return x * self.table",), init)
    init = (f'self.register_buffer("mask", torch.ones(32, 32).tril(), persistent={persistent})',)
    return ModelSpec(
        "buffers",
        "buffer sliced by a size",
        (_x("batch", "seq", "seq"),),
        ("n = x.shape[1]", "return x.masked_fill(self.mask[:n, :n] == 0, -1.0)"),
        init,
    )


@family("mutation")
def _mutation(rng: random.Random) -> ModelSpec:
    variants = (
        (
            "buffer add_",
            ("self.count.add_(1)", "return x + self.count"),
            ('self.register_buffer("count", torch.zeros(6))',),
        ),
        (
            "buffer copy_",
            ("self.state.copy_(x.mean(0))", "return x - self.state"),
            ('self.register_buffer("state", torch.zeros(6))',),
        ),
        (
            "buffer through a view",
            ("self.state[0].add_(x.sum())", "return x * self.state[1] + self.state[0]"),
            ('self.register_buffer("state", torch.ones(2, 6))',),
        ),
        (
            "buffer slice fill_",
            ("self.state[:, :2].fill_(3.0)", "return x + self.state.sum(0)"),
            ('self.register_buffer("state", torch.ones(2, 6))',),
        ),
        ("input add_", ("x.add_(1)", "return x * 2"), ()),
        ("input mul_ then read", ("y = x * 1", "x.mul_(3)", "return x + y"), ()),
        ("input through a slice", ("x[:, 0].zero_()", "return x.sum(1)"), ()),
        ("input through view(-1)", ("x.view(-1)[:4].fill_(0.0)", "return x + 1"), ()),
        ("input through transpose", ("x.transpose(0, 1)[0].mul_(2)", "return x"), ()),
        ("input through unsqueeze", ("x.unsqueeze(0).add_(1)", "return x.relu()"), ()),
        (
            "clone then in place",
            ("y = x.clone()", "y[:, 1:].mul_(0.5)", "y.relu_()", "return y"),
            (),
        ),
        ("input index_put_", ("x[x > 1] = 1.0", "return x * 2"), ()),
    )
    title, body, init = rng.choice(variants)
    return ModelSpec("mutation", title, (_x("batch", 6),), body, init)


@family("outputs")
def _outputs(rng: random.Random) -> ModelSpec:
    variants = (
        ("(y, None)", ("y = x.relu()", "return y, None")),
        ("(None, y, z)", ("return None, x.relu(), x.sum(-1)",)),
        ("dict", ('return {"a": x.relu(), "b": x.sum(-1)}',)),
        ("dict with None", ('return {"a": x.relu(), "none": None, "b": x * 2}',)),
        ("nested tuple", ("return (x.relu(), (x * 2, x.sum(0))), x - 1",)),
        ("list", ("return [x.relu(), x.mean(-1)]",)),
        ("input returned", ("return x, x.relu()",)),
        ("same tensor twice", ("y = x.tanh()", "return y, y")),
        ("a view of the input", ("return x[:, :2]",)),
        ("int64 and bool", ("return x.argmax(-1), x > 0",)),
    )
    title, body = rng.choice(variants)
    return ModelSpec("outputs", title, (_x("batch", 6),), body)


@family("kwargs")
def _kwargs(rng: random.Random) -> ModelSpec:
    variant = rng.choice(["keyword-only", "optional-given", "float-scale", "two-tensors"])
    x = _x("batch", 6)
    if variant == "keyword-only":
        return ModelSpec(
            "kwargs",
            "forward(x, *, bias)",
            (x, Param("bias", Leaf((6,)))),
            ("return x + bias",),
            keyword_only=("bias",),
        )
    if variant == "optional-given":
        return ModelSpec(
            "kwargs",
            "forward(x, mask=None) given a mask",
            (x, Param("mask", Leaf(("batch", 6), "bool"), optional=True)),
            ("if mask is not None:", "    x = x.masked_fill(mask, 0.0)", "return x * 2"),
        )
    if variant == "float-scale":
        return ModelSpec(
            "kwargs",
            "forward(x, y)",
            (x, Param("y", Leaf(("batch", 6)))),
            ("return x + y * 0.5",),
        )
    return ModelSpec(
        "kwargs",
        "forward(a, b) both by keyword",
        (Param("a", Leaf(("batch", 6))), Param("b", Leaf(("batch", 6)))),
        ("return a * b, a - b",),
    )


@family("nested-inputs")
def _nested(rng: random.Random) -> ModelSpec:
    variant = rng.choice(["tuple", "dict", "mixed"])
    if variant == "tuple":
        pair = Param("pair", (Leaf(("batch", 6)), Leaf(("batch", 6))))
        return ModelSpec(
            "nested-inputs", "tuple input", (pair,), ("a, b = pair", "return a * b + a")
        )
    if variant == "dict":
        feats = Param("feats", {"image": Leaf(("batch", 6)), "text": Leaf(("batch", "seq", 6))})
        return ModelSpec(
            "nested-inputs",
            "dict input",
            (feats,),
            ('return feats["image"][:, None] + feats["text"]',),
        )
    pair = Param("pair", (Leaf(("batch", 6)), Leaf(("batch", 6))))
    return ModelSpec(
        "nested-inputs",
        "tensor and tuple",
        (_x("batch", 6), pair),
        ("a, b = pair", "return x * a - b"),
    )


@family("block")
def _block(rng: random.Random) -> ModelSpec:
    """A small transformer block: what people export most."""
    causal = rng.choice([True, False])
    init = (
        "self.norm1 = nn.LayerNorm(8)",
        "self.qkv = nn.Linear(8, 24)",
        "self.out = nn.Linear(8, 8)",
        "self.norm2 = nn.LayerNorm(8)",
        "self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))",
    )
    body = (
        "b, s, _ = x.shape",
        "q, k, v = self.qkv(self.norm1(x)).split(8, dim=-1)",
        "q, k, v = (t.view(b, s, 2, 4).transpose(1, 2) for t in (q, k, v))",
        f"a = F.scaled_dot_product_attention(q, k, v, is_causal={causal})",
        "x = x + self.out(a.transpose(1, 2).reshape(b, s, 8))",
        "return x + self.mlp(self.norm2(x))",
    )
    return ModelSpec(
        "block", f"transformer block causal={causal}", (_x("batch", "seq", 8),), body, init
    )


# --------------------------------------------------------------------------------------
# The call forms
# --------------------------------------------------------------------------------------

CALL_FORMS = (
    "positional",
    "kwargs",
    "names",
    "dynamic_axes",
    "dynamic_axes-no-names",
    "dynamic_shapes-dict",
    "dynamic_shapes-tuple",
    "dynamic_shapes-auto",
    "exported-program",
    "dynamo_export",
)
#: The line the runner replaces by one name per output once eager has run (same line count).
OUTPUT_NAMES_LINE = "OUTPUT_NAMES = None"
DIM_SPELLINGS = ("Dim", "Dim-range", "AUTO", "DYNAMIC", "str")


@dataclasses.dataclass(frozen=True)
class Case:
    """One generated case: the file's text and what the runner needs to know about it."""

    index: int
    seed: int
    family: str
    title: str
    form: str
    #: the symbols of the model's inputs, and those asked dynamic
    symbols: tuple[str, ...]
    dynamic: tuple[str, ...]
    source: str

    @property
    def name(self) -> str:
        return f"case_{self.seed}_{self.index}"

    def sizes(self) -> list[dict[str, int]]:
        """The example sizes, then the second size of every dynamic symbol at once."""
        example = {s: SYMBOLS[s][0] for s in self.symbols}
        second = dict(example, **{s: SYMBOLS[s][1] for s in self.dynamic})
        return [example] + ([second] if self.dynamic else [])


def generate(seed: int, index: int) -> Case:
    """The case ``index`` of ``seed``: the family and the call form cycle with the index."""
    rng = random.Random(f"{seed}:{index}")
    names = list(FAMILIES)
    name = names[index % len(names)]
    form = CALL_FORMS[(index // len(names) + index) % len(CALL_FORMS)]
    spec = FAMILIES[name](rng)
    return _render(spec, form, rng, seed, index)


def _render(spec: ModelSpec, form: str, rng: random.Random, seed: int, index: int) -> Case:
    symbols = spec.symbols()
    dynamic_forms = form.startswith(("dynamic", "exported", "dynamo_export"))
    chosen: list[str] = []
    if dynamic_forms and symbols:
        chosen = (
            symbols if rng.random() < 0.6 else rng.sample(symbols, rng.randint(1, len(symbols)))
        )
    names = [p.name for p in spec.params]
    # keyword-only and optional parameters go by keyword; with the "kwargs" form the trailing
    # ones too
    by_keyword = [p.name for p in spec.params if p.name in spec.keyword_only or p.optional]
    if form in ("kwargs", "dynamic_shapes-dict") and len(names) > 1 and rng.random() < 0.7:
        by_keyword = names[rng.randint(1, len(names) - 1) :]
    if spec.family == "kwargs" and spec.title.startswith("forward(a, b)"):
        by_keyword = names
    positional = [n for n in names if n not in by_keyword]
    opset = rng.choice([None, None, 17, 18, 19, 20, 21, 22, 23])
    lines, all_dynamic = _call_lines(spec, form, rng, chosen, positional, by_keyword, opset)
    if form == "dynamo_export":  # asks every dimension dynamic, or none
        chosen = symbols if all_dynamic else []
    case = Case(index, seed, spec.family, spec.title, form, tuple(symbols), tuple(chosen), "")
    source = _source(spec, positional, by_keyword, lines, case, case.sizes())
    return dataclasses.replace(case, source=source)


def _dim_expr(symbol: str, spelling: str) -> str:
    if spelling == "AUTO":
        return "Dim.AUTO"
    if spelling == "DYNAMIC":
        return "Dim.DYNAMIC"
    if spelling == "str":
        return f'"{symbol}"'
    return symbol


def _spec_of(value: Value, chosen: Sequence[str], spelling: str) -> str:
    """One parameter's dynamic_shapes entry, in the structure of its value."""
    if isinstance(value, Leaf):
        axes = {i: d for i, d in enumerate(value.shape) if isinstance(d, str) and d in chosen}
        if not axes:
            return "None"
        return "{" + ", ".join(f"{i}: {_dim_expr(d, spelling)}" for i, d in axes.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_spec_of(v, chosen, spelling) for v in value) + ",)"
    return (
        "{" + ", ".join(f'"{k}": {_spec_of(v, chosen, spelling)}' for k, v in value.items()) + "}"
    )


def _flat_names(spec: ModelSpec, order: Sequence[str]) -> list[tuple[str, Leaf]]:
    """Flat input names in the order of the ONNX inputs (positional, then keyword)."""
    params = {p.name: p for p in spec.params}
    flat: list[tuple[str, Leaf]] = []
    for name in order:
        value = params[name].value
        if isinstance(value, Leaf):
            flat.append((name, value))
        elif isinstance(value, tuple):
            flat += [(f"{name}_{i}", leaf) for i, leaf in enumerate(value)]
        else:
            flat += [(f"{name}_{k}", leaf) for k, leaf in value.items()]
    return flat


def _call_lines(
    spec: ModelSpec,
    form: str,
    rng: random.Random,
    chosen: Sequence[str],
    positional: Sequence[str],
    by_keyword: Sequence[str],
    opset: int | None,
) -> tuple[list[str], bool]:
    """The body of ``export(onnx, model, args, kwargs)``, and whether every dim is dynamic."""
    kwargs = ", kwargs=kwargs" if by_keyword else ""
    extra = f", opset_version={opset}" if opset is not None else ""
    lines: list[str] = []
    flat = _flat_names(spec, [*positional, *by_keyword])
    nested = any(not isinstance(p.value, Leaf) for p in spec.params)
    all_dynamic = False
    if form in ("dynamic_axes", "dynamic_axes-no-names") and (nested or not chosen):
        form = "dynamic_shapes-dict"  # dynamic_axes names flat inputs only
    if form == "positional" and by_keyword:
        form = "kwargs"
    if form in ("positional", "kwargs"):
        lines.append(f"return onnx.export(model, args{kwargs}{extra}, dynamo=True)")
    elif form == "names":
        inputs = [n for n, _ in flat]
        lines.append(
            f"return onnx.export(model, args{kwargs}, input_names={inputs!r}, "
            f"output_names=OUTPUT_NAMES{extra}, dynamo=True)"
        )
    elif form.startswith("dynamic_axes"):
        list_form = rng.random() < 0.3
        axes: dict[str, str] = {}
        for name, leaf in flat:
            dims = [(i, d) for i, d in enumerate(leaf.shape) if isinstance(d, str) and d in chosen]
            if dims:
                axes[name] = (
                    str([i for i, _ in dims])
                    if list_form
                    else "{" + ", ".join(f'{i}: "{d}"' for i, d in dims) + "}"
                )
        mapping = "{" + ", ".join(f'"{k}": {v}' for k, v in axes.items()) + "}"
        names = f", input_names={[n for n, _ in flat]!r}" if form == "dynamic_axes" else ""
        lines.append(
            f"return onnx.export(model, args{kwargs}{names}, dynamic_axes={mapping}{extra}, "
            "dynamo=True)"
        )
    elif form.startswith("dynamic_shapes") or form == "exported-program":
        spelling = rng.choice(DIM_SPELLINGS)
        if form == "dynamic_shapes-auto":
            spelling = rng.choice(["AUTO", "DYNAMIC"])
        if form == "exported-program" and spelling == "str":
            spelling = "Dim"  # torch.export.export takes no names
        params = {p.name: p for p in spec.params}
        if spelling in ("Dim", "Dim-range"):
            for symbol in chosen:
                bounds = ", min=2, max=64" if spelling == "Dim-range" else ""
                lines.append(f'{symbol} = Dim("{symbol}"{bounds})')
        order = [*positional, *by_keyword]
        if form == "dynamic_shapes-tuple" and not by_keyword:
            shapes = (
                "(" + ", ".join(_spec_of(params[n].value, chosen, spelling) for n in order) + ",)"
            )
        else:
            shapes = (
                "{"
                + ", ".join(f'"{n}": {_spec_of(params[n].value, chosen, spelling)}' for n in order)
                + "}"
            )
        if form == "exported-program":
            lines.append(
                f"program = torch.export.export(model, args{kwargs}, dynamic_shapes={shapes})"
            )
            lines.append(f"return onnx.export(program, args{kwargs}{extra}, dynamo=True)")
        else:
            lines.append(
                f"return onnx.export(model, args{kwargs}, dynamic_shapes={shapes}{extra}, "
                "dynamo=True)"
            )
    else:  # dynamo_export, the 2.1-2.5 API; torch.onnx has only export (dims: Dim.AUTO)
        all_dynamic = rng.random() < 0.5
        params = {p.name: p for p in spec.params}
        call = "*args, **kwargs" if by_keyword else "*args"
        if all_dynamic:
            shapes = (
                "{"
                + ", ".join(
                    f'"{n}": {_all_spec(params[n].value)}' for n in [*positional, *by_keyword]
                )
                + "}"
            )
            lines += [
                'if onnx.__name__ == "dynamo_onnx":',
                "    options = onnx.ExportOptions(dynamic_shapes=True)",
                f"    return onnx.dynamo_export(model, {call}, export_options=options)",
                f"return onnx.export(model, args{kwargs}, dynamic_shapes={shapes}, dynamo=True)",
            ]
        else:
            lines += [
                'if onnx.__name__ == "dynamo_onnx":',
                f"    return onnx.dynamo_export(model, {call})",
                f"return onnx.export(model, args{kwargs}, dynamo=True)",
            ]
    return lines, all_dynamic


def _all_spec(value: Value) -> str:
    """Every dimension Dim.AUTO: what ExportOptions(dynamic_shapes=True) asks."""
    if isinstance(value, Leaf):
        return "{" + ", ".join(f"{i}: Dim.AUTO" for i in range(len(value.shape))) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_all_spec(v) for v in value) + ",)"
    return "{" + ", ".join(f'"{k}": {_all_spec(v)}' for k, v in value.items()) + "}"


def _value_source(value: Value) -> str:
    if isinstance(value, Leaf):
        return value.source()
    if isinstance(value, tuple):
        return "(" + ", ".join(v.source() for v in value) + ",)"
    return "{" + ", ".join(f'"{k}": {v.source()}' for k, v in value.items()) + "}"


def _indent(lines: Iterator[str] | Sequence[str], spaces: int) -> str:
    return textwrap.indent("\n".join(lines), " " * spaces)


def _source(
    spec: ModelSpec,
    positional: Sequence[str],
    by_keyword: Sequence[str],
    call: Sequence[str],
    case: Case,
    sizes: Sequence[dict[str, int]],
) -> str:
    signature = []
    for param in spec.params:
        if param.name in spec.keyword_only and "*" not in signature:
            signature.append("*")
        signature.append(f"{param.name}=None" if param.optional else param.name)
    init = ["super().__init__()", *spec.init]
    make = [f"{p.name} = {_value_source(p.value)}" for p in spec.params]
    args = "(" + ", ".join(positional) + ("," if len(positional) == 1 else "") + ")"
    kwargs = "{" + ", ".join(f'"{n}": {n}' for n in by_keyword) + "}"
    helpers = "\n\n".join(h.rstrip("\n") for h in spec.helpers)
    return (
        f'"""compat case {case.index} of seed {case.seed}: {spec.family}, {spec.title}; '
        f'{case.form}."""\n\n'
        "import torch\n"
        "import torch.nn.functional as F\n"
        "from torch import nn\n"
        "from torch.export import Dim\n"
        + (f"\n{helpers}\n" if helpers else "")
        + "\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n"
        f"{_indent(init, 8)}\n\n"
        f"    def forward(self, {', '.join(signature)}):\n"
        f"{_indent(spec.body, 8)}\n\n\n"
        "def inputs(size):\n"
        '    """The example inputs at the sizes {symbol: size}: (args, kwargs)."""\n'
        "    g = torch.Generator().manual_seed(0)\n"
        f"{_indent(make, 4)}\n"
        f"    return {args}, {kwargs}\n\n\n"
        "def export(onnx, model, args, kwargs):\n"
        f"{_indent(call, 4)}\n\n\n"
        f"SIZES = {list(sizes)!r}\n"
        f"{OUTPUT_NAMES_LINE}\n\n\n"
        'if __name__ == "__main__":\n'
        "    import dynamo_onnx\n\n"
        "    torch.manual_seed(0)\n"
        "    program = export(dynamo_onnx, Model().eval(), *inputs(SIZES[0]))\n"
        "    for size in SIZES:\n"
        "        torch.manual_seed(0)\n"
        "        args, kwargs = inputs(size)\n"
        "        expected = Model().eval()(*args, **kwargs)\n"
        "        args, kwargs = inputs(size)\n"
        "        print(size, program(*args, **kwargs), expected)\n"
    )
