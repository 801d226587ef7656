"""The lowering pipeline: a named, ordered list of Graph -> Graph stages, each dumpable and verified."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

from aotc.ir.graph import Graph
from aotc.ir.verify import verify
from aotc.lowering.attention import decompose_keeping_attention, explain_attention, fuse_attention
from aotc.lowering.cse import cse, dce
from aotc.lowering.decompose import decompose
from aotc.lowering.fold import fold_constants
from aotc.lowering.options import CompileOptions
from aotc.lowering.padding import explain_padding, pad_matmuls
from aotc.lowering.precision import LOW_DTYPES, convert_precision, mark_tf32, mark_tf32x3
from aotc.lowering.simplify import simplify
from aotc.lowering.splitk import explain_split_k, split_k

Stage = tuple[str, Callable[[Graph], Graph]]


def stages(options: CompileOptions) -> list[Stage]:
    out: list[Stage] = []
    if options.precision in LOW_DTYPES:
        # Before decomposition, so softmax and the norms decompose with their statistics in float32.
        out.append(("precision", functools.partial(convert_precision, precision=options.precision)))
    if options.fuse_attention:
        out += [("decompose", decompose_keeping_attention), ("attention", fuse_attention)]
    else:
        out.append(("decompose", decompose))
    out.append(("simplify", simplify))
    if options.precision == "tf32":
        out.append(("tf32", mark_tf32))
    elif options.precision == "tf32x3":
        out.append(("tf32x3", mark_tf32x3))
    # CSE before folding too: two equal folds would otherwise store two equal constants.
    if options.cse:
        out.append(("cse", cse))
    if options.fold_constants:
        out.append(("fold_constants", functools.partial(fold_constants, max_bytes=options.max_fold_bytes)))
        if options.cse:
            out.append(("cse_2", cse))
    if options.matmul_padding:
        # After folding, so the weights it pads are the ones the artifact stores.
        out.append(("matmul_padding", pad_matmuls))
    if options.split_k:
        # After padding, so it splits the K the kernel will run (a padded K splits as evenly as its weight).
        out.append(("split_k", split_k))
    out += [("simplify_2", simplify), ("dce", dce)]
    return out


STAGES: list[Stage] = stages(CompileOptions())


def lower(
    graph: Graph,
    options: CompileOptions | None = None,
    dump_dir: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    observe: Callable[[str, Graph], None] | None = None,
) -> Graph:
    """High-level graph -> verified primitive graph. ``progress(stage)`` is called before each stage, and
    ``observe(stage, graph)`` with the graph the stage receives (the compiler records the padding from it)."""
    options = options or CompileOptions.from_env()
    dump = Path(dump_dir) if dump_dir is not None else None
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / "00-input.txt").write_text(str(graph) + "\n")
    verify(graph, stage="input")
    for i, (name, fn) in enumerate(stages(options), start=1):
        if progress is not None:
            progress(name)
        if observe is not None:
            observe(name, graph)
        graph = fn(graph)
        if options.verify_each_stage:
            verify(graph, stage=name)
        if dump is not None:
            (dump / f"{i:02d}-{name}.txt").write_text(str(graph) + "\n")
    verify(graph, stage="lowered", primitive_only=True)
    return graph


def explain_lowering(graph: Graph, options: CompileOptions | None = None) -> list[str]:
    """What the pattern passes decided, for ``aotc compile --explain``: each hand-written attention the
    attention pass could not fold (and why), each matmul the padding pass padded or declined (and why), and
    each long-K matmul the split-K pass split or declined (and why).

    Re-runs the stages, reading the graph each of those passes receives; a compile never pays for it.
    """
    options = options or CompileOptions.from_env()
    lines: list[str] = []
    for name, fn in stages(options):
        if name == "attention":
            lines += [f"attention not fused: {reason}" for reason in explain_attention(graph)]
        elif name == "matmul_padding":
            lines += explain_padding(graph)
        elif name == "split_k":
            lines += explain_split_k(graph)
        graph = fn(graph)
    return lines
