"""aotc.nn: module trees, PyTorch state-dict names, loading checkpoints, and layers against numpy."""

from __future__ import annotations

import inspect
import math
from collections import OrderedDict

import numpy as np
import pytest

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, TraceError, nn
from aotc.frontend.trace import trace

from .helpers import rng, run

B = Dim("batch", 1, 16)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(x + self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 3, bias=False)
        self.register_buffer("scale", np.float32(2.0) * np.ones(3, np.float32))
        self.register_buffer("offset", np.ones(3, np.float32), persistent=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x) * self.scale + self.offset


def test_state_dict_keys_follow_pytorch():
    net = Net()
    assert list(net.state_dict()) == [
        "scale",
        "embed.weight",
        "layers.0.fc.weight",
        "layers.0.fc.bias",
        "layers.0.norm.weight",
        "layers.0.norm.bias",
        "layers.1.fc.weight",
        "layers.1.fc.bias",
        "layers.1.norm.weight",
        "layers.1.norm.bias",
        "head.weight",
    ]
    assert [n for n, _ in net.named_buffers()] == ["scale", "offset"]
    assert len(list(net.parameters())) == 10
    assert [n for n, _ in net.named_modules()][:4] == ["", "embed", "layers", "layers.0"]
    assert [type(m).__name__ for m in net.children()] == ["Embedding", "ModuleList", "Linear"]
    assert all(isinstance(v, np.ndarray) for v in net.state_dict().values())


def test_traced_constants_are_named_by_state_dict_key():
    net = Net()
    g = trace(net, {"ids": TensorSpec((B, 5), "int64")})
    assert set(g.constants) == set(net.state_dict()) | {"offset"}
    ids = rng().integers(0, 10, (3, 5))
    sd = net.state_dict()

    def block(x, p):
        x = x + x @ sd[p + ".fc.weight"].T + sd[p + ".fc.bias"]
        m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * sd[p + ".norm.weight"] + sd[p + ".norm.bias"]

    x = sd["embed.weight"][ids]
    ref = block(block(x, "layers.0"), "layers.1") @ sd["head.weight"].T * 2 + 1
    np.testing.assert_allclose(run(g, ids), ref, rtol=1e-5, atol=1e-5)


def test_load_state_dict_copies_and_casts():
    net = Net()
    sd = {k: np.full(v.shape, 0.5, np.float16) for k, v in net.state_dict().items()}
    result = net.load_state_dict(sd)
    assert result == ([], [])
    assert net.head.weight.dtype is aotc.float32 and float(net.head.weight.data[0, 0]) == 0.5
    sd["head.weight"][:] = 3  # the module holds a copy
    assert float(net.head.weight.data[0, 0]) == 0.5


class ArrayLike:
    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


class TorchLike:
    """detach() -> cpu() -> numpy(), as a torch tensor offers."""

    def __init__(self, a):
        self.a = a

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a


def test_load_state_dict_accepts_array_likes():
    lin = nn.Linear(2, 3)
    w, b = np.arange(6, dtype=np.float64).reshape(3, 2), np.arange(3, dtype=np.float32)
    lin.load_state_dict({"weight": TorchLike(w), "bias": ArrayLike(b)})
    np.testing.assert_array_equal(lin.weight.data, w)
    assert lin.weight.data.dtype == np.float32


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda sd: sd.pop("layers.1.fc.bias"), 'Missing key\\(s\\) in state_dict: "layers.1.fc.bias"'),
        (lambda sd: sd.update(extra=np.zeros(1)), 'Unexpected key\\(s\\) in state_dict: "extra"'),
        (lambda sd: sd.update({"head.weight": np.zeros((4, 3))}), "size mismatch for head.weight"),
        (lambda sd: sd.update({"head.weight": "nope"}), "head.weight"),
    ],
)
def test_load_state_dict_errors(edit, match):
    net = Net()
    before = net.head.weight.data.copy()
    sd = {k: np.zeros_like(v) for k, v in net.state_dict().items()}
    edit(sd)
    with pytest.raises(nn.ModuleError, match=match):
        net.load_state_dict(sd)
    np.testing.assert_array_equal(net.head.weight.data, before)  # nothing loaded on error


