"""A small scheduled model and hostile variants of its launch plan, written by the project's own writer with its
plan checks switched off and resealed: the files an inference server must refuse (test_plan_verification.py
at load, tests/runtime/test_plan_bounds.py at the call). ``sealed`` recomputes the launches' digests, as an
attacker who knows aotc's digest would, so that the checks behind the digest are what refuse the file.

The model: x[batch, seq, 192] -> gelu(x @ w1) @ w3 + relu(x @ w2), three matmul launches over two arena
buffers of 768*batch*seq bytes each (the first live for launches 0..1, the second for 1..2), batch in
[1, 8], seq in [1, 64].
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np
from graph_kit import const, make_graph
from kernel_kit import fake_binaries, unchecked
from mutation import reseal

from aotc.artifact import write_artifact
from aotc.ir import DType, Graph, Op, Symbol, TensorType, sym
from aotc.ir.digest import seal
from aotc.ir.launch import KernelBinary
from aotc.ir.schedule import ArchLaunch, Kernel, Schedule
from aotc.ir.symbolic import smin
from aotc.ir.types import Node
from aotc.ir.variant import Variant

D = 192
BATCH, SEQ = sym("batch"), sym("seq")
# Where a min(batch, seq) size is smaller than batch*seq: every dim at its min and at its max agree.
MIXED = {"batch": 4, "seq": 2}


@cache
def model() -> tuple[Graph, Schedule]:
    """The primitive graph and its schedule, as the compiler makes them."""
    from aotc.kernels.scheduler import schedule_graph
    from aotc.lowering.decompose import decompose

    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal((D, D)) * 0.1).astype(np.float32) for n in ("w1", "w2", "w3")}

    def body(b: Any, x: Any) -> list[Any]:
        w1, w2, w3 = (const(b, n, w) for n, w in weights.items())
        h1 = b.op(Op.GELU, b.op(Op.MATMUL, x, w1), approximate="tanh")
        h2 = b.op(Op.RELU, b.op(Op.MATMUL, x, w2))
        return [b.op(Op.ADD, b.op(Op.MATMUL, h1, w3), h2)]

    g = make_graph(
        {"x": TensorType(DType.float32, (BATCH, SEQ, D))},
        body,
        symbols=(Symbol("batch", 1, 8), Symbol("seq", 1, 64)),
        constants=weights,
        name="plan_attack",
    )
    variant = decompose(g)
    return variant, schedule_graph(variant)


def write(schedule: Schedule, binaries: bool | Sequence[KernelBinary] = False, graph: Graph | None = None) -> bytes:
    """The file the writer makes of ``schedule`` (of ``graph``: the model's by default) with its plan checks off,
    resealed; ``binaries``: fake ones made for ``schedule``'s kernels, or those given."""
    graph = graph or model()[0]
    if isinstance(binaries, bool):
        binaries = fake_binaries(schedule) if binaries else ()
    with unchecked():
        data = write_artifact([Variant(graph, schedule)], binaries=tuple(binaries))
    return reseal(data)


def sealed(s: Schedule, graph: Graph | None = None) -> Schedule:
    """``s`` with every launch's (and variant's) digest recomputed from ``graph``."""
    graph = graph or model()[0]
    return dataclasses.replace(s, kernels=tuple(seal(graph, k) for k in s.kernels))


def constexpr(s: Schedule, i: int, name: str, value: int, grid: Callable[[Kernel], tuple] | None = None) -> Schedule:
    """Launch ``i`` with constexpr ``name`` set to ``value`` (and its grid made by ``grid``)."""
    k = s.kernels[i]
    changes: dict[str, Any] = {"constexprs": tuple((n, value if n == name else v) for n, v in k.constexprs)}
    if grid is not None:
        changes["grid"] = grid(k)
    return launch(s, i, **changes)


def with_source(s: Schedule, i: int, old: str, new: str) -> Schedule:
    """Launch ``i`` with ``old`` replaced by ``new`` in its source."""
    k = s.kernels[i]
    assert old in k.source, (old, k.source)
    return launch(s, i, source=k.source.replace(old, new))


def edited(graph: Graph, match: Callable[[Node], bool], **attrs: Any) -> Graph:
    """``graph`` with the first node ``match`` picks given ``attrs``: a graph edit its kernels do not follow."""
    nodes = list(graph.nodes)
    i = next(i for i, n in enumerate(nodes) if match(n))
    nodes[i] = nodes[i].replace(attrs=nodes[i].attrs.set(**attrs))
    return graph.replace(nodes=tuple(nodes))


def launch(s: Schedule, i: int, **changes: Any) -> Schedule:
    kernels = list(s.kernels)
    kernels[i] = kernels[i].replace(**changes)
    return dataclasses.replace(s, kernels=tuple(kernels))


def arg(s: Schedule, i: int, name: str, **changes: Any) -> Schedule:
    k = s.kernels[i]
    args = tuple(dataclasses.replace(a, **changes) if a.name == name else a for a in k.args)
    return launch(s, i, args=args)


def buffer(s: Schedule, j: int, **changes: Any) -> Schedule:
    buffers = list(s.buffers)
    buffers[j] = dataclasses.replace(buffers[j], **changes)
    return dataclasses.replace(s, buffers=tuple(buffers))


def times(n: int) -> Callable[[Kernel], tuple]:
    return lambda k: (k.grid[0] * n, k.grid[1], k.grid[2])


def with_arch_launch(s: Schedule, i: int, grid: Callable[[Kernel], tuple] | None = None) -> Schedule:
    """Launch ``i`` with an sm_90 variant of its own code (renamed), its grid changed by ``grid``; sealed as the
    compiler seals a plan (a hostile grid is then the grid check's to refuse)."""
    k = s.kernels[i]
    name = f"{k.name}_sm90"
    code = k.replace(name=name, source=k.source.replace(f"def {k.name}(", f"def {name}("))
    if grid is not None:
        code = code.replace(grid=grid(k))
    return launch(s, i, arch_launches=(ArchLaunch("sm_90", seal(model()[0], code)),))


def min_sized_buffer(s: Schedule) -> Schedule:
    """Buffer 0 sized 768*seq*min(batch, seq): its value's 768*batch*seq bytes when every dim is at its min
    and when every dim is at its max, fewer in between (batch=4, seq=2)."""
    return buffer(s, 0, nbytes=768 * SEQ * smin(BATCH, SEQ))


def mixed_overlap(s: Schedule) -> Schedule:
    """Buffer 1 (live with buffer 0 at launch 1) placed at 768*seq*min(batch, seq): right after buffer 0 at
    the ends of the ranges, inside it at batch=4, seq=2."""
    return buffer(s, 1, offset=768 * SEQ * smin(BATCH, SEQ))
