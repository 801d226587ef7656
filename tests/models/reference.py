"""Independent float64 numpy implementations of the example models, written from the math.

Nothing here imports aotc: each function takes the model's state dict (numpy arrays
keyed like ``model.state_dict()``) and the inputs, and computes the outputs the
model's ``forward`` documents. Tests compare the compiled model against these.
"""

from __future__ import annotations

import math

import numpy as np

Weights = dict[str, np.ndarray]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _w(sd: Weights, key: str) -> np.ndarray:
    return np.asarray(sd[key], dtype=np.float64)


def linear(sd: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    """PyTorch Linear: x @ W^T + b with W of shape (out, in)."""
    return x @ _w(sd, prefix + ".weight").T + _w(sd, prefix + ".bias")


def conv1d(sd: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    """HF GPT-2 Conv1D: x @ W + b with W of shape (in, out)."""
    return x @ _w(sd, prefix + ".weight") + _w(sd, prefix + ".bias")


def layer_norm(sd: Weights, prefix: str, x: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * _w(sd, prefix + ".weight") + _w(sd, prefix + ".bias")


def gelu_erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """softmax(q k^T / sqrt(d) + bias) v over (batch, heads, seq, head_dim) arrays."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]) + bias
    return softmax(scores) @ v


def _heads(x: np.ndarray, n_head: int) -> np.ndarray:
    b, t, d = x.shape
    return x.reshape(b, t, n_head, d // n_head).transpose(0, 2, 1, 3)


def _merge(x: np.ndarray) -> np.ndarray:
    b, h, t, hd = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * hd)


def _count(sd: Weights, prefix: str) -> int:
    """How many ``prefix.N.*`` entries the state dict holds."""
    return len({k[len(prefix) :].split(".")[0] for k in sd if k.startswith(prefix)})


# -- models -------------------------------------------------------------------------------------


def mlp(sd: Weights, x: np.ndarray) -> np.ndarray:
    h = np.maximum(linear(sd, "fc1", x.astype(np.float64)), 0.0)
    h = gelu_erf(linear(sd, "fc2", h))
    return linear(sd, "fc3", h)


def gpt2(sd: Weights, input_ids: np.ndarray, n_head: int, eps: float = 1e-5) -> np.ndarray:
    t = input_ids.shape[1]
    wte = _w(sd, "wte.weight")
    x = wte[input_ids] + _w(sd, "wpe.weight")[:t]
    causal = np.where(np.tril(np.ones((t, t), bool)), 0.0, -np.inf)
    for i in range(_count(sd, "h.")):
        p = f"h.{i}"
        a = conv1d(sd, f"{p}.attn.c_attn", layer_norm(sd, f"{p}.ln_1", x, eps))
        q, k, v = (_heads(part, n_head) for part in np.split(a, 3, axis=-1))
        x = x + conv1d(sd, f"{p}.attn.c_proj", _merge(attention(q, k, v, causal)))
        m = gelu_tanh(conv1d(sd, f"{p}.mlp.c_fc", layer_norm(sd, f"{p}.ln_2", x, eps)))
        x = x + conv1d(sd, f"{p}.mlp.c_proj", m)
    return layer_norm(sd, "ln_f", x, eps) @ wte.T


def bert(
    sd: Weights, input_ids: np.ndarray, attention_mask: np.ndarray, n_head: int, eps: float = 1e-12
) -> dict[str, np.ndarray]:
    t = input_ids.shape[1]
    e = "embeddings"
    x = _w(sd, f"{e}.word_embeddings.weight")[input_ids]
    x = x + _w(sd, f"{e}.position_embeddings.weight")[:t] + _w(sd, f"{e}.token_type_embeddings.weight")[0]
    x = layer_norm(sd, f"{e}.LayerNorm", x, eps)
    bias = (1.0 - attention_mask.astype(np.float64))[:, None, None, :] * -10000.0
    for i in range(_count(sd, "encoder.layer.")):
        p = f"encoder.layer.{i}"
        q, k, v = (_heads(linear(sd, f"{p}.attention.self.{n}", x), n_head) for n in ("query", "key", "value"))
        ctx = _merge(attention(q, k, v, bias))
        x = layer_norm(sd, f"{p}.attention.output.LayerNorm", linear(sd, f"{p}.attention.output.dense", ctx) + x, eps)
        h = gelu_erf(linear(sd, f"{p}.intermediate.dense", x))
        x = layer_norm(sd, f"{p}.output.LayerNorm", linear(sd, f"{p}.output.dense", h) + x, eps)
    pooled = np.tanh(linear(sd, "pooler.dense", x[:, 0]))
    return {"last_hidden_state": x, "pooler_output": pooled}


def _lstm_direction(sd: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    """One LSTM direction over (batch, steps, features); gates i, f, g, o as in torch.nn.LSTM."""
    hidden = sd[f"{prefix}.hh.weight"].shape[1]
    h = np.zeros((x.shape[0], hidden))
    c = np.zeros((x.shape[0], hidden))
    outputs = []
    for t in range(x.shape[1]):
        gates = linear(sd, f"{prefix}.ih", x[:, t]) + linear(sd, f"{prefix}.hh", h)
        i, f, g, o = np.split(gates, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, axis=1)


def lstm_ensemble(sd: Weights, x: np.ndarray) -> np.ndarray:
    total = 0.0
    for m in range(_count(sd, "members.")):
        y = x.astype(np.float64)
        for layer in range(_count(sd, f"members.{m}.layers.")):
            p = f"members.{m}.layers.{layer}"
            fwd = _lstm_direction(sd, f"{p}.fwd.cell", y)
            bwd = _lstm_direction(sd, f"{p}.bwd.cell", y[:, ::-1])[:, ::-1]
            y = np.concatenate([fwd, bwd], axis=2)
        total = total + y
    return total


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    """Stride-1 NCHW convolution as a sum over kernel offsets."""
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out + b[None, :, None, None]


def batch_norm(sd: Weights, prefix: str, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    def channel(name: str) -> np.ndarray:
        return _w(sd, f"{prefix}.{name}")[None, :, None, None]

    return (x - channel("running_mean")) / np.sqrt(channel("running_var") + eps) * channel("weight") + channel("bias")


def pool2x2(x: np.ndarray, kind: str) -> np.ndarray:
    n, c, h, w = x.shape
    windows = x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2)
    return windows.max(axis=(3, 5)) if kind == "max" else windows.mean(axis=(3, 5))


def cnn(sd: Weights, images: np.ndarray) -> np.ndarray:
    x = images.astype(np.float64)
    for i, kind in ((1, "max"), (2, "avg")):
        x = conv2d(x, _w(sd, f"conv{i}.weight"), _w(sd, f"conv{i}.bias"), pad=1)
        x = pool2x2(np.maximum(batch_norm(sd, f"bn{i}", x), 0.0), kind)
    return linear(sd, "fc", x.reshape(x.shape[0], -1))
