"""A served model as the Open Inference Protocol (v2) sees it: tensor names, datatypes, shapes and dims.

Everything comes from the loaded ``Executable`` (its artifact's first variant, as ``Executable.inputs`` does):
input names as the artifact has them, output names from its output structure (dict keys, tuple positions, or
``output`` for a single tensor: the names ``aotc run`` prints), v2 datatypes, shapes with -1 for dynamic dims,
and each dynamic dim's name and range. It also finds the batch dim that the dynamic batcher concatenates along.
Imports numpy only; the v2 server, the Ray deployment and the Triton repository writer all read this one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc.errors import AotcError

# aotc dtype name -> v2 datatype. The v2 protocol's other datatypes (INT8, UINT*, FP64, BYTES) have no aotc
# counterpart; a request using one is refused by the runtime's dtype check with its usual message.
V2_DATATYPE = {
    "float32": "FP32",
    "float16": "FP16",
    "bfloat16": "BF16",
    "int32": "INT32",
    "int64": "INT64",
    "bool": "BOOL",
}
# v2 datatype -> numpy dtype, for every v2 datatype numpy has (BF16 is the model's own dtype, see Tensor.dtype).
NUMPY_DTYPE = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}


class SignatureError(AotcError):
    """The artifact can't be served as asked (e.g. ``--batch-dim`` names no dim every tensor has)."""


@dataclass(frozen=True)
class Dim:
    """A dynamic dim: its name and range, as the artifact declares them."""

    name: str
    min: int
    max: int
    multiple_of: int = 1

    def __str__(self) -> str:
        step = f", multiple of {self.multiple_of}" if self.multiple_of != 1 else ""
        return f"{self.name} in [{self.min}, {self.max}]{step}"


@dataclass(frozen=True)
class Tensor:
    """One input or output: ``dims`` holds an int per static dim and the symbolic text of each dynamic one."""

    name: str
    datatype: str
    dtype: np.dtype
    dims: tuple[int | str, ...]
    batch_axis: int | None = None

    @property
    def shape(self) -> list[int]:
        """The v2 shape: -1 for each dynamic dim."""
        return [d if isinstance(d, int) else -1 for d in self.dims]

    def metadata(self) -> dict[str, Any]:
        """The v2 ``$metadata_tensor``; its parameters name each dim (``batch,seq,64``)."""
        dims = ",".join(str(d) for d in self.dims)
        return {"name": self.name, "datatype": self.datatype, "shape": self.shape, "parameters": {"dims": dims}}


@dataclass(frozen=True)
class Signature:
    """Inputs, outputs and dims of a served model; ``batch`` is the dim the batcher concatenates along, or None
    (then ``batch_note`` says why batching is off)."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    dims: tuple[Dim, ...]
    guards: tuple[str, ...]
    batch: Dim | None
    batch_note: str = ""

    @classmethod
    def of(cls, exe: Any, batch_dim: str | None = None) -> Signature:
        """The signature of an ``Executable``; ``batch_dim`` names the batch dim (default: the first dynamic dim
        of the first input when every input and output has that dim exactly once)."""
        graph = exe.artifact.variants[0].graph
        symbols = {s.name: Dim(s.name, s.min, s.max, s.multiple_of) for s in graph.symbols}
        ins = [(s.name, s.dtype, s.shape) for s in exe.inputs]
        names = output_names(exe.output_tree, graph.num_results)  # a state's new value stays in its session
        outs = [(n, v.type.dtype, v.type.shape) for n, v in zip(names, graph.outputs)]
        batch, note, axes = _find_batch(ins, outs, symbols, batch_dim)
        inputs = tuple(_tensor(n, dt, shape, axes.get(("in", n))) for n, dt, shape in ins)
        outputs = tuple(_tensor(n, dt, shape, axes.get(("out", n))) for n, dt, shape in outs)
        guards = tuple(f"{g.lhs} {g.rel} {g.rhs}" for g in graph.guards)
        return cls(inputs, outputs, tuple(symbols.values()), guards, batch, note)

    def input(self, name: str) -> Tensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    def parameters(self) -> dict[str, Any]:
        """Model-level metadata parameters: each dim's range, the guards and the batch dim."""
        params: dict[str, Any] = {"dims": ",".join(d.name for d in self.dims)}
        for d in self.dims:
            params[f"dim.{d.name}.min"] = d.min
            params[f"dim.{d.name}.max"] = d.max
            if d.multiple_of != 1:
                params[f"dim.{d.name}.multiple_of"] = d.multiple_of
        if self.guards:
            params["guards"] = "; ".join(self.guards)
        params["batch_dim"] = self.batch.name if self.batch else ""
        return params


def output_names(tree: Any, count: int) -> list[str]:
    """A name per flat output, by index: dict keys and tuple positions joined with '.', or ``output`` alone."""
    names = [f"output{i}" for i in range(count)]
    for index, name in _leaves(tree, ""):
        names[index] = name
    return names


def _leaves(tree: Any, prefix: str) -> list[tuple[int, str]]:
    if isinstance(tree, int):
        return [(tree, prefix or "output")]
    ((kind, items),) = tree.items()
    pairs = items if kind == "dict" else enumerate(items)
    out: list[tuple[int, str]] = []
    for key, sub in pairs:
        out += _leaves(sub, f"{prefix}.{key}" if prefix else str(key))
    return out


def _tensor(name: str, dtype: Any, shape: tuple[Any, ...], batch_axis: int | None) -> Tensor:
    dims = tuple(d if isinstance(d, int) else str(d) for d in shape)
    return Tensor(name, V2_DATATYPE[dtype.value], dtype.np, dims, batch_axis)


def _is_symbol(d: Any, name: str | None = None) -> bool:
    return not isinstance(d, int) and d.is_symbol() and (name is None or d.symbol_name == name)


def _batch_axis(shape: tuple[Any, ...], name: str) -> int | None:
    """The one axis whose dim is the symbol ``name``, when no other dim of the tensor depends on it."""
    axes = [i for i, d in enumerate(shape) if _is_symbol(d, name)]
    others = [d for d in shape if not isinstance(d, int) and not _is_symbol(d, name) and name in d.free_symbols()]
    return axes[0] if len(axes) == 1 and not others else None


def _find_batch(
    ins: list[tuple[str, Any, tuple[Any, ...]]],
    outs: list[tuple[str, Any, tuple[Any, ...]]],
    symbols: dict[str, Dim],
    asked: str | None,
) -> tuple[Dim | None, str, dict[tuple[str, str], int]]:
    if asked is None:
        leading = {next((d.symbol_name for d in shape if _is_symbol(d)), None) for _, _, shape in ins}
        if len(leading) != 1 or None in leading:
            return None, "the inputs share no leading dynamic dim", {}
        name = leading.pop()
    elif asked not in symbols:
        have = ", ".join(symbols) or "none: every dim is static"
        raise SignatureError(f"--batch-dim {asked!r} is not a dim of the model; its dims are: {have}")
    else:
        name = asked
    axes: dict[tuple[str, str], int] = {}
    for side, kind, tensors in (("in", "input", ins), ("out", "output", outs)):
        for tname, _, shape in tensors:
            axis = _batch_axis(shape, name)
            if axis is None:
                note = f"{kind} {tname!r} {_fmt(shape)} does not have the dim {name!r} exactly once as an axis"
                if asked is not None:
                    raise SignatureError(f"--batch-dim {asked!r}: {note}")
                return None, note, {}
            axes[(side, tname)] = axis
    return symbols[name], "", axes


def _fmt(shape: tuple[Any, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
