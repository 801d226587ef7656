"""``aotc.compile``: trace -> lower -> artifact -> loaded executable, in one call.

The one module that ties the layers together (DESIGN §2): frontend, lowering and artifact writer are
imported here and nowhere else outside the CLI; the runtime only when a compiled model is first called.
``compile_graph`` runs the stages in order, each a small function taking what the stage before produced.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aotc import __version__
from aotc.artifact.writer import write_artifact
from aotc.errors import ShapeError, UnsupportedError
from aotc.frontend.module import Module
from aotc.frontend.spec import TensorSpec
from aotc.frontend.trace import trace
from aotc.ir.graph import Graph
from aotc.ir.launch import KernelBinary
from aotc.ir.schedule import Schedule
from aotc.ir.variant import Variant
from aotc.lowering.options import CompileOptions
from aotc.lowering.padding import padded_lines
from aotc.lowering.pipeline import lower
from aotc.lowering.precision import check_precision
from aotc.lowering.source_constants import rebase_source
from aotc.onnx.runtime_model import ONNX_META_KEY, RuntimeOnnx, runtime_onnx
from aotc.progress import StageTimer
from aotc.torch_export import is_torch_model

# progress(stage) as each compile stage starts; progress(stage, done, total) as counted work in it advances
# (kernels compiled): aotc.progress.StageTimer prints both
Progress = Callable[..., None] | None


class CompiledModel:
    """A compiled model: call it like the model (numpy in, numpy out, same output structure).

    The executable is loaded from the artifact bytes on first use, so writing an artifact (as the CLI does)
    never pays for a load it doesn't need. It runs the numpy references (device="reference"), the reference every
    other backend is checked against; ``aotc.load(compiled.artifact_bytes, device="cpu")`` runs onnxruntime.
    """

    def __init__(
        self,
        graph: Graph,
        lowered: Graph,
        artifact_bytes: bytes,
        kernels: Kernels | None = None,
        options: CompileOptions | None = None,
        onnx_note: str = "",
    ) -> None:
        self.graph = graph  # the traced (or imported) high-level graph
        self.lowered = lowered  # the primitive graph stored in the artifact
        self.artifact_bytes = artifact_bytes
        self.kernels = kernels or Kernels(None, {}, "not scheduled")
        self.options = options or CompileOptions.from_env()
        self.onnx_note = onnx_note  # whether the artifact stores an ONNX model (for tools), and why not
        self._executable: Any = None

    @property
    def schedule(self) -> Schedule | None:
        """The kernels' launch plan, or None when the model runs on the cpu backend only."""
        return self.kernels.schedule

    @property
    def variant(self) -> Variant:
        """The variant the artifact stores: the lowered graph and its launch plan."""
        return Variant(self.lowered, self.kernels.schedule)

    def explain(self) -> str:
        """What each kernel fuses and every fusion declined, with reasons, then what the attention and
        padding passes did and declined (``aotc compile --explain``)."""
        from aotc.lowering.pipeline import explain_lowering

        if self.kernels.schedule is None:
            text = self.kernels.note + "\n"
        else:
            from aotc.kernels.explain import explain

            text = explain(self.lowered, self.kernels.schedule, self.kernels.tile_sources)
        if self.kernels.tuning is not None:
            text += "".join(f"{line}\n" for line in self.kernels.tuning.lines())
        passes = explain_lowering(self.graph, self.options)
        if passes:
            text += "lowering:\n" + "".join(f"  - {p}\n" for p in passes)
        if self.onnx_note:
            text += self.onnx_note + "\n"
        return text

    @property
    def executable(self) -> Any:
        if self._executable is None:
            from aotc.runtime import load

            self._executable = load(self.artifact_bytes, device="reference")
        return self._executable

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.executable(*args, **kwargs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Flat outputs, in graph output order."""
        return self.executable.run(feeds)

    def session(self) -> Any:
        """A Session over the reference executable, for a model with state (``Module.state``): see
        ``Executable.session``."""
        return self.executable.session()

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.graph.input_names

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_bytes(self.artifact_bytes)

    def __repr__(self) -> str:
        return f"CompiledModel({self.graph.name!r}, inputs={list(self.input_names)}, {len(self.artifact_bytes)} bytes)"


def compile(
    model: Module | Callable[..., Any],
    inputs: Mapping[str, TensorSpec] | None = None,
    *,
    options: CompileOptions | None = None,
    dump_ir: str | os.PathLike | None = None,
    name: str | None = None,
    progress: Progress = None,
    precision: str | None = None,
    verbose: bool = False,
    dim_names: Mapping[str, Mapping[int, str]] | None = None,
) -> CompiledModel:
    """Trace ``model`` over ``inputs``, lower it to primitives, write the artifact and load it on the cpu.

    ``model`` is an aotc ``nn.Module`` or function of tensors, a ``torch.nn.Module`` (captured with torch.export;
    ``inputs`` as for an aotc model) or a ``torch.export.ExportedProgram`` (no ``inputs``: its dims come from its
    dynamic_shapes; ``dim_names={"x": {0: "batch"}}`` names them where ``torch.export.save`` dropped the names,
    else they read ``x_0``). ``options`` is an ``aotc.CompileOptions``; ``dump_ir`` a folder that receives every
    stage's graph;
    ``progress(stage)`` is called as each compile stage starts and ``progress(stage, done, total)`` as kernels
    compile; ``verbose=True`` prints both to stderr (a live line on a terminal). ``precision`` ("fp32", "tf32", "bf16" or
    "fp16") overrides ``options.precision``.
    """
    options = _with_precision(options, precision)
    if verbose and progress is None:
        timer = StageTimer(threshold_s=0.0)
        try:
            return compile(
                model, inputs, options=options, dump_ir=dump_ir, name=name, progress=timer, dim_names=dim_names
            )
        finally:
            timer.finish()
    if is_torch_model(model):
        from aotc.torch_export import import_torch

        _report(progress, "torch.export")
        graph = import_torch(model, inputs, name=name, progress=progress, dim_names=dim_names)
    else:
        if dim_names:
            raise ShapeError("dim_names names the dims of a torch.export.ExportedProgram; this model's are its Dims")
        if inputs is None:
            raise ShapeError("inputs must be a non-empty mapping of input name -> TensorSpec")
        _report(progress, "trace")
        graph = trace(model, inputs, name=name or _default_name(model))
    return compile_graph(graph, options=options, dump_ir=dump_ir, progress=progress)


def compile_graph(
    graph: Graph,
    *,
    options: CompileOptions | None = None,
    dump_ir: str | os.PathLike | None = None,
    progress: Progress = None,
    precision: str | None = None,
) -> CompiledModel:
    """Lower a traced or imported high-level graph and write its artifact: the one path every compile takes."""
    options = _with_precision(options, precision)
    padded: list[str] = []

    def record_padding(stage: str, received: Graph) -> None:
        # The padding pass's decisions on the graph it receives: its 'padded:' lines, without a second rewrite.
        if stage == "matmul_padding":
            padded.extend(padded_lines(received))

    lowered = lower(graph, options, dump_dir=dump_ir, progress=progress, observe=record_padding)
    kernels = kernel_stage(lowered, options, progress)
    # Lowering may store a weight padded or in half precision under its own name: the source graph reads that.
    source = rebase_source(graph, lowered)
    onnx = onnx_stage(source, progress)
    artifact = write_stage(source, lowered, kernels, options, progress, padded, onnx)
    return CompiledModel(graph, lowered, artifact, kernels, options, onnx.note)


def kernel_stage(lowered: Graph, options: CompileOptions, progress: Progress = None) -> Kernels:
    """Fuse the lowered graph into Triton kernels and compile them for ``options.targets``.

    A graph with an op no kernel template covers keeps only its cpu path: the reason is recorded
    (``--explain``, the artifact's meta) rather than failing the compile.
    """
    if not options.kernels:
        return Kernels(None, {}, "kernels disabled (CompileOptions.kernels=False)")
    _report(progress, "schedule kernels")
    if options.targets and not options.autotune:
        from aotc.kernels.cache import KernelCache
        from aotc.kernels.compile_workers import prestart

        if KernelCache().is_empty():  # a cold compile: start the workers while the kernels are scheduled
            prestart()
    try:
        return _kernels(lowered, options, progress)
    finally:
        if options.targets:
            from aotc.kernels.compile_workers import release_prestarted

            release_prestarted()


def _kernels(lowered: Graph, options: CompileOptions, progress: Progress) -> Kernels:
    from aotc.kernels.scheduler import schedule_graph

    sources: dict[tuple[int, str], Any] = {}
    if options.tune_dims:
        from aotc.autotune import tuning_env

        tuning_env(lowered, dict(options.tune_dims))  # a dim the model lacks, or out of its range: the caller's error
    try:
        schedule = schedule_graph(lowered, options, sources=sources)
    except UnsupportedError as e:
        return Kernels(None, {}, f"no kernels: {e}")
    tuning = None
    if options.autotune:
        _report(progress, "autotune kernels")
        from aotc.autotune import autotune, autotuned_sources

        schedule, tuning = autotune(
            lowered, schedule, options.targets, dims=dict(options.tune_dims), driver_floor=options.cuda_driver_floor
        )
        sources.update(autotuned_sources(schedule, tuning))
    binaries: dict[str, KernelBinary] = {}
    if options.targets:
        _report(progress, "compile kernels")
        from aotc.kernels.aot import AotOptions, compile_kernels

        aot = AotOptions(cuda_driver_floor=options.cuda_driver_floor)
        counted = None if progress is None else lambda done, total: progress("compile kernels", done, total)
        binaries = compile_kernels(schedule.kernels, targets=options.targets, options=aot, on_done=counted)
    return Kernels(schedule, binaries, "", tuning, tile_sources(schedule, sources))


def onnx_stage(source: Graph, progress: Progress = None) -> RuntimeOnnx:
    """The high-level graph as ONNX without weights, which the artifact stores for tools (the cpu backend writes
    its own from the variant graph at load); None (with the reason, for ``--explain``) when one of its ops has no
    ONNX form."""
    _report(progress, "export onnx")
    return runtime_onnx(source)


def write_stage(
    source: Graph,
    lowered: Graph,
    kernels: Kernels,
    options: CompileOptions,
    progress: Progress = None,
    padded: Sequence[str] = (),
    onnx: RuntimeOnnx | None = None,
) -> bytes:
    """The artifact bytes for the lowered graph, its kernels, the source graph (already on the weights the
    lowered graph stores: rebase_source), the ONNX model for tools (``onnx``: onnx_stage's) and the
    compile's metadata (``padded``: the padding pass's 'padded:' lines, which ``aotc inspect`` shows, as it
    shows the ONNX model's summary)."""
    _report(progress, "write artifact")
    meta: dict[str, Any] = {"name": source.name, "producer": f"aotc {__version__}", "options": options.to_meta()}
    if kernels.note:
        meta["kernels"] = kernels.note
    if kernels.tuning is not None:
        meta["autotune"] = kernels.tuning.to_meta()
    if kernels.tile_sources:
        meta["tile_sources"] = [dict(s) for s in kernels.tile_sources]
    if padded:
        meta["padded_matmuls"] = list(padded)
    if onnx is not None:
        meta[ONNX_META_KEY] = onnx.summary
    return write_artifact(
        [Variant(lowered, kernels.schedule)],
        source=source,
        meta=meta,
        binaries=tuple(kernels.binaries.values()),
        onnx=onnx.model if onnx is not None else None,
    )


@dataclasses.dataclass(frozen=True)
class Kernels:
    """What the kernel stage made: the launch plan (None: cpu only, ``note`` says why) and binaries by name."""

    schedule: Schedule | None
    binaries: Mapping[str, KernelBinary]
    note: str
    tuning: Any = None  # the autotune report (aotc.autotune.TuneReport) when options.autotune
    # where each tunable launch's tiles came from, per target: {"launch", "kernel", "arch", "source", ...}
    tile_sources: tuple[Mapping[str, Any], ...] = ()


def tile_sources(schedule: Schedule, sources: Mapping[tuple[int, str], Any]) -> tuple[dict[str, Any], ...]:
    """``sources`` (TileChoices by launch index and target) as the rows ``--explain`` and the artifact's meta
    show: the launch, the code that target runs, and where its tiles came from."""
    rows = []
    for (i, arch), choice in sorted(sources.items()):
        k = schedule.kernels[i]
        code = next((v.kernel.name for v in k.arch_launches if v.arch == arch), k.name)
        rows.append({"launch": i, "kernel": code, "arch": arch, **choice.to_meta()})
    return tuple(rows)


def _with_precision(options: CompileOptions | None, precision: str | None) -> CompileOptions:
    options = options or CompileOptions.from_env()
    return options if precision is None else dataclasses.replace(options, precision=check_precision(precision))


def _report(progress: Progress, stage: str) -> None:
    if progress is not None:
        progress(stage)


def _default_name(model: Any) -> str:
    raw = type(model).__name__ if isinstance(model, Module) else getattr(model, "__name__", "model")
    return raw if raw.isidentifier() else "model"
