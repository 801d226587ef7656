"""The values every schedule stores from the start: graph outputs (or the values they are views of) and the
end of each contraction's epilogue, the pointwise consumers fused into the contraction kernel."""

from __future__ import annotations

from collections.abc import Collection

from aotc.errors import UnsupportedError
from aotc.ir.ops import Op
from aotc.ir.schedule import View
from aotc.ir.types import Node, Value
from aotc.kernels.contraction_emit import why_not_epilogue
from aotc.kernels.fusion_graph import BIJECTIVE_VIEWS, VIEWS, FusionGraph
from aotc.kernels.templates import check, rooted_at


def output_views(
    g: FusionGraph, stored: set[int], views: list[View], declined: list[str]
) -> dict[int, list[tuple[Value, tuple[Node, ...]]]]:
    """Marks the graph outputs stored. An output that is a reshape of a computed value shares its storage
    (a View); one that is a permute/flip/reshape chain of a computed value is written by that value's kernel
    as a second store at the mapped index. Returned: base value id -> [(output, view chain from the base)]."""
    out: dict[int, list[tuple[Value, tuple[Node, ...]]]] = {}
    bases: set[int] = set()
    for o in g.graph.outputs:
        if o.id in g.external or o.id in stored:
            continue
        chain, base = [], o
        while base.id not in g.external and g.node(base.id).op in BIJECTIVE_VIEWS:
            chain.append(g.node(base.id))
            base = g.node(base.id).inputs[0]
        if not chain or base.id in g.external:
            stored.add(o.id)
            if chain or g.node(o.id).op in VIEWS:
                declined.append(f"output %{o.id} is a {g.node(o.id).op.value} view: its own kernel writes it")
            continue
        stored.add(base.id)
        if all(n.op is Op.RESHAPE for n in chain) and base.id not in g.output_ids and base.id not in bases:
            views.append(View(o.id, base.id))
            bases.add(base.id)
        elif g.node(base.id).op is Op.SCATTER:
            # a scatter's value is final only after its second launch: the copy cannot store it
            stored.add(o.id)
            declined.append(
                f"output %{o.id} is a {chain[0].op.value} view of scatter %{base.id}: its own kernel writes it"
            )
        else:
            out.setdefault(base.id, []).append((o, tuple(reversed(chain))))
    return out


def epilogues(
    g: FusionGraph, stored: set[int], declined: list[str], grouped: Collection[int] = ()
) -> dict[int, tuple[Node, tuple[Node, ...]]]:
    """For each node a template is rooted at: its pointwise epilogue where the template takes one (its row says);
    the epilogue's one escaping value is stored. Keyed by it. Nodes of a node group (``grouped``, fusion.py) are
    another launch's: never roots here, nor in an epilogue."""
    out: dict[int, tuple[Node, tuple[Node, ...]]] = {}
    claimed: set[int] = set(grouped)
    for ci, c in enumerate(g.graph.nodes):
        row = rooted_at(c)
        if row is None or ci in claimed:
            continue
        reason = check(c)
        if reason is not None:
            raise UnsupportedError(f"no kernel for {c.op.value} ({c}): {reason}")
        chain, end = _epilogue(g, c, claimed, declined) if row.epilogue else ((), c.outputs[0].id)
        claimed.update(g.prod[n.outputs[0].id][0] for n in chain)
        stored.add(end)
        out[end] = (c, chain)
    return out


def _epilogue(g: FusionGraph, c: Node, claimed: set[int], declined: list[str]) -> tuple[tuple[Node, ...], int]:
    """The largest set of pointwise nodes on ``c``'s output tile whose only value read elsewhere is one
    (GELU's several uses of its input converge again), grown a level at a time from the product."""
    anchor = c.outputs[0].id
    desc = {anchor}
    for n in g.graph.nodes[g.prod[anchor][0] + 1 :]:
        if any(x.id in desc for x in n.inputs):
            desc.update(o.id for o in n.outputs)
    inside: set[int] = set()
    values = {anchor}
    best: tuple[tuple[Node, ...], int] = ((), anchor)
    why = ""
    while True:
        added = False
        for vid in sorted(values):
            for ui in g.users.get(vid, []):
                u = g.graph.nodes[ui]
                if ui in inside:
                    continue
                reason = "another launch computes it" if ui in claimed else why_not_epilogue(c, u)
                if reason is None and any(x.id in desc and x.id not in values for x in u.inputs):
                    continue  # an operand still to come (or a view of the tile): maybe next round
                if reason is not None:
                    why = why or f"{u.op.value} %{u.outputs[0].id} not fused into {c.op.value} %{anchor}: {reason}"
                    continue
                inside.add(ui)
                values.add(u.outputs[0].id)
                added = True
        escaping = [v for v in values if v in g.output_ids or any(ui not in inside for ui in g.users.get(v, []))]
        if len(escaping) == 1:
            best = (tuple(g.graph.nodes[i] for i in sorted(inside)), escaping[0])
        if not added:
            break
    if why:
        declined.append(why)
    return best
