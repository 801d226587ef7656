"""aotc.functional against numpy formulas, and clear errors for arguments it does not support."""

from __future__ import annotations

import math

import numpy as np
import pytest

import aotc.functional as F
from aotc import Dim, TensorSpec, TraceError
from aotc.frontend.trace import trace
from aotc.ir.ops import Op

from .helpers import rng, run, trace_run

B = Dim("batch", 1, 8)


def randn(*shape, seed=0):
    return rng(seed).standard_normal(shape).astype(np.float32)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_activations():
    x = randn(3, 7)
    erf = np.vectorize(math.erf)
    cases = {
        "relu": (F.relu, np.maximum(x, 0)),
        "gelu": (F.gelu, 0.5 * x * (1 + erf(x / math.sqrt(2)))),
        "gelu_tanh": (
            lambda t: F.gelu(t, approximate="tanh"),
            0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3))),
        ),
        "silu": (F.silu, x / (1 + np.exp(-x))),
        "sigmoid": (F.sigmoid, 1 / (1 + np.exp(-x))),
        "tanh": (F.tanh, np.tanh(x)),
        "softmax": (lambda t: F.softmax(t, dim=0), softmax(x, 0)),
        "log_softmax": (lambda t: F.log_softmax(t, -1), np.log(softmax(x))),
        "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), np.where(x >= 0, x, 0.2 * x)),
        "elu": (F.elu, np.where(x > 0, x, np.exp(np.minimum(x, 0)) - 1)),
        "softplus": (F.softplus, np.log1p(np.exp(x))),
        "hardtanh": (F.hardtanh, np.clip(x, -1, 1)),
        "relu6": (F.relu6, np.clip(x * 4, 0, 6) / 4),
        "normalize": (lambda t: F.normalize(t, dim=1), x / np.linalg.norm(x, axis=1, keepdims=True)),
        "dropout": (lambda t: F.dropout(t, 0.5, training=True), x),
    }
    out = trace_run(lambda t: tuple(fn(t if name != "relu6" else t * 4) for name, (fn, _) in cases.items()), x)
    for (name, (_, ref)), o in zip(cases.items(), out):
        close(o if name != "relu6" else o / 4, ref, 2e-5)


def test_activations_emit_high_level_ops():
    g = trace(lambda x: F.gelu(F.silu(F.relu(x))).softmax(-1), {"x": TensorSpec((B, 4))})
    assert [n.op for n in g.nodes] == [Op.RELU, Op.SILU, Op.GELU, Op.SOFTMAX]


def test_relu_of_ints_stays_int():
    out = trace_run(F.relu, np.array([-2, 3], np.int32))
    assert out.dtype == np.int32 and out.tolist() == [0, 3]


def test_linear():
    x, w, b = randn(2, 3, 4), randn(5, 4, seed=1), randn(5, seed=2)
    out = trace_run(lambda x, w, b: (F.linear(x, w, b), F.linear(x, w), F.linear(x[0, 0], w)), x, w, b)
    close(out[0], x @ w.T + b)
    close(out[1], x @ w.T)
    close(out[2], x[0, 0] @ w.T)
    with pytest.raises(TraceError, match="linear"):
        trace_run(lambda x, w: F.linear(x, w), x, randn(5, 3))


def test_layer_norm_and_rms_norm():
    x = randn(2, 3, 6)
    w, b = randn(6, seed=1), randn(6, seed=2)
    m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ln = (x - m) / np.sqrt(v + 1e-5)
    m2, v2 = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    out = trace_run(
        lambda x, w, b: (
            F.layer_norm(x, (6,), w, b),
            F.layer_norm(x, 6, bias=b),
            F.layer_norm(x, [3, 6], eps=1e-3),
            F.rms_norm(x, (6,), w),
            F.rms_norm(x, 6, eps=0.1),
        ),
        x,
        w,
        b,
    )
    close(out[0], ln * w + b)
    close(out[1], ln + b)
    close(out[2], (x - m2) / np.sqrt(v2 + 1e-3))
    close(out[3], x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w)
    close(out[4], x / np.sqrt((x * x).mean(-1, keepdims=True) + 0.1))
    with pytest.raises(TraceError, match="last dims"):
        trace_run(lambda x: F.layer_norm(x, (5,)), x)
    assert F.RMS_NORM_EPS == 1e-6


def test_embedding():
    w = randn(10, 3)
    ids = np.array([[1, 9], [0, 0]], np.int32)
    close(trace_run(F.embedding, ids, w), w[ids])
    with pytest.raises(TraceError, match="max_norm"):
        trace_run(lambda i, w: F.embedding(i, w, max_norm=1.0), ids, w)


