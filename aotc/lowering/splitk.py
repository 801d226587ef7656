"""Split-K: a matmul with few output tiles and a long K runs as S partial products and one summing reduction.

Why. The matmul kernel runs one program per BLOCK_M x BLOCK_N output tile, and each walks all of K. A
decode-size Linear, x[8, 4096] @ W[4096, 4096], has 32 tiles: on an A100 (108 SMs) or an H100 (132) most SMs
sit idle while 32 programs stream the whole weight. Cut K into S slices and S * 32 programs each stream 1/S
of it; a small reduction kernel then adds the S partial results.

The rewrite is graph-level, so fusion, the memory plan and every backend see ordinary ops. With the rows
R = prod(batch) * M of ``a[..., M, K] @ b[K, N]``:

    a -> reshape [R, S, K/S] -> permute [S, R, K/S]      (views: index math in the matmul kernel)
    b -> reshape [S, K/S, N]
    matmul -> [S, R, N] in float32 (``out_dtype="float32"`` for half inputs: the partials are not rounded)
    -> reshape [S, ..., M, N] -> reduce_sum over axis 0 (float32) -> cast back to the matmul's dtype

The batched matmul is one kernel (S on grid axis y; b varies with it, so it is not folded into the rows),
and the reduction kernel takes the sum, the cast and the pointwise consumers (bias, activation, residual)
the matmul's epilogue held before. It is the same math: only the float32 summation order changes, and a
half-precision product is still rounded once, by the final cast.

The rule. The sizes are the largest the symbols allow (the artifact serves its whole range, and a split
sized for a small call is a loss for a large one); tiles are counted with the block sizes the kernel would
use on the oldest target (``ir.tiles.matmul_config``, sm_80), against SMS = 108 (A100). A matmul
is split when:

- it is a float matmul, ``b`` has no batch dims, and K is static (S must divide it);
- it leaves SMs idle: fewer than SMS / 2 output tiles;
- K is long and the problem skinny: K >= MIN_K (1024) and K >= 4 * R. N is bounded by the tile count
  already, so a square decode weight (4096 x 4096) qualifies;
- some S of SPLITS (a power of two from 2 to 16) fits: tiles * S <= 2 * SMS (two waves at most),
  K % S == 0, K / S >= MIN_SLICE (256: each program still runs a few pipelined BLOCK_K steps), and the
  partial sums written and read back (2 * S * R * N float32 values) come to at most half the weight's bytes
  (K * N * itemsize). The largest such S is taken.

``explain_split_k`` reports the matmuls that came close (K >= MIN_K), split or not, and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.symbolic import SymExpr, mul, to_infix
from aotc.ir.symbolic_values import bounds
from aotc.ir.tiles import matmul_config
from aotc.ir.types import Node, Value
from aotc.ir.verify import graph_ctx

SMS = 108  # A100, the oldest target: the fewest SMs a kernel must fill
MIN_K = 1024
SPLITS = (16, 8, 4, 2)  # the slice counts tried, largest first
MIN_SLICE = 256
PARTIAL_BYTES = 4  # float32 partial sums


@dataclass(frozen=True)
class SplitKReport:
    """The rewritten graph, and one line per matmul that came close: how it was split, or why not."""

    graph: Graph
    split: tuple[str, ...] = ()
    declined: tuple[str, ...] = ()

    @property
    def lines(self) -> list[str]:
        return [f"split-K: {s}" for s in self.split] + [f"not split-K: {s}" for s in self.declined]


@dataclass(frozen=True)
class SplitPlan:
    slices: int
    why: str


def split_k(graph: Graph, *, sms: int = SMS, min_k: int = MIN_K) -> Graph:
    return plan_split_k(graph, sms=sms, min_k=min_k).graph


def explain_split_k(graph: Graph, *, sms: int = SMS, min_k: int = MIN_K) -> list[str]:
    """What the split-K pass does to ``graph`` (the graph the pass receives): one line per matmul with
    K >= ``min_k``."""
    return plan_split_k(graph, sms=sms, min_k=min_k).lines


def plan_split_k(graph: Graph, *, sms: int = SMS, min_k: int = MIN_K) -> SplitKReport:
    plans: dict[int, SplitPlan] = {}
    declined: list[str] = []
    for i, node in enumerate(graph.nodes):
        if node.op is not Op.MATMUL:
            continue
        decision = split_decision(graph, node, sms=sms, min_k=min_k)
        if isinstance(decision, SplitPlan):
            plans[i] = decision
        elif _max_value(graph, node.inputs[0].type.shape[-1]) >= min_k:  # a near miss, worth a line
            declined.append(f"{_describe(node)}: {decision}")
    split = tuple(f"{_describe(graph.nodes[i])}: {p.why}" for i, p in plans.items())
    return SplitKReport(_rewrite(graph, plans) if plans else graph, split, tuple(declined))


def split_decision(graph: Graph, node: Node, *, sms: int = SMS, min_k: int = MIN_K) -> SplitPlan | str:
    """The split for MATMUL ``node`` of ``graph``, or the reason it is not split."""
    a, b = node.inputs
    dtype = a.type.dtype
    k = a.type.shape[-1]
    k_max = _max_value(graph, k)
    if k_max < min_k:
        return f"K = {to_infix(k)} < {min_k}: too short to split"
    if not dtype.is_float:
        return f"{dtype.value} matmul: only float matmuls are split (the partials are float32)"
    if b.type.rank != 2:
        return f"b {b.type} has batch dims: only a [K, N] operand is split"
    if not isinstance(k, int):
        return f"K = {to_infix(k)} is symbolic (up to {k_max}): only a static K is split, S must divide it"
    rows = _rows(a.type.shape)
    r_max, n_max = _max_value(graph, rows), _max_value(graph, b.type.shape[-1])
    cfg = matmul_config(r_max, n_max, k, dtype, "sm_80")
    tiles = -(-r_max // cfg.block_m) * -(-n_max // cfg.block_n)
    sizes = f"R <= {r_max} rows, N <= {n_max}"
    if tiles == 0:
        return f"the product is empty ({sizes})"
    if 2 * tiles >= sms:
        return f"{tiles} output tiles of {cfg.block_m}x{cfg.block_n} ({sizes}) fill half of {sms} SMs already"
    if k < 4 * r_max:
        return f"K = {k} < 4 x {r_max} rows: not long enough against the rows to pay for the partial sums"
    weight = k * n_max * dtype.itemsize
    reason = ""
    for s in SPLITS:
        partials = 2 * s * r_max * n_max * PARTIAL_BYTES
        if tiles * s > 2 * sms:
            continue  # a smaller S may fit
        if k % s or k // s < MIN_SLICE:
            reason = (
                f"K = {k} has no even split into {SPLITS[-1]}..{SPLITS[0]} (a power of two) slices of at least "
                f"{MIN_SLICE}"
            )
            continue
        if 2 * partials > weight:
            reason = (
                f"the float32 partial sums ({_fmt(partials)} written and read for S = {s}) are more than half "
                f"the weight's {_fmt(weight)}"
            )
            continue
        why = (
            f"K {k} in {s} slices of {k // s}: {tiles} tile{'s' if tiles > 1 else ''} of "
            f"{cfg.block_m}x{cfg.block_n} ({sizes}) -> {tiles * s} programs on {sms} SMs; "
            f"partial sums {_fmt(partials)} vs weight {_fmt(weight)}"
        )
        return SplitPlan(s, why)
    return reason


def _rows(a_shape: tuple[int | SymExpr, ...]) -> int | SymExpr:
    rows: int | SymExpr = 1
    for d in a_shape[:-1]:
        rows = mul(rows, d)
    return rows


def _max_value(graph: Graph, d: int | SymExpr) -> int:
    return d if isinstance(d, int) else int(bounds(d, graph.ranges, graph.multiples)[1])


def _fmt(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _describe(node: Node) -> str:
    a, b = node.inputs
    where = f" at {node.loc}" if node.loc else ""
    return f"matmul {node.outputs[0]} {a.type} @ {b.type}{where}"


def _rewrite(graph: Graph, plans: Mapping[int, SplitPlan]) -> Graph:
    b = Builder(graph_ctx(graph), next_id=graph.max_value_id() + 1)
    remap: dict[int, Value] = {v.id: v for v in graph.inputs}
    for i, node in enumerate(graph.nodes):
        b.loc = node.loc
        inputs = tuple(remap[v.id] for v in node.inputs)
        if i in plans:
            outs: tuple[Value, ...] = (_split(b, node, inputs, plans[i].slices),)
        else:
            same = all(x is y for x, y in zip(inputs, node.inputs))
            b.nodes.append(node if same else node.replace(inputs=inputs))
            outs = node.outputs
        for old, new in zip(node.outputs, outs):
            remap[old.id] = new
    return graph.replace(nodes=tuple(b.nodes), outputs=tuple(remap[o.id] for o in graph.outputs))


def _split(b: Builder, node: Node, inputs: tuple[Value, ...], s: int) -> Value:
    x, w = inputs
    out = node.outputs[0].type
    k = x.type.shape[-1]
    assert isinstance(k, int)  # split_decision splits static K only
    rows = _rows(x.type.shape)
    xs = b.permute(b.reshape(x, (rows, s, k // s)), (1, 0, 2))
    ws = b.reshape(w, (s, k // s, w.type.shape[-1]))
    attrs = dict(node.attrs.items())
    if out.dtype is not DType.float32:
        attrs["out_dtype"] = "float32"
    partials = b.op(Op.MATMUL, xs, ws, **attrs)
    # The batch dims come back before the sum, so the reduction's rows are the product's own shape and
    # its pointwise consumers fuse into the reduction kernel.
    partials = b.reshape(partials, (s, *out.shape))
    total = b.op(Op.REDUCE_SUM, partials, axes=(0,), keepdim=False)
    return b.cast(total, out.dtype)
