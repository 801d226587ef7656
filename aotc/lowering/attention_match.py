"""Hand-written attention recognized in a primitive graph: ``Matcher`` walks back from a ``probabilities @ v``
matmul to ``softmax(q @ k^T * scale + mask)`` and returns an ``AttentionMatch`` (what SDPA needs), or raises
``Miss`` with the reason it does not fold.

Recognized between the two matmuls, in any order: a scalar scale on q, on k^T or on the scores (multiplied, or
divided by a constant), additive float masks, bool masks applied with ``where(keep, s, -inf)`` or
``masked_fill(mask, -inf)``, a lone masked_fill with float32's finfo.min (Hugging Face eager attention), float
casts and reshapes of the batch dims only (heads folded into the batch); the softmax is the op table's
decomposition (max-shifted exp over the last axis, divided by its sum), optionally wrapped in a where that
zeroes the rows with no allowed key: torch's ONNX-export ``where(isnan(p), 0, p)``, or the ONNX Attention
importer's ``where(reduce_max(bias) == -inf, 0, p)`` when that bias is the one mask added to the scores.

When reshapes regroup the scores' batch dims, attention runs over one grouping in which every mask
broadcasts: the softmax's, or the one a mask is added in (Swin's shifted windows view the
``(B*windows, heads)`` scores as ``(B, windows, heads)`` to add a per-window mask, then view them back).
A mask fits a grouping when the batch dims it varies over are trailing dims of both (those keep their
index under a row-major regrouping); q, k, v and the output are then reshaped to it, which the kernel
reads as index arithmetic on its batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from aotc.errors import ShapeError
from aotc.ir.analysis import Analysis
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph
from aotc.ir.ops import OPS, Op
from aotc.ir.shapes import fmt_shape
from aotc.ir.symbolic import mul
from aotc.ir.types import Attrs, Node, TensorType, Value
from aotc.ir.verify import graph_ctx

_FLOATS = (DType.float32, DType.float16, DType.bfloat16)
HUGE_FILL = -1e30  # finite masked_fill values at most this behave as additive masks in float32
_MAX_CHAIN = 16  # ops between the scores matmul and the softmax; real models use 1-4


@dataclass
class AttentionMatch:
    """One hand-written attention: ``anchor`` (the probabilities @ v matmul, a node index) becomes SDPA."""

    anchor: int
    q: Value
    kt: Value
    v: Value
    scale: float = 1.0
    float_masks: list[tuple[Value, float]] = field(default_factory=list)  # (mask, scale applied after it)
    keep_masks: list[tuple[Value, bool]] = field(default_factory=list)  # (bool mask, True where it keeps)
    # a masked_fill with a huge finite value (finfo.min): (bool mask, True where it keeps, fill * later scales)
    fill: tuple[Value, bool, float] | None = None
    # where(isnan(p), 0, p) (torch's SDPA export) or where(max(bias) == -inf, 0, p) (the ONNX Attention
    # importer) on the probabilities
    zero_masked_rows: bool = False
    # when the batch dims are reshaped between the matmuls and the softmax (DeBERTa's [B*H] <-> [B, H], Swin's
    # [B*W, H] <-> [B, W, H]): attention runs over these batch dims (one grouping in which every mask fits) and
    # its output is reshaped to the matmul's
    batch: tuple | None = None
    out_shape: tuple | None = None
    where: str = ""


class Miss(Exception):
    """A softmax @ v that does not fold; the message is the reason."""


def operand_shapes(m: AttentionMatch) -> list[tuple]:
    """q, k^T and v shapes for SDPA: one rank (leading 1s), or the batch dims chosen when reshapes regroup them."""
    xs = (m.q, m.kt, m.v)
    if m.batch is not None:
        return [tuple(m.batch) + x.type.shape[-2:] for x in xs]
    rank = max(x.type.rank for x in xs)
    return [(1,) * (rank - x.type.rank) + x.type.shape for x in xs]


class Matcher:
    def __init__(self, graph: Graph, facts: Analysis) -> None:
        self.graph = graph
        self.facts = facts
        self.where = ""
        self.inside: set[int] = set()  # value ids the fused node absorbs (must have no outside users)
        self.zero_masked_rows = False
        self.rows_bias: Value | None = None  # the bias of where(max(bias) == -inf, 0, p), checked after the scores
        self.reshaped = False  # a reshape of the batch dims between the matmuls and the softmax
        # every mask with the scores' batch dims where it is applied, and whether it grows the scores there
        self.applied: list[tuple[Value, tuple, bool]] = []

    def node(self, v: Value) -> Node | None:
        i = self.facts.producer.get(v.id)
        return None if i is None else self.graph.nodes[i]

    def match(self, index: int, anchor: Node) -> AttentionMatch | None:
        p, v = anchor.inputs
        self.where = f"at node {index} ({anchor.loc or 'matmul %' + str(anchor.outputs[0].id)})"
        probs = self._softmax(p)
        if probs is None:
            return None
        scores, rank = probs
        m = AttentionMatch(index, v, v, v, where=self.where, zero_masked_rows=self.zero_masked_rows)
        matmul = self._scores(scores, m, rank)
        if self.rows_bias is not None:
            self._check_rows_bias(m, self.rows_bias, scores.type.shape[:-2])
        if self.reshaped:
            m.batch = self._grouping(scores.type.shape[:-2], matmul.outputs[0].type.shape[:-2])
            m.out_shape = anchor.outputs[0].type.shape
        q, kt = matmul.inputs
        q, kt = self._operand_scale(q, m), self._operand_scale(kt, m)
        m.q, m.kt = q, kt
        self._check_uses(anchor)
        self._check_types(m, anchor)
        return m

    def _softmax(self, p: Value) -> tuple[Value, int] | None:
        """The scores a softmax over the last axis reads, or None when ``p`` is no softmax."""
        x = p
        n = self.node(x)
        wrapped: str | None = None  # why a where around the softmax does not fold (said once it is a softmax)
        seen_where = False
        for _ in range(3):  # a batch reshape, a where zeroing the fully masked rows and a cast may wrap the softmax
            if n is not None and n.op is Op.WHERE and not seen_where:
                seen_where = True
                wrapped = self._zeroed_rows(x, n)
            elif n is not None and (n.op is Op.CAST or (n.op is Op.RESHAPE and _batch_reshape(n))):
                self.inside.add(x.id)
                if n.op is Op.RESHAPE and self.rows_bias is not None and wrapped is None:
                    # the bias's rows are the softmax's rows; a regrouping in between moves them
                    wrapped = "the probabilities are zeroed where the bias masks a whole row after a reshape"
                self.reshaped |= n.op is Op.RESHAPE
            else:
                break
            x = n.inputs[-1]
            n = self.node(x)
        if n is None or n.op is not Op.DIV:
            return None
        e, total = n.inputs
        total = self._guarded(total, 0.0, 1.0)  # a safe softmax divides by 1 where a row's sum is 0
        ns, ne = self.node(total), self.node(e)
        rank = e.type.rank
        if ns is None or ne is None or ns.op is not Op.REDUCE_SUM or ns.inputs[0] is not e or ne.op is not Op.EXP:
            return None
        if not _last_axis(ns, rank):
            return None
        nsub = self.node(ne.inputs[0])
        if nsub is None or nsub.op is not Op.SUB:
            return None
        s, mx = nsub.inputs
        mx = self._guarded(mx, -math.inf, 0.0)  # and shifts by 0 where a row's max is -inf
        nmax = self.node(mx)
        if nmax is None or nmax.op is not Op.REDUCE_MAX or nmax.inputs[0].id != s.id or not _last_axis(nmax, rank):
            return None
        if wrapped is not None:
            raise Miss(wrapped)
        self.inside |= {x.id, e.id, total.id, ne.inputs[0].id, mx.id}
        return s, rank

    def _guarded(self, x: Value, when: float, fill: float) -> Value:
        """``y`` when ``x`` is ``where(y == when, fill, y)``, else ``x``: the guards of a safe softmax (a row whose
        keys are all masked gives 0, as SDPA does: the op table's SDPA decomposition writes them)."""
        n = self.node(x)
        if n is None or n.op is not Op.WHERE or self._scalar(n.inputs[1]) != fill:
            return x
        cond, _, y = n.inputs
        nc = self.node(cond)
        if nc is None or nc.op is not Op.EQ or n.outputs[0].type.shape != y.type.shape:
            return x
        a, b = nc.inputs
        if not ((a.id == y.id and self._scalar(b) == when) or (b.id == y.id and self._scalar(a) == when)):
            return x
        self.inside |= {x.id, cond.id}
        return y

    def _zeroed_rows(self, x: Value, n: Node) -> str | None:
        """Take ``x = where(rows, 0, p)`` around the softmax p; the reason it does not fold, or None."""
        cond, zero, y = n.inputs
        if self._scalar(zero) != 0.0:
            return f"the probabilities pass through where(%{cond.id}, %{zero.id}, p), which sets no zeros"
        if n.outputs[0].type.shape != y.type.shape:
            return f"where(%{cond.id}, 0, p) broadcasts the probabilities to {n.outputs[0].type.shape}"
        nc = self.node(cond)
        if nc is not None and nc.op is Op.ISNAN and nc.inputs[0].id == y.id:
            self.inside |= {x.id, cond.id}
        else:
            bias = self._all_masked(cond)
            if bias is None:
                return (
                    f"the probabilities are zeroed where %{cond.id} holds, which is neither isnan(p) nor "
                    "reduce_max(bias) == -inf over the last axis"
                )
            self.rows_bias = bias
            self.inside.add(x.id)
        self.zero_masked_rows = True
        return None

    def _all_masked(self, cond: Value) -> Value | None:
        """``bias`` when ``cond`` is ``reduce_max(bias, last axis, keepdim) == -inf``: rows masked everywhere."""
        nc = self.node(cond)
        if nc is None or nc.op is not Op.EQ:
            return None
        for r, c in (nc.inputs, nc.inputs[::-1]):
            nr = self.node(r)
            if self._scalar(c) != -math.inf or nr is None or nr.op is not Op.REDUCE_MAX:
                continue
            bias = nr.inputs[0]
            if bias.type.dtype in _FLOATS and _last_axis(nr, bias.type.rank):
                return bias
        return None

    def _check_rows_bias(self, m: AttentionMatch, bias: Value, batch: tuple) -> None:
        """where(max(bias) == -inf, 0, p) zeroes exactly the rows attention leaves NaN (all keys masked) only
        when that bias is the one mask on the scores, added where the softmax groups them: another mask
        could leave a row NaN that it keeps, and another grouping moves the bias's rows."""
        if any(x.id == bias.id and at != batch for x, at, _ in self.applied):
            raise Miss(
                f"the probabilities are zeroed where the bias %{bias.id} masks a whole row, but that bias is added "
                "to the scores under another grouping of their batch dims"
            )
        masks = [fm.id for fm, _ in m.float_masks]
        if bias.id not in masks:
            added = ", ".join(f"%{i}" for i in masks) or "none"
            raise Miss(
                f"the probabilities are zeroed where the bias %{bias.id} masks a whole row, but the masks added "
                f"to the scores are {added}"
            )
        if len(masks) > 1 or m.keep_masks or m.fill is not None:
            raise Miss(
                f"the probabilities are zeroed where the bias %{bias.id} masks a whole row, but other masks on "
                "the scores can mask a row too"
            )

    def _scores(self, s: Value, m: AttentionMatch, rank: int) -> Node:
        """Walk from the softmax input down to the q @ k^T matmul, collecting scales and masks."""
        after = 1.0  # the product of the scales applied between this point and the softmax
        for _ in range(_MAX_CHAIN):
            n = self.node(s)
            if n is None:
                raise Miss(f"the softmax input %{s.id} is a graph input, not q @ k^T")
            self.inside.add(s.id)
            op = n.op
            if op is Op.MATMUL:
                m.scale = after
                return n
            if op is Op.CAST and n.inputs[0].type.dtype in _FLOATS:
                s = n.inputs[0]
            elif op is Op.RESHAPE and _batch_reshape(n):
                self.reshaped = True
                s = n.inputs[0]
            elif op in (Op.MUL, Op.DIV):
                x, c = self._scalar_operand(n, allow_left=op is Op.MUL)
                if c is None:
                    raise Miss(f"the scores are {op.value}-ed by a tensor %{n.inputs[1].id}, not a scalar constant")
                c = 1.0 / c if op is Op.DIV else c
                if not c > 0 or not math.isfinite(c):
                    raise Miss(f"the scale {c} is not a positive finite number")
                after *= c
                s = x
            elif op is Op.ADD:
                x, mask = self._scores_side(n)
                if mask.type.dtype not in _FLOATS:
                    raise Miss(f"the scores are added to a {mask.type.dtype.value} tensor")
                if m.fill is not None:
                    raise Miss("a finite masked fill together with other masks")
                m.float_masks.append((mask, after))
                s = self._applied(mask, x, n)
            elif op is Op.WHERE:
                s = self._applied(n.inputs[0], self._where(n, m, after), n)
            else:
                raise Miss(f"the scores pass through {op.value} (only scales, masks and casts fold into attention)")
        raise Miss(f"more than {_MAX_CHAIN} ops between the scores and the softmax")

    def _applied(self, mask: Value, scores: Value, n: Node) -> Value:
        """Record where ``mask`` meets the ``scores`` (``n`` applies it); the scores below."""
        out = n.outputs[0].type.shape
        self.applied.append((mask, out[:-2], scores.type.shape != out))
        return scores

    def _grouping(self, softmax: tuple, matmul: tuple) -> tuple:
        """The batch dims attention runs over when the scores' are regrouped: the softmax's, else the first in
        which every mask fits (_fits), tried in the order the masks are applied, then the matmul's."""
        ctx = graph_ctx(self.graph)
        for mask, at, grows in self.applied:
            if grows:
                raise Miss(
                    f"the mask %{mask.id} broadcasts the scores to batch dims {fmt_shape(at)}, which a reshape regroups"
                )
        for batch in (softmax, *(at for _, at, _ in self.applied), matmul):
            if all(_fits(ctx, mask.type.shape, at, batch) for mask, at, _ in self.applied):
                return batch
        where = ", ".join(f"%{mask.id} over {fmt_shape(at)}" for mask, at, _ in self.applied)
        raise Miss(f"no one grouping of the scores' batch dims fits every mask, added as {where}")

    def _where(self, n: Node, m: AttentionMatch, after: float) -> Value:
        cond, a, c = n.inputs
        if cond.type.dtype is not DType.bool:
            raise Miss("where with a non-bool condition")
        fa, fc = self._scalar(a), self._scalar(c)
        if fc is not None and fa is None:
            fill, keeps, x = fc, True, a  # where(keep, s, fill)
        elif fa is not None and fc is None:
            fill, keeps, x = fa, False, c  # masked_fill(mask, fill)
        else:
            raise Miss("where over the scores has no scalar fill value")
        if fill == -math.inf:
            if m.fill is not None:
                raise Miss("a finite masked fill together with other masks")
            m.keep_masks.append((cond, keeps))
            return x
        # finfo.min (HF eager attention): s + fill rounds to fill for any |s| < 1e30, so it is an additive mask
        # with exactly masked_fill's result, fully masked rows (uniform weights) included
        if not (fill <= HUGE_FILL and n.outputs[0].type.dtype in (DType.float32, DType.bfloat16)):
            raise Miss(f"the masked fill value {fill} is not -inf or a float32 finfo.min-like value")
        if m.fill is not None or m.keep_masks or m.float_masks:
            raise Miss("a finite masked fill together with other masks")
        if not math.isfinite(fill * after):
            raise Miss(f"the masked fill value {fill} overflows when scaled by {after}")
        m.fill = (cond, keeps, fill * after)
        return x

    def _scores_side(self, n: Node) -> tuple[Value, Value]:
        """(the operand leading to q @ k^T, the other one) of an ADD."""
        a, c = n.inputs
        if self._reaches_matmul(a):
            return a, c
        if self._reaches_matmul(c):
            return c, a
        raise Miss("neither side of the add over the scores comes from a matmul")

    def _reaches_matmul(self, v: Value, depth: int = 8) -> bool:
        """Whether ``v`` is scores: a matmul seen through the ops the score chain may hold."""
        n = self.node(v)
        if n is None or depth == 0:
            return False
        if n.op is Op.MATMUL:
            return True
        # the scores' ops; a reshape may regroup their batch dims (Swin's windows)
        ops = {
            Op.CAST: n.inputs[:1],
            Op.MUL: n.inputs,
            Op.DIV: n.inputs[:1],
            Op.ADD: n.inputs,
            Op.RESHAPE: n.inputs[:1],
        }
        follow = ops.get(n.op, ())
        if n.op is Op.WHERE:
            follow = n.inputs[1:]
        return any(self._reaches_matmul(x, depth - 1) for x in follow)

    def _operand_scale(self, x: Value, m: AttentionMatch) -> Value:
        """A scalar scale on q or on k^T (``(q * s) @ k^T``) folds into the attention scale."""
        n = self.node(x)
        if n is None or n.op not in (Op.MUL, Op.DIV) or self.facts.use_count.get(x.id, 0) != 1:
            return x
        if x.id in self.facts.outputs:
            return x
        y, c = self._scalar_operand(n, allow_left=n.op is Op.MUL)
        if c is None:
            return x
        c = 1.0 / c if n.op is Op.DIV else c
        if not c > 0 or not math.isfinite(c):
            return x
        m.scale *= c
        return y

    def _scalar_operand(self, n: Node, allow_left: bool) -> tuple[Value, float | None]:
        a, c = n.inputs
        sc = self._scalar(c)
        if sc is not None:
            return a, sc
        sa = self._scalar(a) if allow_left else None
        if sa is not None:
            return c, sa
        return a, None

    def _scalar(self, v: Value) -> float | None:
        """The value of a constant that is one number (a FULL, possibly broadcast), else None."""
        for _ in range(4):
            n = self.node(v)
            if n is None:
                return None
            if n.op is Op.FULL:
                val = n.attrs.get("value")
                return float(val) if isinstance(val, (int, float)) and not isinstance(val, bool) else None
            if n.op in (Op.BROADCAST, Op.RESHAPE, Op.CAST):
                if n.op is Op.CAST and n.outputs[0].type.dtype not in _FLOATS:
                    return None
                v = n.inputs[0]
                continue
            if n.op is Op.CONSTANT:
                arr = self.graph.constants.get(n.attrs.get("name"))
                if arr is not None and arr.size == 1 and arr.dtype.kind == "f":
                    return float(arr.reshape(()))
            return None
        return None

    def _check_uses(self, anchor: Node) -> None:
        for vid in self.inside:
            if vid in self.facts.outputs:
                raise Miss(f"%{vid} (scores or probabilities) is a graph output, so it must be materialized")
        for vid in self.inside:
            for user in self.facts.users.get(vid, ()):
                node = self.graph.nodes[user]
                if node is anchor or any(o.id in self.inside for o in node.outputs):
                    continue
                raise Miss(f"%{vid} (scores or probabilities) is also read by {node.op.value} node {user}")

    def _check_batch_reshape(self, m: AttentionMatch, anchor: Node) -> None:
        """Reshaping q, k^T and v to the softmax's batch dims is a regrouping only when none broadcasts."""
        kt_batch, q_batch = m.kt.type.shape[:-2], m.q.type.shape[:-2]
        out_batch = anchor.outputs[0].type.shape[:-2]
        if q_batch != kt_batch or m.v.type.shape[:-2] != out_batch:
            raise Miss("q, k or v broadcasts over the batch dims that the scores reshape")
        ctx = graph_ctx(self.graph)
        if not ctx.known_equal(_numel(q_batch), _numel(m.batch)) or not ctx.known_equal(
            _numel(out_batch), _numel(m.batch)
        ):
            raise Miss("the reshaped batch dims hold another number of entries than q, k and v")

    def _check_types(self, m: AttentionMatch, anchor: Node) -> None:
        q, kt, v = m.q, m.kt, m.v
        dts = {q.type.dtype, kt.type.dtype, v.type.dtype}
        if len(dts) != 1 or q.type.dtype not in _FLOATS:
            raise Miss(f"q, k and v dtypes {sorted(d.value for d in dts)} are not one float dtype")
        if anchor.outputs[0].type.dtype is not q.type.dtype:
            raise Miss(f"the output dtype {anchor.outputs[0].type.dtype.value} is not q's {q.type.dtype.value}")
        shapes = operand_shapes(m)
        rank = len(shapes[0])
        if m.batch is not None:
            self._check_batch_reshape(m, anchor)
        k_shape = shapes[1][:-2] + (shapes[1][-1], shapes[1][-2])
        types = [TensorType(x.type.dtype, sh) for x, sh in zip((q, kt, v), (shapes[0], k_shape, shapes[2]))]
        for fm, _ in m.float_masks if m.batch is None else ():  # _grouping fitted the masks of a regrouping
            if fm.type.rank > rank:
                raise Miss(f"the mask %{fm.id} has a higher rank than the attention")
        try:
            (out,) = OPS[Op.SDPA].infer(types, Attrs({"scale": m.scale}), graph_ctx(self.graph))
        except ShapeError as e:
            raise Miss(f"q, k, v shapes do not form attention: {e}") from None
        if m.out_shape is None and out.shape != anchor.outputs[0].type.shape:
            raise Miss(f"the masks broadcast the output to {anchor.outputs[0].type.shape}, attention gives {out.shape}")


def _batch_reshape(n: Node) -> bool:
    """A reshape that regroups only the batch dims (the [rows, keys] matrix untouched)."""
    src, dst = n.inputs[0].type.shape, n.outputs[0].type.shape
    return len(src) >= 2 and len(dst) >= 2 and src[-2:] == dst[-2:]


def _fits(ctx, mask: tuple, at: tuple, batch: tuple) -> bool:
    """Whether a mask of shape ``mask``, broadcast against scores with batch dims ``at``, is the same mask
    broadcast against their regrouping ``batch``: the batch dims it varies over are trailing dims of both."""
    dims = mask[:-2]
    varies = next((len(dims) - i for i, d in enumerate(dims) if d != 1), 0)
    if varies > min(len(at), len(batch)):
        return False
    return all(ctx.known_equal(a, c) for a, c in zip(at[len(at) - varies :], batch[len(batch) - varies :]))


def _last_axis(n: Node, rank: int) -> bool:
    axes = tuple(a % rank for a in n.attrs.get("axes", ()))
    return axes == (rank - 1,) and bool(n.attrs.get("keepdim", False))


def _numel(dims) -> object:
    out: object = 1
    for d in dims:
        out = mul(out, d)
    return out