def _attention(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return softmax(s) @ v


def test_scaled_dot_product_attention():
    q, k, v = randn(2, 3, 5, 4), randn(2, 3, 6, 4, seed=1), randn(2, 3, 6, 4, seed=2)
    bool_mask = rng(3).random((5, 6)) < 0.7
    bool_mask[:, 0] = True
    float_mask = randn(2, 1, 5, 6, seed=4)
    out = trace_run(
        lambda q, k, v, bm, fm: (
            F.scaled_dot_product_attention(q, k, v),
            F.scaled_dot_product_attention(q, k, v, attn_mask=bm),
            F.scaled_dot_product_attention(q, k, v, fm),
            F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
        ),
        q,
        k,
        v,
        bool_mask,
        float_mask,
    )
    close(out[0], _attention(q, k, v))
    close(out[1], _attention(q, k, v, bool_mask))
    close(out[2], _attention(q, k, v, float_mask))
    close(out[3], _attention(q, k, v, causal=True, scale=0.3))


def test_attention_dynamic_sequence_and_gqa():
    g = trace(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        {
            "q": TensorSpec((4, Dim("s", 1, 64), 8)),
            "k": TensorSpec((2, Dim("s", 1, 64), 8)),
            "v": TensorSpec((2, Dim("s", 1, 64), 8)),
        },
    )
    q, k, v = randn(4, 7, 8), randn(2, 7, 8, seed=1), randn(2, 7, 8, seed=2)
    close(run(g, q, k, v), _attention(q, np.repeat(k, 2, 0), np.repeat(v, 2, 0), causal=True))


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda q: F.scaled_dot_product_attention(q, q, q, q > 0, is_causal=True), "not both"),
        (lambda q: F.scaled_dot_product_attention(q, q, q[:, :3]), "lengths differ"),
        (lambda q: F.softmax(q), "explicit dim"),
        (lambda q: F.dropout(q, 1.5), "probability"),
    ],
)
def test_functional_errors(fn, match):
    with pytest.raises(TraceError, match=match):
        trace_run(fn, randn(2, 5, 4))


def test_attention_with_dynamic_head_dim_needs_a_scale():
    spec = {"q": TensorSpec((3, Dim("d", 1, 64)))}
    with pytest.raises(TraceError, match="explicit scale"):
        trace(lambda q: F.scaled_dot_product_attention(q, q, q), spec)
    trace(lambda q: F.scaled_dot_product_attention(q, q, q, scale=0.5), spec)


def conv_ref(x, w, b, stride, pads, dil, groups):
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), pads[0], pads[1]))
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg : (g + 1) * cg, i * dil[0] :: stride[0], j * dil[1] :: stride[1]][:, :, :oh, :ow]
                out[:, g * og : (g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og : (g + 1) * og, :, i, j])
    return out + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize(
    ("kw", "ref_args"),
    [
        ({}, ((1, 1), ((0, 0), (0, 0)), (1, 1), 1)),
        ({"stride": 2, "padding": 1}, ((2, 2), ((1, 1), (1, 1)), (1, 1), 1)),
        ({"padding": (2, 0), "dilation": (1, 2)}, ((1, 1), ((2, 2), (0, 0)), (1, 2), 1)),
        ({"padding": "same"}, ((1, 1), ((1, 2), (0, 1)), (1, 1), 1)),
        ({"padding": "valid", "groups": 2}, ((1, 1), ((0, 0), (0, 0)), (1, 1), 2)),
    ],
)
def test_conv2d(kw, ref_args):
    groups = kw.get("groups", 1)
    x, w, b = randn(2, 4, 7, 6), randn(6, 4 // groups, 4, 2, seed=1), randn(6, seed=2)
    close(trace_run(lambda x, w, b: F.conv2d(x, w, b, **kw), x, w, b), conv_ref(x, w, b, *ref_args), 1e-4)


def test_conv2d_unbatched_and_errors():
    x, w = randn(3, 5, 5), randn(2, 3, 3, 3, seed=1)
    close(
        trace_run(lambda x, w: F.conv2d(x, w), x, w),
        conv_ref(x[None], w, None, (1, 1), ((0, 0), (0, 0)), (1, 1), 1)[0],
        1e-4,
    )
    for kw, match in [
        ({"padding": "same", "stride": 2}, "stride 1"),
        ({"padding": "full"}, "padding"),
        ({"groups": 0}, "groups"),
    ]:
        with pytest.raises(TraceError, match=match):
            trace_run(lambda x, w, kw=kw: F.conv2d(x, w, **kw), x, w)


def test_pooling():
    x = randn(2, 3, 7, 6)
    mx, avg, avg_ex = trace_run(
        lambda x: (
            F.max_pool2d(x, 3, stride=2, padding=1),
            F.avg_pool2d(x, (2, 3)),
            F.avg_pool2d(x, 3, 1, 1, count_include_pad=False),
        ),
        x,
    )
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    close(mx, win.max((-1, -2)))
    close(avg, x[:, :, :6].reshape(2, 3, 3, 2, 2, 3).mean((3, 5)))
    ones = np.pad(np.ones_like(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    sums = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)
    ).sum((-1, -2))
    counts = np.lib.stride_tricks.sliding_window_view(ones, (3, 3), axis=(2, 3)).sum((-1, -2))
    close(avg_ex, sums / counts)


def test_ceil_mode_pooling_keeps_the_last_partial_window_in_1d_and_2d():
    x = randn(2, 3, 7, 8)
    mx = trace_run(lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), x)
    xp = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 2)), constant_values=-np.inf)  # 3 windows of 3 need 7 + 0, 8 + 1
    close(mx, np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max((-1, -2)))
    assert mx.shape == (2, 3, 3, 4)
    # avg over (C, L), L = 6, kernel 3, stride 2, padding 1: windows start at -1, 1, 3 and (ceil mode) 5, inside
    # the input; that last one covers element 5, the pad at 6 and the overhang at 7: its divisor is 2
    v = randn(3, 6)
    avg = trace_run(lambda v: F.avg_pool1d(v, 3, 2, 1, ceil_mode=True), v)
    vp = np.pad(v, ((0, 0), (1, 1)))
    want = [vp[:, i : i + 3].sum(-1) / 3 for i in range(0, 6, 2)] + [vp[:, 6:8].sum(-1) / 2]
    close(avg, np.stack(want, -1))


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda x: F.max_pool2d(x, 2, ceil_mode="yes"), "ceil_mode must be a bool, got 'yes'"),
        (lambda x: F.max_pool1d(x[0], 2, dilation=2), "dilation"),
        (lambda x: F.avg_pool1d(x[0], (2, 2)), "one int"),
        (lambda x: F.max_pool2d(x, 2, dilation=2), "dilation"),
        (lambda x: F.max_pool2d(x, 2, return_indices=True), "return_indices"),
        (lambda x: F.avg_pool2d(x, 2, divisor_override=3), "divisor_override"),
        (lambda x: F.avg_pool2d(x, 2, padding=2), "half the kernel"),
        (lambda x: F.max_pool2d(x[0, 0], 2), "rank"),
    ],
)
def test_pooling_errors(fn, match):
    with pytest.raises(TraceError, match=match):
        trace_run(fn, randn(1, 2, 6, 6))