def test_load_state_dict_non_strict():
    net = Net()
    sd = {k: np.zeros_like(v) for k, v in net.state_dict().items() if k != "scale"}
    sd["extra"] = np.zeros(2)
    missing, unexpected = net.load_state_dict(sd, strict=False)
    assert missing == ["scale"] and unexpected == ["extra"]
    assert not net.head.weight.data.any()
    with pytest.raises(nn.ModuleError, match="size mismatch"):
        net.load_state_dict({"head.weight": np.zeros((1, 1))}, strict=False)


def test_module_attribute_rules():
    m = nn.Module()
    m.w = nn.Parameter(np.ones(3))
    m.sub = nn.Linear(3, 3)
    m.plain = 5
    assert [n for n, _ in m.named_parameters()] == ["w", "sub.weight", "sub.bias"]
    assert m.w.dtype is aotc.float32  # float64 arrays become float32
    m.w = None
    assert "w" not in m.state_dict()
    with pytest.raises(nn.ModuleError, match="Parameter or None"):
        m.sub.weight = np.ones((3, 3))
    with pytest.raises(nn.ModuleError, match="super"):

        class Bad(nn.Module):
            def __init__(self):
                self.fc = nn.Linear(1, 1)

        Bad()
    del m.sub
    assert list(m.state_dict()) == []


def test_tied_parameters_are_one_constant():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(6, 4)
            self.out = nn.Linear(4, 6, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, ids):
            return self.out(self.emb(ids)) + self.emb.weight[0].sum() + self.emb.weight.T[0, 0]

    t = Tied()
    assert list(t.state_dict()) == ["emb.weight", "out.weight"]
    assert len(list(t.parameters())) == 1
    g = trace(t, {"ids": TensorSpec((3,), "int64")})
    assert list(g.constants) == ["emb.weight"]
    w = t.emb.weight.data
    ids = np.array([0, 5, 2])
    np.testing.assert_allclose(run(g, ids), w[ids] @ w.T + w[0].sum() + w[0, 0], rtol=1e-5)


def test_containers():
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and len(seq[:2]) == 2
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    named = nn.Sequential(OrderedDict([("a", nn.Identity()), ("b", nn.Tanh())]))
    assert isinstance(named[1], nn.Tanh)
    ml = nn.ModuleList([nn.Linear(2, 2)])
    ml.append(nn.Linear(2, 2))
    ml.insert(0, nn.Identity())
    assert [type(m).__name__ for m in ml] == ["Identity", "Linear", "Linear"]
    assert list(ml.state_dict()) == ["1.weight", "1.bias", "2.weight", "2.bias"]
    with pytest.raises(IndexError):
        ml[3]
    md = nn.ModuleDict({"x": nn.Linear(1, 1)})
    md["y"] = nn.ReLU()
    assert list(md) == ["x", "y"] and "y" in md
    assert list(md.state_dict()) == ["x.weight", "x.bias"]
    x = rng().standard_normal((5, 3)).astype(np.float32)
    g = trace(seq, {"x": TensorSpec((B, 3))})
    sd = seq.state_dict()
    ref = np.maximum(x @ sd["0.weight"].T + sd["0.bias"], 0) @ sd["2.weight"].T + sd["2.bias"]
    np.testing.assert_allclose(run(g, x), ref, rtol=1e-5, atol=1e-6)


def test_default_init_is_deterministic_and_torch_scaled():
    nn.manual_seed(3)
    a = nn.Linear(100, 10)
    nn.manual_seed(3)
    b = nn.Linear(100, 10)
    np.testing.assert_array_equal(a.weight.data, b.weight.data)
    assert np.abs(a.weight.data).max() <= 0.1 and np.abs(a.weight.data).max() > 0.08
    assert a.weight.dtype is aotc.float32


