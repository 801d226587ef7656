"""What a load or store through an in-kernel tensor descriptor can touch, for ``source_bounds``.

``desc = tl.make_tensor_descriptor(base, shape=[n0, n1, ...], strides=[s0, s1, ...], block_shape=[...])`` then
``desc.load([o0, o1, ...])`` moves the box at those offsets, and TMA (and the interpreter, and Triton's pointer
lowering of descriptors on GPUs without TMA) clips the box to the descriptor's shape: elements outside it load as
zeros (or NaN) and are not stored. So the bound is on the descriptor, never on the box offsets: an access touches
at most the elements ``base + i0 * s0 + i1 * s1 + ...`` with every ``0 <= ik < nk``, which lie between ``base``
and ``base + sum((nk - 1) * sk)``; a descriptor with an empty dim touches nothing.

The rule holds only for what it can read: the descriptor must be one ``tl.make_tensor_descriptor`` call of this
kernel (a host-made descriptor parameter, or one carried across loop iterations, is refused), its shape and
strides lists of index math the reader bounds, no dim possibly negative (TMA reads dims as unsigned: -1 would span
the whole address space) and no stride negative.
"""

from __future__ import annotations

import ast
import math

from aotc.artifact.source_intervals import Interval, Shape, Unbounded
from aotc.artifact.source_program import call_name

_PARAMS = ("base", "shape", "strides", "block_shape")


def descriptor_bounds(shape: Shape, node: ast.expr) -> list[tuple[str, Interval]]:
    """The pointer args a load or store through descriptor ``node`` can touch, each with the element offsets
    (inclusive) it can reach; Unbounded where the descriptor's region cannot be bounded."""
    call = _make_call(shape, node)
    args = dict(zip(_PARAMS, call.args))
    args.update((k.arg, k.value) for k in call.keywords if k.arg in _PARAMS)
    if any(p not in args for p in _PARAMS[:3]):
        raise Unbounded("a tensor descriptor without its base, shape and strides")
    dims, strides = (_elements(args[p], p) for p in ("shape", "strides"))
    if len(dims) != len(strides) or not dims:
        raise Unbounded(f"a tensor descriptor of {len(dims)} dims and {len(strides)} strides")
    span = 0.0
    for dim, stride in zip(dims, strides):
        dlo, dhi = shape.interval(dim, frozenset())
        slo, shi = shape.interval(stride, frozenset())
        if math.isinf(dhi) or math.isinf(shi):
            raise Unbounded("a tensor descriptor whose shape or strides the index math does not bound")
        if dlo < 0:
            raise Unbounded("a tensor descriptor dim that may be negative (TMA reads it as unsigned)")
        if slo < 0:
            raise Unbounded("a tensor descriptor stride that may be negative")
        if dhi <= 0:
            return []  # an empty dim: every box element is clipped
        span += (dhi - 1) * shi
    out = []
    for pointer, (c, terms), lits in shape.pointers(args["base"], frozenset()):
        if not shape.feasible(lits):
            continue
        lo, hi = shape.combine(c, terms, lits)
        if lo > hi:
            continue
        if math.isinf(lo) or math.isinf(hi):
            raise Unbounded("a tensor descriptor whose base reads a value the index math does not bound")
        shape.peak = max(shape.peak, abs(lo), hi + span)  # the region's end counts toward the int32 check
        out.append((pointer, (lo, hi + span)))
    return out


def _make_call(shape: Shape, node: ast.expr) -> ast.Call:
    """The ``tl.make_tensor_descriptor`` call ``node`` names, through single assignments."""
    d = shape.prog.def_of(node)
    seen = 0
    while d is not None and d.kind == "expr" and isinstance(d.node, ast.Name) and seen < 64:
        d, seen = shape.prog.def_of(d.node), seen + 1
    target = d.node if d is not None and d.kind == "expr" else None
    if not (isinstance(target, ast.Call) and call_name(target) == "tl.make_tensor_descriptor"):
        raise Unbounded("a load or store through something that is no tl.make_tensor_descriptor of this kernel")
    return target


def _elements(node: ast.expr, what: str) -> list[ast.expr]:
    if not isinstance(node, (ast.List, ast.Tuple)):
        raise Unbounded(f"a tensor descriptor whose {what} is not a list")
    return list(node.elts)
