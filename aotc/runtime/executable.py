"""``load()`` and ``Executable``: a verified artifact bound to a backend, called like the model."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from aotc.artifact.reader import Artifact, read_artifact
from aotc.errors import AotcError, GuardError
from aotc.ir.graph import unflatten_tree
from aotc.runtime.backends import Backend, Program, get_backend
from aotc.runtime.guards import Binder, InputSpec, gather_inputs, input_specs


def load(source: str | os.PathLike[str] | bytes | Artifact, device: str | None = None) -> Executable:
    """Map and verify an artifact (a path, its bytes, or an already read Artifact) and bind it to ``device``.

    ``device``: "cpu", or None for the best one available. Raises ArtifactError for a bad file and
    AotcError for a device this build or artifact can't run on.
    """
    backend = get_backend(device)
    artifact = source if isinstance(source, Artifact) else read_artifact(source)
    return Executable(artifact, backend)


class Executable:
    """Runs an artifact: checks inputs against the guards of each variant and runs the first that accepts.

    All state is fixed at construction, so one Executable may be called from many threads at once.
    """

    def __init__(self, artifact: Artifact, backend: Backend | str | None = None) -> None:
        if not isinstance(artifact, Artifact):
            raise AotcError(f"Executable needs an Artifact, got {type(artifact).__name__}; use aotc.load(path)")
        self._artifact = artifact
        self._backend = backend if backend is not None and not isinstance(backend, str) else get_backend(backend)
        self._variants: tuple[tuple[Binder, Program], ...] = tuple(
            (Binder(g), self._backend.prepare(g)) for g in artifact.variants
        )
        first = artifact.variants[0]
        self._inputs = input_specs(first)
        self._output_tree = first.output_tree

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inputs by position (in ``input_names`` order) or by name; returns the model's output structure."""
        return unflatten_tree(self._output_tree, self._run(gather_inputs(self._inputs, args, kwargs)))

    def run(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """Inputs by name; returns the flat list of outputs."""
        if not isinstance(feeds, Mapping):
            raise GuardError(f"run() takes a mapping of input name to array, got {type(feeds).__name__}")
        return self._run(gather_inputs(self._inputs, (), feeds))

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        errors: list[GuardError] = []
        for binder, program in self._variants:
            try:
                env = binder.bind(arrays)
            except GuardError as e:
                errors.append(e)
                continue
            return program.run(arrays, env)
        if len(errors) == 1:
            raise errors[0]
        lines = [f"  variant {i} ({b.graph.name}): {e}" for i, ((b, _), e) in enumerate(zip(self._variants, errors))]
        raise GuardError("the inputs fit no variant of the model:\n" + "\n".join(lines))

    # -- introspection -----------------------------------------------------------------------------
    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self._inputs)

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        """Name, dtype and symbolic shape of each input (of the first variant)."""
        return self._inputs

    @property
    def output_tree(self) -> Any:
        return self._output_tree

    @property
    def artifact(self) -> Artifact:
        return self._artifact

    @property
    def device(self) -> str:
        return self._backend.name

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self._inputs)
        return f"<Executable {self._artifact.name!r} on {self.device}: ({ins})>"
