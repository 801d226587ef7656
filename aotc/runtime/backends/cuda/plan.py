"""Where every value of a call lives on the GPU, and what each shape's launches need.

A call's device memory is one block (a "slot"): error flags, the schedule's arena, each launch's scratch,
staging for host inputs and the outputs, each at a 256-aligned offset. ``ShapePlan`` holds those offsets,
the grids and the size arguments for one binding of the symbols; it is computed once per shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aotc.errors import ExecError
from aotc.ir.graph import Graph
from aotc.ir.schedule import ALIGN, ArgKind, Schedule
from aotc.ir.symbolic_values import evaluate
from aotc.ir.types import Value
from aotc.runtime.backends.cuda.launch import Launch
from aotc.runtime.backends.cuda.streams import SEQUENTIAL, StreamPlan, plan_streams
from aotc.runtime.plan_bounds import check_shape

# Arg sources in a launch's parameter recipe.
BUFFER, SIZE, FLAG = 0, 1, 2
# Kernels are compiled assuming 16-byte-aligned pointers (kernel_writer.divisible_args): a GPU input less aligned
# is copied into the call's staging first, and an ``out=`` tensor less aligned is refused.
POINTER_ALIGN = 16


def align(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def nbytes_of(v: Value, env: Mapping[str, int]) -> int:
    n = v.type.dtype.itemsize
    for d in v.type.shape:
        n *= evaluate(d, env)
    return n


@dataclass(frozen=True, slots=True)
class Storage:
    """The storage groups of a (graph, schedule), by root value id (as the interpret backend plans them)."""

    inputs: tuple[int, ...]  # root of each graph input's group, in input order
    constants: dict[int, str]  # root -> weight name
    buffers: dict[int, int]  # root -> index into schedule.buffers
    outputs: dict[int, int]  # root -> graph output index whose fresh storage it is
    group: dict[int, int]  # value id -> root
    # root of each state's group (a session's buffer, bound by the call: prepared.py's ``fixed``), in state order
    states: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ShapePlan:
    total: int  # bytes of the slot
    arena: int  # offset of the arena
    buffers: tuple[tuple[int, int], ...]  # (root, offset in the slot)
    inputs: tuple[tuple[int, int], ...]  # per input: (staging offset, bytes)
    outputs: tuple[tuple[int, int], ...]  # (root, offset) of output storage groups
    out_shapes: tuple[tuple[int, ...], ...]
    out_nbytes: tuple[int, ...]
    grids: tuple[tuple[int, int, int], ...]
    sizes: tuple[tuple[int, ...], ...]  # per launch, its SIZE args in order
    scratch: tuple[tuple[int, int], ...]  # per launch: offsets of (global, profile) scratch; -1 for none
    streams: StreamPlan = SEQUENTIAL


def recipe(launch: Launch, storage: Storage) -> tuple[tuple[int, int], ...]:
    """Per parameter: (BUFFER, root) | (SIZE, index into the launch's sizes) | (FLAG, 0)."""
    out: list[tuple[int, int]] = []
    n_sizes = 0
    for a in launch.kernel.args:
        if a.kind is ArgKind.BUFFER:
            out.append((BUFFER, storage.group[a.value]))
        elif a.kind is ArgKind.SIZE:
            out.append((SIZE, n_sizes))
            n_sizes += 1
        else:
            out.append((FLAG, 0))
    return tuple(out)


def plan_shape(
    graph: Graph,
    schedule: Schedule,
    storage: Storage,
    launches: Sequence[Launch],
    env: Mapping[str, int],
    max_streams: int = 1,
) -> ShapePlan:
    check_shape(graph, schedule, env)  # what verification left to check per shape (runtime/plan_bounds.py)
    flag_bytes = align(4 * max(schedule.flags, 1))
    arena_size = evaluate(schedule.arena_bytes, env)
    if arena_size < 0:
        raise ExecError(f"graph {graph.name}: the arena size evaluates to {arena_size} bytes")
    buffers = []
    spans: dict[int, tuple[int, int]] = {}
    for root, index in storage.buffers.items():
        b = schedule.buffers[index]
        offset, size = evaluate(b.offset, env), evaluate(b.nbytes, env)
        if offset % ALIGN or offset < 0 or offset + size > arena_size:
            raise ExecError(
                f"graph {graph.name}: arena buffer of value %{b.value} at [{offset}, {offset + size}) does not fit "
                f"a {arena_size}-byte arena at {ALIGN}-byte alignment"
            )
        buffers.append((root, flag_bytes + offset))
        spans[root] = (flag_bytes + offset, flag_bytes + offset + size)
    off = align(flag_bytes + arena_size)
    grids, sizes, scratch = [], [], []
    for launch in launches:
        k = launch.kernel
        grid = tuple(evaluate(d, env) for d in k.grid)
        if any(g < 0 for g in grid):
            raise ExecError(f"kernel {k.name}: its grid evaluates to {grid}")
        launch.check_grid(grid)  # type: ignore[arg-type]
        grids.append(grid)
        sizes.append(tuple(evaluate(a.size, env) for a in k.args if a.kind is ArgKind.SIZE))
        offsets = []
        aligns = (launch.global_scratch[1], launch.profile_scratch[1])
        for nbytes, al in zip(launch.scratch_bytes(grid), aligns):  # type: ignore[arg-type]
            if nbytes:
                off = align(off, max(al, ALIGN))
                offsets.append(off)
                off += nbytes
            else:
                offsets.append(-1)
        scratch.append((offsets[0], offsets[1]))
    inputs = []
    for v in graph.inputs[: graph.num_feeds]:  # a state is no input to stage: it stays in its session's buffer
        n = nbytes_of(v, env)
        off = align(off)
        inputs.append((off, n))
        off += n
    outputs = []
    for root, index in storage.outputs.items():
        off = align(off)
        outputs.append((root, off))
        off += nbytes_of(graph.outputs[index], env)
    results = graph.outputs[: graph.num_results]  # a state's new value is left in its buffer, never handed out
    out_shapes = tuple(tuple(evaluate(d, env) for d in o.type.shape) for o in results)
    return ShapePlan(
        total=align(off),
        arena=flag_bytes,
        buffers=tuple(buffers),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        out_shapes=out_shapes,
        out_nbytes=tuple(nbytes_of(o, env) for o in results),
        grids=tuple(grids),  # type: ignore[arg-type]
        sizes=tuple(sizes),
        scratch=tuple(scratch),
        streams=plan_streams([_accesses(launch, storage, spans) for launch in launches], max_streams),
    )


def _accesses(launch: Launch, storage: Storage, spans: Mapping[int, tuple[int, int]]) -> tuple[list, list]:
    """What one launch reads and writes (the error flags are left out: kernels only ever set them)."""
    k = launch.kernel
    written = set(k.outputs)
    reads, writes = [], []
    for a in k.args:
        if a.kind is ArgKind.BUFFER:
            root = storage.group[a.value]
            span = spans.get(root)
            access = (0, *span) if span is not None else (root + 1, 0, 1)
            (writes if a.value in written else reads).append(access)
    return reads, writes
