"""schedule_graph: a lowered primitive graph -> the Schedule (kernels, arena, views) that runs it."""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from aotc.errors import UnsupportedError
from aotc.ir.digest import seal_all
from aotc.ir.graph import Graph
from aotc.ir.launch import DEFAULT_DRIVER_FLOOR
from aotc.ir.schedule import ArchLaunch, ArgKind, Kernel, Schedule, same_launch
from aotc.kernels import naming
from aotc.kernels.config import KernelConfig
from aotc.kernels.emit import FlagSlots, KernelBuilder
from aotc.kernels.fusion import KernelPlan, plan_fusion
from aotc.kernels.memplan import plan_memory
from aotc.kernels.naming import kernel_name
from aotc.kernels.templates import hook, template
from aotc.kernels.toolchain import choose_toolchain
from aotc.kernels.tuned import TileChoice, table_tiles


def schedule_graph(
    graph: Graph,
    options: Any = None,
    tiles: Mapping[int, Any] | None = None,
    sources: dict[tuple[int, str], TileChoice] | None = None,
) -> Schedule:
    """Fuse ``graph`` into kernels, generate each kernel's Triton source and plan the arena.

    ``options`` may carry ``targets`` (e.g. ``("sm_80", "sm_90")``); the heuristics size blocks for the
    oldest; every launch carries the ``Extents`` its template derived and a digest binding it to its nodes
    (aotc.ir.digest). A newer target whose heuristics choose other tiles (sm_90's wider matmul tiles, bigger
    pointwise blocks) gets an ``ArchLaunch`` of the kernel, compiled for that target only. Identical
    kernels (the same code apart from the names of the kernel and its pointers) share one name and source.

    ``tiles`` (autotuning) maps a launch's index to the config its template uses instead of the
    heuristic one (a TileConfig for matmul and conv, an AttentionConfig for attention). Each kernel's
    template, and so its emitter, is its plan's row of the template table (aotc/ir/templates.py).

    Without ``tiles``, each tunable launch (matmul, conv, attention) takes its tiles for each target from the
    tuned table (aotc/kernels/tuned/) where it has an entry, else from the heuristics; ``sources`` (when given)
    receives where they came from, by (launch index, target).
    """
    archs = _archs(options)
    # the oldest target's PTX too: a compile for sm_90 alone builds its one kernel per launch with the TMA loads
    # its driver floor allows (kernels/attention_tma.py, matmul_tma.py), as an sm_90 arch launch beside sm_80 would
    config = KernelConfig(arch=archs[0], ptx=_ptx(archs[0], options) if getattr(options, "targets", None) else None)
    plan = plan_fusion(graph)
    producers = {o.id: (i, n) for i, n in enumerate(graph.nodes) for o in n.outputs}
    flags = FlagSlots()
    # values some kernel reads, or the graph returns, or a View shares: the rest are stored only through views
    needed = {v for kp in plan.kernels for v in kp.reads} | {v.id for v in graph.outputs} | {v.base for v in plan.views}
    kernels: list[Kernel] = []
    seen: dict[tuple, Kernel] = {}
    for idx, kp in enumerate(plan.kernels):

        def builder(pointers: Mapping[str, str] | None = None, kp: KernelPlan = kp) -> KernelBuilder:
            b = KernelBuilder(graph, {o.id for i in kp.nodes for o in graph.nodes[i].outputs}, producers, flags)
            b.pointer_renames = pointers or {}
            for output, chain in kp.view_outputs:
                b.store_view(chain[0].inputs[0], output, chain)
            if kp.view_outputs and kp.anchor.id not in needed:
                b.discard(kp.anchor)
            return b

        name = _name(graph, kp, idx, producers)
        start = flags.count
        tile = tiles.get(idx) if tiles is not None else _tuned(graph, kp, idx, archs[0], options, sources)
        emitted = _emit(builder(), kp, name, config, tile)
        kernel = _shared(emitted, seen)
        # a kernel shared with an earlier launch takes its pointer names; so do this launch's arch launches
        names = {a.name: b.name for a, b in zip(emitted.args, kernel.args) if a.name != b.name}
        end = flags.count
        arch_launches = []
        # Pointwise and scatter blocks do not depend on the target (KernelConfig.pointwise_block): only
        # contractions, attention and reductions are generated again per target.
        for arch in archs[1:] if kp.root is not None or kp.reductions or _tunable(kp) else ():
            # The same kernel for another target: same flag slots, its own tiles.
            flags.count = start
            tile = None if tiles is not None else _tuned(graph, kp, idx, arch, options, sources)
            other = _emit(
                builder(names), kp, f"{name}_sm{arch}", KernelConfig(arch=arch, ptx=_ptx(arch, options)), tile
            )
            if _binary_key(other, other.name) != _binary_key(kernel, kernel.name) or other.grid != kernel.grid:
                if same_launch(kernel, other):
                    arch_launches.append(ArchLaunch(f"sm_{arch}", _shared(other, seen, rename=False)))
        flags.count = end
        kernels.append(kernel.replace(arch_launches=tuple(arch_launches)) if arch_launches else kernel)
    kernels = _note_sharers(kernels, [_name(graph, kp, i, producers) for i, kp in enumerate(plan.kernels)])
    buffers, arena = plan_memory(graph, kernels, plan.views)
    # each launch bound to the nodes it computes, now that its name, code and arch launches are final
    return Schedule(seal_all(graph, kernels), buffers, arena, tuple(plan.views), flags.count, tuple(plan.declined))


