"""trace() of functions and modules: argument binding, output structures, constants, verification; compile()."""

from __future__ import annotations

import operator
from math import erf

import numpy as np
import pytest

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, TraceError, nn
from aotc.frontend.trace import trace
from aotc.ir.ops import Op
from aotc.ir.verify import verify

from .helpers import rng, run

B = Dim("batch", 1, 32)


def test_function_inputs_bind_by_name():
    g = trace(lambda y, x: x - y, {"x": TensorSpec((3,)), "y": TensorSpec((3,))})
    assert g.input_names == ("x", "y")
    x, y = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(run(g, x, y), x - y)


def test_inputs_bind_by_name_in_any_order():
    def f(a, b):
        return a * 2 + b

    g = trace(f, {"b": TensorSpec((3,)), "a": TensorSpec((3,))})
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(run(g, b, a), a * 2 + b)  # the graph keeps the inputs in the spec order
    # a positional-only parameter binds by its name too
    g = trace(operator.sub, {"b": TensorSpec((3,)), "a": TensorSpec((3,))})
    np.testing.assert_array_equal(run(g, b, a), a - b)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        # the misbinding this refuses: a spec named x fed to a, y to b, by position, with no warning
        (
            lambda a, b: a * 2 + b,
            r"no input for parameter\(s\) \['a', 'b'\]; input\(s\) \['x', 'y'\] name no parameter",
        ),
        (lambda a, b, c: a, r"no input for parameter\(s\) \['a', 'b', 'c'\]"),
        (lambda x: x, r"input\(s\) \['y'\] name no parameter"),
        (lambda *ts: ts[0] + ts[1], r"input\(s\) \['x', 'y'\] name no parameter"),
    ],
)
def test_inputs_that_do_not_name_the_parameters_are_a_trace_error(fn, match):
    with pytest.raises(TraceError, match=match) as e:
        trace(fn, {"x": TensorSpec((3,)), "y": TensorSpec((3,))})
    assert "inputs bind by name only" in str(e.value)


def test_defaults_and_kwargs_bind_by_name():
    g = trace(lambda x, scale=None: x * 2, {"x": TensorSpec((3,))})
    assert g.input_names == ("x",)
    g = trace(lambda **ts: ts["u"] - ts["v"], {"v": TensorSpec((3,)), "u": TensorSpec((3,))})
    u, v = np.full(3, 5, np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(run(g, v, u), u - v)


def test_output_structures_round_trip():
    def f(x):
        return {"a": x, "nested": [x * 2, (x + 1, {"deep": x.sum()})], "t": (x,)}

    g = trace(f, {"x": TensorSpec((B, 2))})
    x = np.ones((4, 2), np.float32)
    out = run(g, x)
    assert list(out) == ["a", "nested", "t"]
    assert isinstance(out["nested"], list) and isinstance(out["nested"][1], tuple) and isinstance(out["t"], tuple)
    np.testing.assert_array_equal(out["nested"][1][1]["deep"], 8.0)
    np.testing.assert_array_equal(out["nested"][0], x * 2)
    assert g.output_tree["dict"][0] == ["a", 0]


def test_outputs_may_be_inputs_parameters_or_arrays():
    lin = nn.Linear(2, 2)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return x, self.lin.weight, np.eye(2, dtype=np.float32)

    x = np.ones((2, 2), np.float32)
    a, w, eye = run(trace(M(), {"x": TensorSpec((2, 2))}), x)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(w, lin.weight.data)
    np.testing.assert_array_equal(eye, np.eye(2))


@pytest.mark.parametrize(
    ("out", "match"),
    [
        (lambda x: None, "returned a NoneType"),
        (lambda x: (x, 3), "returned a int"),
        (lambda x: {1: x}, "keys"),
        (lambda x: (), "no tensors"),
    ],
)
def test_bad_outputs(out, match):
    with pytest.raises(TraceError, match=match):
        trace(out, {"x": TensorSpec((2,))})


def test_module_forward_is_called_through_call():
    calls = []

    class M(nn.Module):
        def __call__(self, *args, **kwargs):
            calls.append(kwargs)
            return super().__call__(*args, **kwargs)

        def forward(self, image):
            return image.mean((1, 2))

    g = trace(M(), {"image": TensorSpec((B, 4, 4))}, name="pooler")
    assert g.name == "pooler" and list(calls[0]) == ["image"]


def test_module_without_forward():
    with pytest.raises(nn.ModuleError, match="forward"):
        trace(nn.Module(), {"x": TensorSpec((2,))})


def test_graph_is_verified_and_uses_high_level_ops():
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU())
    g = trace(model, {"x": TensorSpec((B, Dim("seq", 1, 128), 8))})
    verify(g, "trace")
    assert g.op_counts() == {"constant": 4, "gelu": 1, "layer_norm": 1, "linear": 1}
    assert all(n.loc for n in g.nodes)


def test_parameters_used_outside_a_trace_need_one():
    lin = nn.Linear(2, 2)
    assert lin.weight.shape == (2, 2) and lin.weight.numpy() is lin.weight.data
    with pytest.raises(TraceError, match="active trace"):
        lin.weight + 1


def test_design_example_block():
    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.proj = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.proj(F.gelu(self.fc(self.ln(x))))

    model = Block(16)
    inputs = {"x": TensorSpec((Dim("batch", min=1, max=64), Dim("seq", min=1, max=2048), 16), "float32")}
    g = trace(model, inputs)
    assert [s.name for s in g.symbols] == ["batch", "seq"] and g.guards == ()
    x = rng().standard_normal((2, 7, 16)).astype(np.float32)
    sd = model.state_dict()
    h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    h = h @ sd["fc.weight"].T + sd["fc.bias"]
    h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    np.testing.assert_allclose(run(g, x), x + h @ sd["proj.weight"].T + sd["proj.bias"], rtol=1e-4, atol=1e-5)


def test_compile_end_to_end(tmp_path):
    pytest.importorskip("aotc.lowering.pipeline")
    pytest.importorskip("aotc.artifact.writer")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            y = self.fc(x)
            return {"logits": y, "probs": y.softmax(-1)}

    model = Net()
    compiled = aotc.compile(model, {"x": TensorSpec((B, 4))}, dump_ir=tmp_path / "ir")
    assert isinstance(compiled, aotc.CompiledModel)
    assert compiled.graph.name == "Net" and Op.LINEAR in {n.op for n in compiled.graph.nodes}
    assert Op.LINEAR not in {n.op for n in compiled.lowered.nodes}
    assert any((tmp_path / "ir").iterdir())
    x = rng().standard_normal((5, 4)).astype(np.float32)
    out = compiled(x=x)
    ref = x @ model.fc.weight.data.T + model.fc.bias.data
    np.testing.assert_allclose(out["logits"], ref, rtol=1e-5, atol=1e-6)
    path = tmp_path / "net.aotc"
    compiled.save(path)
    again = aotc.load(path, device="reference")(x=x)  # as compiled(...) runs, so bit for bit
    np.testing.assert_allclose(again["probs"], out["probs"])