def test_module_dtype_conversion():
    m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm2d(2)).half()
    assert m[0].weight.dtype is aotc.float16 and m[1].running_mean.dtype is aotc.float16
    assert m[1].num_batches_tracked.dtype is aotc.int64
    assert m.eval() is m and m.train() is m and not m.training


# -- layers against numpy --------------------------------------------------------------------------


def _layer_run(layer, x, dims=None):
    shape = tuple((dims or {}).get(i, n) for i, n in enumerate(x.shape))
    (param, *_) = inspect.signature(layer.forward).parameters  # inputs bind to forward's parameters by name
    g = trace(layer, {param: TensorSpec(shape, x.dtype.name)})
    return run(g, x)


def test_simple_layers():
    x = rng().standard_normal((3, 6)).astype(np.float32)
    cases = [
        (nn.ReLU(), np.maximum(x, 0)),
        (nn.SiLU(), x * sigmoid(x)),
        (nn.Sigmoid(), sigmoid(x)),
        (nn.Tanh(), np.tanh(x)),
        (nn.GELU("tanh"), 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
        (nn.Softmax(dim=1), np.exp(x) / np.exp(x).sum(1, keepdims=True)),
        (nn.LogSoftmax(dim=-1), x - np.log(np.exp(x).sum(1, keepdims=True))),
        (nn.Dropout(0.3), x),
        (nn.Identity(), x),
        (nn.LeakyReLU(0.1), np.where(x >= 0, x, 0.1 * x)),
        (nn.Flatten(0), x.reshape(-1)),
    ]
    for layer, ref in cases:
        np.testing.assert_allclose(_layer_run(layer, x, {0: B}), ref, rtol=1e-5, atol=1e-6, err_msg=repr(layer))


def test_norm_layers():
    x = rng().standard_normal((2, 3, 8)).astype(np.float32)
    ln = nn.LayerNorm(8, eps=1e-6)
    ln.load_state_dict({"weight": np.linspace(0.5, 2, 8), "bias": np.linspace(-1, 1, 8)})
    m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ref = (x - m) / np.sqrt(v + 1e-6) * ln.weight.data + ln.bias.data
    np.testing.assert_allclose(_layer_run(ln, x), ref, rtol=1e-5, atol=1e-5)
    rms = nn.RMSNorm((3, 8))
    rms.weight.data[:] = 2.0
    ref = x / np.sqrt((x * x).mean((1, 2), keepdims=True) + 1e-6) * 2
    np.testing.assert_allclose(_layer_run(rms, x), ref, rtol=1e-5, atol=1e-5)
    assert list(nn.LayerNorm(4, elementwise_affine=False).state_dict()) == []
    assert list(nn.LayerNorm(4, bias=False).state_dict()) == ["weight"]


def test_embedding_layer():
    emb = nn.Embedding(7, 3, padding_idx=2)
    assert not emb.weight.data[2].any()
    ids = np.array([[0, 6], [2, 1]], np.int64)
    np.testing.assert_array_equal(_layer_run(emb, ids), emb.weight.data[ids])
    with pytest.raises(TraceError, match="int32 or int64"):
        _layer_run(emb, ids.astype(np.float32))


def test_conv_batchnorm_pool_stack():
    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.pool = nn.MaxPool2d(2)
            self.avg = nn.AvgPool2d(2, stride=1)
            self.flat = nn.Flatten()

        def forward(self, x):
            return self.flat(self.avg(self.pool(F.relu(self.bn(self.conv(x))))))

    net = CNN()
    assert list(net.state_dict()) == [
        "conv.weight",
        "conv.bias",
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
    ]
    assert net.state_dict()["bn.num_batches_tracked"].shape == () and net.conv.weight.shape == (4, 3, 3, 3)
    r = rng(1)
    net.bn.running_mean.data[:] = r.standard_normal(4)
    net.bn.running_var.data[:] = r.uniform(0.5, 2, 4)
    net.bn.weight.data[:] = r.uniform(0.5, 2, 4)
    x = r.standard_normal((2, 3, 8, 8)).astype(np.float32)
    sd = {k: v.astype(np.float64) for k, v in net.state_dict().items()}
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = sum(
        np.einsum("nchw,oc->nohw", xp[:, :, i : i + 8, j : j + 8], sd["conv.weight"][:, :, i, j])
        for i in range(3)
        for j in range(3)
    )
    y = y + sd["conv.bias"][None, :, None, None]
    ch = lambda k: sd[k][None, :, None, None]  # noqa: E731
    y = (y - ch("bn.running_mean")) / np.sqrt(ch("bn.running_var") + 1e-5) * ch("bn.weight") + ch("bn.bias")
    y = np.maximum(y, 0).reshape(2, 4, 4, 2, 4, 2).max(axis=(3, 5))
    y = np.lib.stride_tricks.sliding_window_view(y, (2, 2), axis=(2, 3)).mean(axis=(-1, -2)).reshape(2, -1)
    np.testing.assert_allclose(_layer_run(net, x, {0: B}), y, rtol=1e-4, atol=1e-5)


class NumpyLSTM:
    """torch.nn.LSTM's equations, directly."""

    def __init__(self, sd, layers, bidirectional):
        self.sd, self.layers, self.dirs = sd, layers, 2 if bidirectional else 1

    def cell(self, x, h, c, key):
        sd = self.sd
        g = x @ sd[f"weight_ih_{key}"].T + sd[f"bias_ih_{key}"] + h @ sd[f"weight_hh_{key}"].T + sd[f"bias_hh_{key}"]
        i, f, gg, o = np.split(g, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(gg)
        return sigmoid(o) * np.tanh(c), c

    def __call__(self, x, h0, c0):  # x: (steps, batch, features)
        hn, cn = [], []
        for layer in range(self.layers):
            outs = []
            for d in range(self.dirs):
                k = layer * self.dirs + d
                key = f"l{layer}" + ("_reverse" if d else "")
                h, c = h0[k], c0[k]
                ys = [None] * len(x)
                for t in reversed(range(len(x))) if d else range(len(x)):
                    h, c = self.cell(x[t], h, c, key)
                    ys[t] = h
                outs.append(np.stack(ys))
                hn.append(h)
                cn.append(c)
            x = np.concatenate(outs, -1)
        return x, np.stack(hn), np.stack(cn)


def test_lstm_parameter_names_match_torch():
    lstm = nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    names = list(lstm.state_dict())
    expected = []
    for layer in range(2):
        for sfx in ("", "_reverse"):
            expected += [f"{p}_l{layer}{sfx}" for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    assert names == expected
    assert (
        lstm.weight_ih_l0.shape == (20, 3)
        and lstm.weight_ih_l1.shape == (20, 10)
        and lstm.weight_hh_l1_reverse.shape == (20, 5)
    )
    assert list(nn.LSTM(3, 5, bias=False).state_dict()) == ["weight_ih_l0", "weight_hh_l0"]


@pytest.mark.parametrize(
    ("layers", "bidirectional", "batch_first"), [(1, False, False), (2, True, True), (2, False, True)]
)
def test_lstm_matches_torch_equations(layers, bidirectional, batch_first):
    lstm = nn.LSTM(3, 4, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    ref = NumpyLSTM({k: v.astype(np.float64) for k, v in lstm.state_dict().items()}, layers, bidirectional)
    r = rng(2)
    x = r.standard_normal((2, 5, 3) if batch_first else (5, 2, 3)).astype(np.float32)
    n_state = layers * (2 if bidirectional else 1)
    h0 = r.standard_normal((n_state, 2, 4)).astype(np.float32)
    c0 = r.standard_normal((n_state, 2, 4)).astype(np.float32)
    batch_axis = 0 if batch_first else 1
    shape = list(x.shape)
    shape[batch_axis] = B
    g = trace(
        lambda x, h, c: lstm(x, (h, c)),
        {"x": TensorSpec(shape), "h": TensorSpec((n_state, B, 4)), "c": TensorSpec((n_state, B, 4))},
    )
    out, (hn, cn) = run(g, x, h0, c0)
    y, rh, rc = ref(x.transpose(1, 0, 2) if batch_first else x, h0, c0)
    np.testing.assert_allclose(out, y.transpose(1, 0, 2) if batch_first else y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hn, rh, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cn, rc, rtol=1e-5, atol=1e-5)


def test_lstm_default_state_and_unbatched():
    lstm = nn.LSTM(3, 4)
    ref = NumpyLSTM({k: v.astype(np.float64) for k, v in lstm.state_dict().items()}, 1, False)
    x = rng(3).standard_normal((6, 3)).astype(np.float32)
    out, (hn, cn) = run(trace(lstm, {"input": TensorSpec((6, 3))}), x)
    y, rh, rc = ref(x[:, None], np.zeros((1, 1, 4)), np.zeros((1, 1, 4)))
    assert out.shape == (6, 4) and hn.shape == (1, 4)
    np.testing.assert_allclose(cn, rc[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, y[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hn, rh[:, 0], rtol=1e-5, atol=1e-5)


def test_lstm_needs_a_static_time_axis():
    lstm = nn.LSTM(3, 4, batch_first=True)
    with pytest.raises(TraceError, match="sequence length must be static"):
        trace(lstm, {"input": TensorSpec((B, Dim("steps", 1, 10), 3))})


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: nn.Linear(0, 3), "positive int"),
        (lambda: nn.Conv2d(3, 4, 3, groups=2), "divisible by groups"),
        (lambda: nn.Conv2d(3, 4, 3, padding_mode="reflect"), "padding_mode"),
        (lambda: nn.LSTM(3, 4, proj_size=2), "proj_size"),
        (lambda: nn.GELU("fast"), "approximate"),
        (lambda: nn.BatchNorm2d(3, track_running_stats=False), "track_running_stats"),
    ],
)
def test_bad_layer_arguments(make, match):
    with pytest.raises(nn.ModuleError, match=match):
        make()


def _mha_ref(mha, q, k, v, mask_bias):
    sd = {k_: a.astype(np.float64) for k_, a in mha.state_dict().items()}
    e, h = mha.embed_dim, mha.num_heads
    w, b = sd["in_proj_weight"], sd["in_proj_bias"]
    proj = [x @ w[i * e : (i + 1) * e].T + b[i * e : (i + 1) * e] for i, x in enumerate((q, k, v))]
    # (N, L, E) -> (N, heads, L, hd)
    qh, kh, vh = (p.reshape(p.shape[0], p.shape[1], h, e // h).transpose(0, 2, 1, 3) for p in proj)
    s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(e // h) + mask_bias
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    out = (p @ vh).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    return out @ sd["out_proj.weight"].T + sd["out_proj.bias"], p.mean(1)


def test_multihead_attention_matches_torch_math():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    assert list(mha.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    r = rng(5)
    for key in ("in_proj_bias", "out_proj.bias"):
        mha.state_dict()[key][:] = r.standard_normal(mha.state_dict()[key].shape)
    x = r.standard_normal((2, 5, 8)).astype(np.float32)
    pad = np.array([[False] * 5, [False] * 3 + [True] * 2])
    causal = np.triu(np.ones((5, 5), bool), 1)
    g = trace(
        lambda x, pad: (mha(x, x, x, key_padding_mask=pad), mha(x, x, x, need_weights=False, is_causal=True)[0]),
        {"x": TensorSpec((B, Dim("s", 1, 32), 8)), "pad": TensorSpec((B, Dim("s", 1, 32)), "bool")},
    )
    (out, weights), causal_out = run(g, x, pad)
    ref, ref_w = _mha_ref(mha, x, x, x, np.where(pad, -np.inf, 0.0)[:, None, None, :])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights, ref_w, rtol=1e-4, atol=1e-5)
    ref_c, _ = _mha_ref(mha, x, x, x, np.where(causal, -np.inf, 0.0))
    np.testing.assert_allclose(causal_out, ref_c, rtol=1e-4, atol=1e-5)
    with pytest.raises(nn.ModuleError, match="divisible"):
        nn.MultiheadAttention(8, 3)
