"""ONNX's Attention op (opset 23+) runs as aotc's fused attention: each model below, built with onnx.helper,
imports to one SDPA that the scheduler gives one attention kernel, and computes what onnxruntime computes,
on the cpu backend (numpy references) and with the generated kernels under the Triton interpreter.

Covered: 4-D and 3-D (``q_num_heads``/``kv_num_heads``) inputs, ``is_causal`` (square and not), an additive
float mask, a bool mask with a query row that may attend no key, grouped-query attention, the ``scale``
attribute, float16, a past key/value cache with and without causal masking, ``left_window_size`` and
``nonpad_kv_seqlen``. The last three the importer writes out with primitives (ops_attention.py's explicit
path, its probabilities wrapped in where(bias masks the whole row, 0, p)) and the attention pass folds back;
some of them leave query rows with no allowed key, which ONNX gives all-zero outputs. GAPS lists what does
not fuse, marked xfail.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aotc.runtime
from aotc.compiler import CompiledModel, compile_graph
from aotc.ir import Op
from aotc.ir.templates import KernelKind
from aotc.lowering.attention import decompose_keeping_attention, explain_attention
from aotc.lowering.options import CompileOptions
from aotc.onnx import import_onnx

ort = pytest.importorskip("onnxruntime")

F32, F16, BOOL, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.INT64
B, S, KV = "batch", "seq", "kv"
RANGES = {"batch": (1, 4), "seq": (1, 32), "kv": (1, 32), "past": (1, 32)}
ENV = {"batch": 2, "seq": 5, "kv": 7, "past": 4}

Spec = tuple[str, tuple[Any, ...], int]  # an ONNX graph input or output: name, shape (ints and dim names), type


@dataclass(frozen=True)
class Case:
    name: str
    inputs: tuple[Spec, ...]
    outputs: tuple[Spec, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    node_inputs: tuple[str, ...] = ()  # the Attention node's inputs ("" skips one); default: the graph's
    opset: int = 23
    env: dict[str, int] = field(default_factory=lambda: dict(ENV))
    ranges: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(RANGES))
    fixed: dict[str, np.ndarray] = field(default_factory=dict)  # feeds not drawn at random
    tol: float = 1e-5
    zero_rows: int = 0  # output rows (over batch, heads and queries) of queries that may attend no key

    def model(self) -> onnx.ModelProto:
        def info(spec: Spec) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(spec[0], spec[2], list(spec[1]))

        names = self.node_inputs or tuple(s[0] for s in self.inputs)
        node = helper.make_node("Attention", list(names), [s[0] for s in self.outputs], **self.attrs)
        graph = helper.make_graph([node], self.name, [info(s) for s in self.inputs], [info(s) for s in self.outputs])
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets)
        with contextlib.suppress(ValueError):  # the oldest IR the opset allows, for older onnxruntimes
            model.ir_version = helper.find_min_ir_version_for(opsets)
        onnx.checker.check_model(model, full_check=True)
        return model

    def dims(self) -> dict[str, tuple[int, int]]:
        used = {d for _, shape, _ in self.inputs for d in shape if isinstance(d, str)}
        return {d: r for d, r in self.ranges.items() if d in used}

    def feeds(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        out = {}
        for name, shape, kind in self.inputs:
            dims = tuple(self.env[d] if isinstance(d, str) else d for d in shape)
            if name in self.fixed:
                out[name] = self.fixed[name]
            elif kind == BOOL:
                keep = rng.random(dims) < 0.7
                keep[..., 0, 1, :] = False  # a query row that may attend no key: ONNX gives it zeros
                out[name] = keep
            else:
                out[name] = rng.standard_normal(dims).astype(np.float16 if kind == F16 else np.float32)
        return out


def qkv4(q_heads: int = 2, kv_heads: int = 2, kv: str = KV, dtype: int = F32) -> tuple[Spec, ...]:
    return (("q", (B, q_heads, S, 8), dtype), ("k", (B, kv_heads, kv, 8), dtype), ("v", (B, kv_heads, kv, 8), dtype))


def y4(heads: int = 2, dtype: int = F32) -> tuple[Spec, ...]:
    return (("y", (B, heads, S, 8), dtype),)


PAST = (("past_key", (B, 2, "past", 8), F32), ("past_value", (B, 2, "past", 8), F32))
PRESENT = (("present_key", (B, 2, "total", 8), F32), ("present_value", (B, 2, "total", 8), F32))

FUSED = [
    Case("plain_4d", qkv4(), y4()),
    Case("causal_4d", qkv4(kv=S), y4(), {"is_causal": 1}),
    Case("causal_4d_fewer_queries", qkv4(), y4(), {"is_causal": 1}),  # ONNX aligns the causal mask top-left
    Case("causal_4d_more_queries", qkv4(), y4(), {"is_causal": 1}, env={**ENV, "seq": 7, "kv": 5}),
    Case(
        "causal_3d",
        (("q", (B, S, 16), F32), ("k", (B, S, 16), F32), ("v", (B, S, 16), F32)),
        (("y", (B, S, 16), F32),),
        {"is_causal": 1, "q_num_heads": 2, "kv_num_heads": 2},
    ),
    Case("float_mask", (*qkv4(), ("mask", (S, KV), F32)), y4()),
    Case("bool_mask", (*qkv4(), ("mask", (B, 1, S, KV), BOOL)), y4(), zero_rows=2 * 2),
    Case(
        "gqa_3d",
        (("q", (B, S, 32), F32), ("k", (B, KV, 16), F32), ("v", (B, KV, 16), F32)),
        (("y", (B, S, 32), F32),),
        {"q_num_heads": 4, "kv_num_heads": 2},
    ),
    Case("gqa_4d_causal", qkv4(q_heads=4, kv=S), y4(heads=4), {"is_causal": 1}),
    Case("scale", qkv4(), y4(), {"scale": 0.3}),
    Case("float16_causal", qkv4(kv=S, dtype=F16), y4(dtype=F16), {"is_causal": 1}, tol=2e-3),
    Case("past_kv", (*qkv4(kv=S), *PAST), y4() + PRESENT, node_inputs=("q", "k", "v", "", "past_key", "past_value")),
    Case(
        "causal_past_kv",  # the causal mask aligned bottom-right, after the cache
        (*qkv4(kv=S), *PAST),
        y4() + PRESENT,
        {"is_causal": 1},
        node_inputs=("q", "k", "v", "", "past_key", "past_value"),
    ),
    Case("sliding_window", qkv4(kv=S), y4(), {"is_causal": 1, "left_window_size": 2}, opset=25),
    Case(  # queries 6 to 8 see keys 5 to 8 at most, past the last one: no key allowed, zero outputs
        "sliding_window_more_queries",
        qkv4(),
        y4(),
        {"is_causal": 1, "left_window_size": 1},
        opset=25,
        env={**ENV, "seq": 9, "kv": 5},
        zero_rows=2 * 2 * 3,
    ),
    Case(
        "nonpad_kv_seqlen",
        (*qkv4(), ("nonpad", (B,), I64)),
        y4(),
        node_inputs=("q", "k", "v", "", "", "", "nonpad"),
        opset=24,
        fixed={"nonpad": np.array([7, 4], np.int64)},
    ),
    Case(  # batch 1 has no valid key and batch 0 a query row its bool mask leaves none: both zero rows
        "nonpad_kv_seqlen_empty_with_bool_mask",
        (*qkv4(), ("mask", (B, 1, S, KV), BOOL), ("nonpad", (B,), I64)),
        y4(),
        node_inputs=("q", "k", "v", "mask", "", "", "nonpad"),
        opset=24,
        fixed={"nonpad": np.array([6, 0], np.int64)},
        zero_rows=2 * 5 + 2,
    ),
]

# Imported as explicit matmul/softmax/matmul graphs that the attention pass does not fold, with the reason
# explain_attention gives.
GAPS = [
    (
        Case("softcap", qkv4(), y4(), {"softcap": 5.0}),
        "the scores pass through tanh (only scales, masks and casts fold into attention)",
    ),
]

CASES = {c.name: c for c in FUSED + [g for g, _ in GAPS]}
GAP_CASES = [pytest.param(c, marks=pytest.mark.xfail(reason=why, strict=True), id=c.name) for c, why in GAPS]


@functools.cache
def _compiled(name: str) -> CompiledModel:
    case = CASES[name]
    return compile_graph(import_onnx(case.model(), case.dims()), options=CompileOptions.from_env())


def _assert_close(got: list[np.ndarray], want: list[np.ndarray], tol: float, what: str) -> None:
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("case", [*(pytest.param(c, id=c.name) for c in FUSED), *GAP_CASES])
def test_attention_op_becomes_one_attention_kernel(case: Case) -> None:
    graph = import_onnx(case.model(), case.dims())
    assert explain_attention(decompose_keeping_attention(graph)) == []
    compiled = _compiled(case.name)
    assert sum(n.op is Op.SDPA for n in compiled.lowered.nodes) == 1
    assert compiled.schedule is not None, compiled.kernels.note
    kinds = [k.kind for k in compiled.schedule.kernels]
    assert kinds.count(KernelKind.ATTENTION) == 1, kinds


@pytest.mark.parametrize("case", [pytest.param(c, id=n) for n, c in CASES.items()])
def test_attention_op_matches_onnxruntime(case: Case) -> None:
    model, feeds = case.model(), case.feeds()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except (ort.capi.onnxruntime_pybind11_state.NotImplemented, ort.capi.onnxruntime_pybind11_state.InvalidGraph):
        pytest.skip(f"onnxruntime {ort.__version__} has no Attention-{case.opset}")
    want = session.run(None, feeds)
    assert int((want[0] == 0).all(axis=-1).sum()) == case.zero_rows, "the feeds leave other rows with no key"
    compiled = _compiled(case.name)
    _assert_close(compiled.run(feeds), want, case.tol, f"{case.name}: cpu backend")
    pytest.importorskip("triton")
    interpreted = aotc.runtime.load(compiled.artifact_bytes, device="interpret").run(feeds)
    _assert_close(interpreted, want, case.tol, f"{case.name}: kernels under the Triton interpreter")
