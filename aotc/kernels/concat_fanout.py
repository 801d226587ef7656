"""The fusion plan's rule for nested concats (aotc/kernels/fusion.py): which computed parts of a concat are stored
so that no kernel computes one value more than ``CONCAT_FANOUT`` times."""

from __future__ import annotations

from aotc.ir.ops import Op
from aotc.kernels.fusion_graph import FusionGraph, compute_below_views

# A concat computes each part under its own mask, so a value that two parts read is computed once for each: nested
# concats over one source multiply what a kernel computes (rolls of rolls; Swin's shifted-window masks, built by
# nine slice assignments into one buffer: 2**15 computations of one value in a pointwise kernel that took minutes
# to generate). Past this many computations of one value, the concat's computed parts are stored.
CONCAT_FANOUT = 16


def concat_fanout(g: FusionGraph, stored: set[int], declined: list[str]) -> set[int]:
    grow: set[int] = set()
    # value -> {inline value: times computed when the value is computed once}; views and elementwise ops read
    # their inputs once (a value read twice at one index is one expression), a concat once per part
    times: dict[int, dict[int, int]] = {}
    for n in g.graph.nodes:
        ins = [{} if x.id in stored or x.id in g.external else times.get(x.id, {}) for x in n.inputs]
        own: dict[int, int] = {}
        for d in ins:
            for v, t in d.items():
                own[v] = own.get(v, 0) + t if n.op is Op.CONCAT else max(own.get(v, 0), t)
        worst = max(own.values(), default=1)
        if n.op is Op.CONCAT and worst > CONCAT_FANOUT:
            for x, d in zip(n.inputs, ins):
                base = compute_below_views(g, x.id)
                if d and base not in stored and base not in g.external:
                    grow.add(base)
                    declined.append(
                        f"%{base} feeds concat %{n.outputs[0].id} through nested concats (a value computed {worst} "
                        f"times inline, over {CONCAT_FANOUT}): stored first"
                    )
            own = {}
        for o in n.outputs:
            times[o.id] = {**own, o.id: 1}
    return grow
