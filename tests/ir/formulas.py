"""Independent float64 / plain-Python formulas for the high-level ops: what their numpy references are checked
against (``INDEPENDENT``, one per op with a decomposition), written without the op table's helpers."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from aotc.ir import DType, Op

from .test_ops_reduce import _conv_expected


def sigmoid(v: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * v))  # never overflows


def vec(fn: Callable[[float], float]) -> Callable:
    return lambda x: np.vectorize(fn, otypes=[np.float64])(x) if x.size else x


def softmax_rows(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if x.ndim == 0:
        return softmax_rows(x.reshape(1), 0, log).reshape(())
    moved = np.moveaxis(x, axis, -1)
    out = np.empty_like(moved)
    for o in np.ndindex(*moved.shape[:-1]):
        row = moved[o]
        m = max(row)
        total = math.fsum(math.exp(v - m) for v in row)
        out[o] = [(v - m - math.log(total)) if log else math.exp(v - m) / total for v in row]
    return np.moveaxis(out, -1, axis)


def norm(x: np.ndarray, ndim: int, eps: float, rms: bool) -> np.ndarray:
    axes = tuple(range(x.ndim - ndim, x.ndim))
    if rms:
        return x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    return (x - np.mean(x, axis=axes, keepdims=True)) / np.sqrt(np.var(x, axis=axes, keepdims=True) + eps)


def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, a: dict) -> np.ndarray:
    scale = a.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    lq, lk = q.shape[-2], k.shape[-2]
    qb, kb, vb = (np.broadcast_to(t, batch + t.shape[-2:]) for t in (q, k, v))
    mb = None if mask is None else np.broadcast_to(mask, batch + (lq, lk))
    out = np.zeros(batch + (lq, v.shape[-1]))
    for bi in np.ndindex(*batch):
        for i in range(lq):
            scores = []
            for j in range(lk):
                s = math.fsum(qb[bi + (i, d)] * kb[bi + (j, d)] for d in range(q.shape[-1])) * scale
                if a.get("is_causal") and j > i:
                    s = -math.inf
                if mb is not None:
                    mv = mb[bi + (i, j)]
                    s = (s if mv else -math.inf) if mask.dtype == np.bool_ else s + float(mv)
                scores.append(s)
            m = max(scores)
            p = [math.exp(s - m) for s in scores]
            total = math.fsum(p)
            out[bi + (i,)] = sum(pj / total * vb[bi + (j,)] for j, pj in enumerate(p))
    return out


def pool(x: np.ndarray, a: dict, kind: str) -> np.ndarray:
    kh, kw = a["kernel"]
    sh, sw = a.get("strides", a["kernel"])
    pt, pb, pl, pr = a.get("pads", (0, 0, 0, 0))
    n, c, h, w = x.shape

    def length(d: int, k: int, s: int, lo: int, hi: int) -> int:
        if not a.get("ceil_mode", False):
            return (d + lo + hi - k) // s + 1
        m = -(-(d + lo + hi - k) // s) + 1
        return m - 1 if (m - 1) * s >= d + lo else m  # torch drops a last window that starts in the right padding

    oh, ow = length(h, kh, sh, pt, pb), length(w, kw, sw, pl, pr)
    out = np.zeros((n, c, oh, ow))
    for ni, ci, i, j in np.ndindex(n, c, oh, ow):
        vals, inside, padded = [], 0, 0
        for di, dj in np.ndindex(kh, kw):
            r, col = i * sh + di - pt, j * sw + dj - pl
            if 0 <= r < h and 0 <= col < w:
                vals.append(x[ni, ci, r, col])
                inside += 1
            elif kind == "avg":
                vals.append(0.0)
            padded += -pt <= r < h + pb and -pl <= col < w + pr  # a ceil window's overhang is not padding
        if kind == "max":
            out[ni, ci, i, j] = max(vals)
        else:
            out[ni, ci, i, j] = math.fsum(vals) / (padded if a.get("count_include_pad", True) else inside)
    return out


def tri(x: np.ndarray, k: int, lower: bool) -> np.ndarray:
    out = x.copy()
    for idx in np.ndindex(*x.shape):
        i, j = idx[-2:]
        if (j - i > k) if lower else (j - i < k):
            out[idx] = 0.0
    return out


def embedding(w: np.ndarray, idx: np.ndarray) -> np.ndarray:
    n = w.shape[0]
    return np.array([w[int(i) % n] for i in idx.reshape(-1)]).reshape(idx.shape + w.shape[1:])


def linear(xs: list[np.ndarray]) -> np.ndarray:
    x, w = xs[0], xs[1]
    y = np.einsum("...i,oi->...o", x, w)
    return y + xs[2] if len(xs) > 2 else y


def batch_norm(xs: list[np.ndarray], a: dict) -> np.ndarray:
    x, mean, var = xs[:3]
    sh = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + a.get("eps", 1e-5))
    if len(xs) > 3:
        y = y * xs[3].reshape(sh)
    if len(xs) > 4:
        y = y + xs[4].reshape(sh)
    return y


def gelu(v: float, approximate: str) -> float:
    if approximate == "tanh":
        return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def conv2d(xs: list[np.ndarray], a: dict) -> np.ndarray:
    y = _conv_expected(xs[0], xs[1], a, DType.float32).astype(np.float64)
    return y + xs[2].reshape((-1,) + (1,) * (y.ndim - 2)) if len(xs) > 2 else y


INDEPENDENT: dict[Op, Callable[[list[np.ndarray], dict], np.ndarray]] = {
    Op.LINEAR: lambda xs, a: linear(xs),
    Op.RELU: lambda xs, a: vec(lambda v: v if v > 0 or v != v else 0.0)(xs[0]),
    Op.GELU: lambda xs, a: vec(lambda v: gelu(v, a.get("approximate", "none")) if abs(v) < 1e3 or v > 0 else -0.0)(
        xs[0]
    ),
    Op.SILU: lambda xs, a: vec(lambda v: v * sigmoid(v))(xs[0]),
    Op.SIGMOID: lambda xs, a: vec(sigmoid)(xs[0]),
    Op.SOFTMAX: lambda xs, a: softmax_rows(xs[0], a.get("axis", -1), log=False) if xs[0].size else xs[0],
    Op.LOG_SOFTMAX: lambda xs, a: softmax_rows(xs[0], a.get("axis", -1), log=True),
    Op.LAYER_NORM: lambda xs, a: (
        norm(xs[0], a.get("ndim", 1), a.get("eps", 1e-5), rms=False) * (xs[1] if len(xs) > 1 else 1.0)
        + (xs[2] if len(xs) > 2 else 0.0)
    ),
    Op.RMS_NORM: lambda xs, a: (
        norm(xs[0], a.get("ndim", 1), a.get("eps", 1e-6), rms=True) * (xs[1] if len(xs) > 1 else 1.0)
    ),
    Op.EMBEDDING: lambda xs, a: embedding(xs[0], xs[1]),
    Op.SDPA: lambda xs, a: sdpa(xs[0], xs[1], xs[2], xs[3] if len(xs) > 3 else None, a),
    Op.CONV2D: conv2d,
    Op.MAX_POOL2D: lambda xs, a: pool(xs[0], a, "max"),
    Op.AVG_POOL2D: lambda xs, a: pool(xs[0], a, "avg"),
    Op.BATCH_NORM: batch_norm,
    Op.REDUCE_MEAN: lambda xs, a: (
        np.mean(xs[0], axis=a["axes"], keepdims=bool(a.get("keepdim"))) if a["axes"] else xs[0]
    ),
    Op.TRIL: lambda xs, a: tri(xs[0], a.get("k", 0), lower=True),
    Op.TRIU: lambda xs, a: tri(xs[0], a.get("k", 0), lower=False),
}
