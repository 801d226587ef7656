"""``aotc.compile``: trace -> lower -> artifact -> loaded executable, in one call."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aotc.frontend.module import Module
from aotc.frontend.spec import TensorSpec
from aotc.frontend.trace import trace
from aotc.ir.graph import Graph


class CompiledModel:
    """A compiled model: call it like the model (numpy in, numpy out, same output structure).

    The cpu executable is loaded from the artifact bytes on first use, so writing an artifact
    (as the CLI does) never pays for a load it doesn't need.
    """

    def __init__(self, graph: Graph, lowered: Graph, artifact_bytes: bytes) -> None:
        self.graph = graph  # the traced (or imported) high-level graph
        self.lowered = lowered  # the primitive graph stored in the artifact
        self.artifact_bytes = artifact_bytes
        self._executable: Any = None

    @property
    def executable(self) -> Any:
        if self._executable is None:
            from aotc.runtime import load

            self._executable = load(self.artifact_bytes, device="cpu")
        return self._executable

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.executable(*args, **kwargs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Flat outputs, in graph output order."""
        return self.executable.run(feeds)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.graph.input_names

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_bytes(self.artifact_bytes)

    def __repr__(self) -> str:
        return f"CompiledModel({self.graph.name!r}, inputs={list(self.input_names)}, {len(self.artifact_bytes)} bytes)"


def compile(
    model: Module | Callable[..., Any],
    inputs: Mapping[str, TensorSpec],
    *,
    options: Any = None,
    dump_ir: str | os.PathLike | None = None,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> CompiledModel:
    """Trace ``model`` over ``inputs``, lower it to primitives, write the artifact and load it on the cpu.

    ``options`` is an ``aotc.CompileOptions``; ``dump_ir`` a folder that receives every stage's graph;
    ``progress(stage)`` is called as each compile stage starts.
    """
    if progress is not None:
        progress("trace")
    graph = trace(model, inputs, name=name or _default_name(model))
    return compile_graph(graph, options=options, dump_ir=dump_ir, progress=progress)


def compile_graph(
    graph: Graph,
    *,
    options: Any = None,
    dump_ir: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
) -> CompiledModel:
    """Lower a traced or imported high-level graph and write its artifact: the one path every compile takes."""
    # imported here: the frontend must not pull in lowering/artifact/runtime at import time
    import aotc
    from aotc.artifact.writer import write_artifact
    from aotc.lowering.options import CompileOptions
    from aotc.lowering.pipeline import lower

    options = options or CompileOptions.from_env()
    lowered = lower(graph, options, dump_dir=dump_ir, progress=progress)
    if progress is not None:
        progress("write artifact")
    meta: dict[str, Any] = {"name": graph.name, "producer": f"aotc {aotc.__version__}", "options": options.to_meta()}
    return CompiledModel(graph, lowered, write_artifact([lowered], source=graph, meta=meta))


def _default_name(model: Any) -> str:
    raw = type(model).__name__ if isinstance(model, Module) else getattr(model, "__name__", "model")
    return raw if raw.isidentifier() else "model"