def test_batch_norm():
    x, mean, var, b = randn(2, 3, 4, 4), randn(3, seed=1), np.abs(randn(3, seed=2)) + 0.5, randn(3, seed=3)
    out = trace_run(lambda x, m, v, b: F.batch_norm(x, m, v, bias=b, eps=1e-3), x, mean, var, b)
    c = lambda a: a[None, :, None, None]  # noqa: E731
    close(out, (x - c(mean)) / np.sqrt(c(var) + 1e-3) + c(b))
    with pytest.raises(TraceError, match="training=True"):
        trace_run(lambda x, m, v: F.batch_norm(x, m, v, training=True), x, mean, var)


def test_pad():
    x = randn(2, 3, 4)
    out = trace_run(lambda x: (F.pad(x, (1, 2)), F.pad(x, [0, 1, 2, 0], value=5.0)), x)
    np.testing.assert_array_equal(out[0], np.pad(x, ((0, 0), (0, 0), (1, 2))))
    np.testing.assert_array_equal(out[1], np.pad(x, ((0, 0), (2, 0), (0, 1)), constant_values=5.0))
    for kw, match in [({"mode": "reflect"}, "reflect"), ({"pad": (-1, 0)}, "negative"), ({"pad": (1, 1, 1)}, "pairs")]:
        with pytest.raises(TraceError, match=match):
            trace_run(lambda x, kw=kw: F.pad(x, **{"pad": (1, 1), **kw}), x)


def test_interpolate_nearest_and_bilinear():
    x = randn(2, 3, 4, 5)
    near = trace_run(lambda x: F.interpolate(x, scale_factor=2), x)
    close(near, x.repeat(2, axis=2).repeat(2, axis=3))
    # align_corners: 4 -> 7 samples every half step, so odd outputs are the mean of their neighbours
    lin = trace_run(lambda x: F.interpolate(x, size=(7, 5), mode="bilinear", align_corners=True), x)
    close(lin[:, :, ::2], x)
    close(lin[:, :, 1::2], (x[:, :, :-1] + x[:, :, 1:]) / 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 8, "scale_factor": 2}, "exactly one of size and scale_factor"),
        ({"scale_factor": 2, "antialias": True}, "antialias"),
        ({"scale_factor": 2, "mode": "area"}, "mode 'area' is not supported"),
        ({"scale_factor": 2, "mode": "linear"}, "rank-3"),
        ({"scale_factor": 2, "align_corners": True}, "align_corners only applies"),
    ],
)
def test_interpolate_errors(kwargs, match):
    with pytest.raises(TraceError, match=match):
        trace_run(lambda x: F.interpolate(x, **kwargs), randn(1, 2, 4, 4))