def _tuned(
    graph: Graph, kp: KernelPlan, idx: int, arch: int, options: Any, sources: dict[tuple[int, str], TileChoice] | None
) -> Any:
    """The tuned table's tiles for launch ``idx`` on ``sm_<arch>``, or None (the heuristic's)."""
    if not _tunable(kp):
        return None
    choice = table_tiles(graph, kp.root, kp.nodes, f"sm_{arch}", options, kp.group)
    if sources is not None:
        sources[idx, f"sm_{arch}"] = choice
    return choice.tiles


def _tunable(kp: KernelPlan) -> bool:
    """Whether launch ``kp``'s tiles may come from the tuned table: a tuned template's launch rooted at a node, or
    computing a node group (a recurrence's chain)."""
    return bool(template(kp.kind).tuning) and (kp.root is not None or kp.group is not None)


def _shared(kernel: Kernel, seen: dict[tuple, Kernel], rename: bool = True) -> Kernel:
    """``kernel`` under the name and source of an identical kernel emitted before, if any: the same code but for
    the names of its pointers (a weight named after another layer's parameter), which it then takes over (unless
    not ``rename``: an arch launch keeps the arg names of the launch it stands in for)."""
    key = _binary_key(kernel, kernel.name)
    first = seen.get(key)
    if first is None:
        seen[key] = kernel
        return kernel
    if not rename and [a.name for a in first.args] != [a.name for a in kernel.args]:
        return kernel
    args = tuple(dataclasses.replace(a, name=b.name) for a, b in zip(kernel.args, first.args))
    return kernel.replace(name=first.name, source=first.source, args=args)


def _note_sharers(kernels: list[Kernel], own: Sequence[str]) -> list[Kernel]:
    """Each code that several launches run (a layer's kernel in every layer) names in its header the launches
    besides the first, by the names they would have had (``own``: ``k9_reduction_layernorm``); the binary key
    reads no comment, so what shares stays the same."""
    runs: dict[str, list[str]] = {}
    for k, name in zip(kernels, own):
        for code_name in (k.name, *(v.kernel.name for v in k.arch_launches)):
            runs.setdefault(code_name, []).append(name)

    def noted(k: Kernel) -> Kernel:
        others = runs.get(k.name, [])[1:]
        if not others:
            return k
        head, jit, body = k.source.partition("\n@triton.jit\n")
        return k.replace(source="\n".join([head, *naming.sharers(others)]) + jit + body)

    out = [noted(k) for k in kernels]
    return [
        k.replace(arch_launches=tuple(dataclasses.replace(v, kernel=noted(v.kernel)) for v in k.arch_launches))
        for k in out
    ]


def _emit(b: KernelBuilder, kp: KernelPlan, name: str, config: KernelConfig, tile: Any = None) -> Kernel:
    return hook(template(kp.kind).emit)(b, kp, name, config, tile)


def _binary_key(k: Kernel, name: str) -> tuple:
    """Everything the compiled binary depends on, the names of the kernel, its pointers and its values aside (a
    load is named after its pointer, ``ln_2_weight`` in another layer), and its template: the file stores one kind
    per code, so a scatter's copy never shares a pointwise kernel's code."""
    pointers = {a.name: f"__ptr{j}" for j, a in enumerate(k.args) if a.kind is not ArgKind.SIZE}
    return (
        k.kind,
        _anonymous(k.source, name, tuple(pointers.items())),
        tuple((pointers.get(a.name, a.name), a.type) for a in k.args),
        k.constexprs,
        k.num_warps,
        k.num_stages,
        k.divisible,
    )


def _name(graph: Graph, kp: KernelPlan, idx: int, producers: Mapping[int, tuple[int, Any]]) -> str:
    """``k6_matmul_bias_gelu``: position, template and what it fuses (aotc/kernels/naming.py)."""
    return kernel_name(graph, producers, kp.kind, kp.nodes, kp.root, idx)


@functools.lru_cache(maxsize=256)  # a kernel's key is asked for again when its arch launches are compared
def _anonymous(source: str, name: str, pointers: tuple[tuple[str, str], ...]) -> str:
    """The syntax tree of kernel ``name``'s ``source`` (so no comment: the header), the kernel renamed ``KERNEL``,
    its pointers by ``pointers`` and every name it assigns ``__vN`` in the order they appear: two kernels that
    compute the same, whatever they call their values, read the same."""
    tree = ast.parse(source)
    names = dict(pointers)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            node.name = "KERNEL"
            stores = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            for n in ast.walk(node):
                if isinstance(n, ast.arg):
                    n.arg = names.get(n.arg, n.arg)
                elif isinstance(n, ast.Name):
                    if n.id in stores and n.id not in names:
                        names[n.id] = f"__v{len(names)}"
                    n.id = names.get(n.id, n.id)
    return ast.dump(tree)


def code(source: str) -> str:
    """A kernel's source without its header comment (the nodes of the launch it was first emitted for)."""
    return "".join(t for t in source.splitlines(keepends=True) if not t.startswith("#"))


def _ptx(arch: int, options: Any) -> int | None:
    """The PTX version ``sm_<arch>`` is built at for the options' driver floor (kernels/toolchain.py), or None
    where no ptxas builds it (the compile step then says why)."""
    floor = getattr(options, "cuda_driver_floor", None) or DEFAULT_DRIVER_FLOOR
    try:
        return choose_toolchain(f"sm_{arch}", floor).ptx_version
    except UnsupportedError:
        return None


def _archs(options: Any) -> list[int]:
    """The targets' compute capabilities, oldest first (the default kernels are sized for it); [80] for none."""
    targets = getattr(options, "targets", None) or ()
    archs = {int(str(t).removeprefix("sm_").rstrip("a")) for t in targets if str(t).removeprefix("sm_")[:2].isdigit()}
    return sorted(archs) or [80]
