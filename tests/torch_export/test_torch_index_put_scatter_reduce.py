"""``aten.index_put`` (``x[mask] = v``, ``x[i] = v``, ``x[i] += v``) and ``aten.scatter_reduce.two`` through
``aotc.compile(torch_module, specs)``: each against a numpy reference of torch's definition and torch eager, at two
sizes of a dynamic dim, on the cpu and reference backends and as generated kernels under the Triton interpreter, and
the refusals naming the op."""

from __future__ import annotations

import importlib.util
from itertools import product
from typing import Any

import numpy as np
import pytest
from torch_kit import torch_module

import aotc
from aotc import Dim, TensorSpec
from aotc.errors import AotcError

torch = torch_module()
nn = torch.nn
BATCH = Dim("batch", min=1, max=8)
# the generated kernels too, where Triton (its interpreter) is installed
DEVICES = ("cpu", "reference", *(("interpret",) if importlib.util.find_spec("triton") else ()))


class Fn(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any, i: Any) -> Any:
        return self.fn(x, i)


def check(fn: Any, specs: dict, inputs: list[dict], reference: Any, devices: tuple = DEVICES) -> None:
    """``fn(x, i)`` compiled over ``specs`` matches torch eager and ``reference`` (numpy) at each of ``inputs``."""
    module = Fn(fn).eval()
    compiled = aotc.compile(module, {k: TensorSpec(*s) for k, s in specs.items()})
    runs = {dev: aotc.load(compiled.artifact_bytes, device=dev) for dev in devices}
    for feed in inputs:
        with torch.no_grad():
            want = module(*(torch.from_numpy(v.copy()) for v in feed.values())).numpy()
        ref = reference(*(v.copy() for v in feed.values()))
        np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6, err_msg="the numpy reference against torch")
        for dev, run in runs.items():
            got = run(**feed)
            assert got.shape == want.shape and got.dtype == want.dtype, (dev, got.shape, got.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{dev} at {got.shape}")


def feeds(rng: np.random.Generator, x: list[tuple], make_i: Any, dtype: Any = np.float32) -> list[dict]:
    out = []
    for shape in x:
        v = rng.standard_normal(shape) * 3
        out.append({"x": (v.round() if np.dtype(dtype).kind == "i" else v).astype(dtype), "i": make_i(shape)})
    return out


# -- index_put through a bool mask ---------------------------------------------------------------------------


def masked_rows(x: Any, ids: Any) -> Any:  # T5Gemma2's ``input_embeddings[input_ids == idx] = vec``
    x = x.clone()
    x[ids == 3] = torch.arange(x.shape[-1], dtype=x.dtype) - 1.5
    return x


def masked_rows_ref(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    x[ids == 3] = np.arange(x.shape[-1], dtype=x.dtype) - 1.5
    return x


def masked_zero(x: Any, ids: Any) -> Any:  # MuseGlimmer's ``llm_input_ids[mask] = 0``
    ids = ids.clone()
    ids[(ids > 5) | (ids == 0)] = 0
    return ids + x.shape[0]


def masked_zero_ref(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    ids[(ids > 5) | (ids == 0)] = 0
    return ids + x.shape[0]


def masked_inner(x: Any, mask: Any) -> Any:  # a mask after a kept dim, a (1, 1) value broadcast over it
    x = x.clone()
    x[:, mask[0] > 0] = torch.tensor([[2.0]])
    return x


def masked_inner_ref(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    x[:, mask[0] > 0] = np.float32(2.0)
    return x


def masked_accumulate(x: Any, ids: Any) -> Any:
    return torch.ops.aten.index_put(x, [ids.sum(-1) > 0], torch.ones(x.shape[-1]) * 0.25, True)


def masked_accumulate_ref(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    x[ids.sum(-1) > 0] += np.float32(0.25)
    return x


RNG = np.random.default_rng(0)
# case -> (fn, numpy reference, x's spec, the index input's spec (b: the batch), the index input at x's shape)
MASKED = {
    "rows": (masked_rows, masked_rows_ref, (BATCH, 5, 4), (BATCH, 5), lambda s: RNG.integers(0, 5, s[:2])),
    "zero": (masked_zero, masked_zero_ref, (BATCH, 7), (BATCH, 7), lambda s: RNG.integers(0, 9, s)),
    "inner": (masked_inner, masked_inner_ref, (BATCH, 6, 2), (1, 6), lambda s: RNG.integers(-1, 2, (1, 6))),
    "accumulate": (
        masked_accumulate,
        masked_accumulate_ref,
        (BATCH, 5, 3),
        (BATCH, 5, 3),
        lambda s: RNG.integers(-1, 2, s),
    ),
}


@pytest.mark.parametrize("case", sorted(MASKED))
def test_a_bool_mask_writes_a_value_that_broadcasts_over_the_selection(case: str) -> None:
    fn, ref, xspec, ispec, make_i = MASKED[case]
    shapes = [(2, *xspec[1:]), (5, *xspec[1:])]
    check(fn, {"x": (xspec, "float32"), "i": (ispec, "int64")}, feeds(RNG, shapes, make_i), ref)


# -- index_put with integer indices --------------------------------------------------------------------------


def rows_add(x: Any, i: Any) -> Any:  # ``x[i] += 1`` then an accumulate with repeated rows
    x = x.clone()
    x[i] += 1.0
    return torch.ops.aten.index_put(x, [i], torch.arange(x.shape[1], dtype=x.dtype), True)


def rows_add_ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
    x[i] += 1.0  # numpy, like torch's non-accumulating write, keeps one of the repeated rows' results
    np.add.at(x, (i,), np.arange(x.shape[1], dtype=x.dtype))
    return x


def gap_columns(x: Any, i: Any) -> Any:  # ``x[:, i, :2]``-style: a kept dim before the index (adjacent rule)
    x = x.clone()
    x[:, i] = -5.0
    x[:, i[:1], 1] = torch.arange(x.shape[0], dtype=x.dtype)[:, None]
    return x


def gap_columns_ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
    x[:, i] = -5.0
    x[:, i[:1], 1] = np.arange(x.shape[0], dtype=x.dtype)[:, None]
    return x


def split_indices(x: Any, i: Any) -> Any:  # indices on dims 0 and 2 with a None between: B goes first
    return torch.ops.aten.index_put(x, [i, None, i.flip(0)], torch.tensor([[1.0], [2.0], [3.0], [4.0]]), True)


def split_indices_ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
    np.add.at(x, (i, slice(None), i[::-1]), np.array([[1.0], [2.0], [3.0], [4.0]], np.float32))
    return x


def pairs(x: Any, i: Any) -> Any:  # two broadcast index tensors on adjacent dims, negative ids count from the end
    return torch.ops.aten.index_put(x, [None, i[:, None], -1 - i[None, :2]], torch.tensor(7.0))


def pairs_ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
    x[:, i[:, None], -1 - i[None, :2]] = 7.0
    return x


INDEXED = {
    "rows_add": (rows_add, rows_add_ref, (BATCH, 3), lambda s: np.array([0, 2, -1, 2])),
    "gap_columns": (gap_columns, gap_columns_ref, (BATCH, 5, 2), lambda s: np.array([4, 1, 1, 0])),
    "split_indices": (split_indices, split_indices_ref, (4, BATCH, 4), lambda s: np.array([3, 0, 0, 1])),
    "pairs": (pairs, pairs_ref, (BATCH, 4, 4), lambda s: np.array([1, 3, 0, 1])),
}


@pytest.mark.parametrize("case", sorted(INDEXED))
def test_integer_indices_scatter_as_torchs_advanced_indexing_places_them(case: str) -> None:
    fn, ref, spec, make_i = INDEXED[case]
    d = spec.index(BATCH)
    shapes = [tuple(n if k != d else b for k, n in enumerate(spec)) for b in (3, 6)]
    check(fn, {"x": (spec, "float32"), "i": ((4,), "int64")}, feeds(RNG, shapes, make_i), ref)


# -- scatter_reduce ------------------------------------------------------------------------------------------


def scatter_reduce_ref(x: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, reduce: str, include_self: bool):
    """torch's definition, one element at a time: every src element combines into its position; without
    include_self the written positions forget x's value; mean divides by the count (floored for ints)."""
    out = x.copy()
    hits: dict[tuple, list] = {}
    for p in np.ndindex(*index.shape):
        q = list(p)
        q[dim] = int(index[p])
        hits.setdefault(tuple(q), []).append(src[p])
    combine = {"sum": sum, "mean": sum, "prod": np.prod, "amax": max, "amin": min}[reduce]
    for q, vals in hits.items():
        vals = ([x[q]] if include_self else []) + vals
        r = combine(vals)
        if reduce == "mean":
            r = r / len(vals) if x.dtype.kind == "f" else r // len(vals)
        out[q] = r
    return out


REDUCES = ["sum", "prod", "mean", "amax", "amin"]


@pytest.mark.parametrize("reduce, include_self, dtype", list(product(REDUCES, [True, False], ["float32", "int64"])))
def test_scatter_reduce_matches_torchs_definition(reduce: str, include_self: bool, dtype: str) -> None:
    def fn(x: Any, i: Any) -> Any:  # a batch of rows combined into a 4-row tensor
        base = torch.arange(12, dtype=x.dtype).reshape(4, 3) - 5
        return base.scatter_reduce(0, i, x, reduce, include_self=include_self)

    def ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
        base = (np.arange(12).reshape(4, 3) - 5).astype(x.dtype)
        return scatter_reduce_ref(base, 0, i, x, reduce, include_self)

    specs = {"x": ((BATCH, 3), dtype), "i": ((BATCH, 3), "int64")}
    check(fn, specs, feeds(RNG, [(3, 3), (7, 3)], lambda s: RNG.integers(0, 4, s), np.dtype(dtype)), ref)


@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_along_the_last_dim_with_an_index_narrower_than_src(reduce: str) -> None:
    def fn(x: Any, i: Any) -> Any:  # the src's last two columns lie outside the index: torch ignores them
        return torch.zeros(x.shape[0], 5).scatter_reduce(1, i, x, reduce, include_self=False)

    def ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
        return scatter_reduce_ref(np.zeros((x.shape[0], 5), np.float32), 1, i[:, :4], x, reduce, False)

    specs = {"x": ((BATCH, 6), "float32"), "i": ((BATCH, 6), "int64")}
    check(lambda x, i: fn(x, i[:, :4]), specs, feeds(RNG, [(2, 6), (5, 6)], lambda s: RNG.integers(0, 5, s)), ref)


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_of_a_src_and_scatter_add_are_torchs(dim: int) -> None:
    """``x.scatter_(dim, index, src)`` with distinct positions per line (repeated ones are undefined in torch) and
    ``scatter_add`` with repeats, the index one line short of src."""

    def fn(x: Any, i: Any) -> Any:
        order = torch.topk(i, i.shape[dim], dim=dim, largest=False)[1]  # an argsort: distinct positions
        out = torch.zeros_like(x).scatter_(dim, order, x)
        short = i.narrow(1 - dim, 0, i.shape[1 - dim] - 1) % 3
        return out.scatter_add(dim, short, x * 2)

    def ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
        out = scatter_reduce_ref(np.zeros_like(x), dim, np.argsort(i, axis=dim, kind="stable"), x, "sum", False)
        short = (i[:-1] if dim == 1 else i[:, :-1]) % 3
        return scatter_reduce_ref(out, dim, short, x * 2, "sum", True)

    def distinct(s: tuple) -> np.ndarray:  # no ties, so torch's order and numpy's agree
        return RNG.permutation(int(np.prod(s))).reshape(s)

    specs = {"x": ((BATCH, 4), "float32"), "i": ((BATCH, 4), "int64")}
    check(fn, specs, feeds(RNG, [(3, 4), (6, 4)], distinct), ref)


def test_tapas_reduce_min_segments_on_the_interpreted_kernels() -> None:
    """Tapas' ``reduce_min`` (an amin over segments, include_self=False) and an accumulating index_put, as
    generated Triton kernels under the interpreter."""
    pytest.importorskip("triton")

    def fn(x: Any, i: Any) -> Any:
        first = torch.full((x.shape[0], 4), 1000.0).scatter_reduce(1, i, x, "amin", include_self=False)
        return torch.ops.aten.index_put(first, [i[:, 0]], torch.ones(4), True)

    def ref(x: np.ndarray, i: np.ndarray) -> np.ndarray:
        out = scatter_reduce_ref(np.full((x.shape[0], 4), 1000.0, np.float32), 1, i, x, "amin", False)
        np.add.at(out, (i[:, 0],), np.float32(1.0))
        return out

    specs = {"x": ((BATCH, 6), "float32"), "i": ((BATCH, 6), "int64")}
    check(fn, specs, feeds(RNG, [(4, 6), (7, 6)], lambda s: RNG.integers(0, 4, s)), ref, devices=("interpret",))


# -- refusals ------------------------------------------------------------------------------------------------


def test_a_mask_beside_an_index_tensor_is_refused_naming_the_op() -> None:
    def fn(x: Any, i: Any) -> Any:
        return torch.ops.aten.index_put(x, [x[:, 0] > 0, i[:1]], torch.tensor(1.0))

    with pytest.raises(AotcError, match=r"index_put.*bool mask beside other index tensors"):
        aotc.compile(Fn(fn).eval(), {"x": TensorSpec((BATCH, 4)), "i": TensorSpec((4,), "int64")})


def test_a_value_shaped_by_the_masks_count_is_refused_naming_the_op() -> None:
    def fn(x: Any, i: Any) -> Any:
        return torch.ops.aten.index_put(x, [x[:, 0] > 0], torch.ones(3, 4))

    with pytest.raises(AotcError, match=r"index_put.*\(3, 4\) has 3 in the place of the bool mask's count"):
        aotc.compile(Fn(fn).eval(), {"x": TensorSpec((BATCH, 4)), "i": TensorSpec((4,), "int64")})
