"""ONNX Einsum -> permutes, reductions and batched MATMULs.

Operands are contracted pairwise, left to right. For a pair, each letter is a batch letter (in both operands
and still needed), a contracted letter (in both, not needed later), or belongs to one side; the pair becomes
one MATMUL of [batch, left, contracted] @ [batch, contracted, right]. A letter that only one operand has and
nothing later needs is summed away first. ``...`` stands for the same unnamed dims in every operand.
"""

from __future__ import annotations

import string
from typing import Any

from aotc.errors import ShapeError
from aotc.ir.ops import Op
from aotc.ir.shapes import numel
from aotc.ir.types import Value
from aotc.onnx.node import OnnxNode, Operand
from aotc.onnx.ops_math import Converter, values

Importer = Any
Term = tuple[Value, str]


def _parse(node: OnnxNode, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ShapeError(f"{node.label}: equation {equation!r} names {len(terms)} operands, got {len(ranks)}")
    used = set(eq) - set(".,->")
    spare = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in used]
    n_ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(spare[:n_ell])
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - len(t.replace("...", ""))
            t = t.replace("...", ell[n_ell - k :])
        if len(t) != r or not t.isalpha() or len(set(t)) != len(t):
            raise node.fail(f"equation term {t!r} does not fit a rank-{r} operand (repeated letters are not supported)")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit output: ellipsis dims, then the letters used exactly once, sorted
        counts = {c: lhs.count(c) for c in set(lhs) - set(".,")}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    return out_terms, out


def _sum_out(imp: Importer, x: Value, letters: str, keep: set[str]) -> Term:
    axes = tuple(i for i, c in enumerate(letters) if c not in keep)
    if not axes:
        return x, letters
    return imp.b.op(Op.REDUCE_SUM, x, axes=axes, keepdim=False), "".join(c for c in letters if c in keep)


def _pair(imp: Importer, a: Term, b: Term, needed: set[str]) -> Term:
    (x, la), (y, lb) = a, b
    batch = [c for c in la if c in lb and c in needed]
    contract = [c for c in la if c in lb and c not in needed]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    xs, ys = x.type.shape, y.type.shape
    size = {**{c: ys[lb.index(c)] for c in lb}, **{c: xs[la.index(c)] for c in la}}
    bl = imp.b
    xp = bl.permute(x, tuple(la.index(c) for c in batch + left + contract))
    yp = bl.permute(y, tuple(lb.index(c) for c in batch + contract + right))
    bx = tuple(xs[la.index(c)] for c in batch)
    by = tuple(ys[lb.index(c)] for c in batch)
    k = numel(tuple(size[c] for c in contract))
    xm = bl.reshape(xp, (*bx, numel(tuple(size[c] for c in left)), k))
    ym = bl.reshape(yp, (*by, k, numel(tuple(size[c] for c in right))))
    z = bl.op(Op.MATMUL, xm, ym)
    batch_dims = z.type.shape[: len(batch)]
    z = bl.reshape(z, (*batch_dims, *(size[c] for c in left), *(size[c] for c in right)))
    return z, "".join(batch + left + right)


def _einsum(imp: Importer, node: OnnxNode) -> list[Operand]:
    xs = values(imp, node, *range(len(node.inputs)))
    terms, out = _parse(node, node.attr("equation", ""), [x.type.rank for x in xs])
    ops: list[Term] = list(zip(xs, terms))
    for i in range(len(ops)):  # sum away letters no other operand and no output uses
        later = set(out).union(*(t for j, (_, t) in enumerate(ops) if j != i))
        ops[i] = _sum_out(imp, *ops[i], later)
    acc = ops[0]
    for i in range(1, len(ops)):
        needed = set(out).union(*(t for _, t in ops[i + 1 :]))
        acc = _pair(imp, acc, ops[i], needed)
    x, letters = _sum_out(imp, *acc, set(out))
    if sorted(letters) != sorted(out):
        raise node.fail(f"output letters {out!r} don't match the operands")
    return [imp.b.permute(x, tuple(letters.index(c) for c in out))]


CONVERTERS: dict[str, Converter] = {"Einsum": _einsum}
