"""Kernel bugs the ONNX node suite found under ``--device interpret`` (scripts/onnx_node_tests.py), each as the
smallest graph that showed it, run under the Triton interpreter against the cpu backend."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from aotc.errors import UnsupportedError
from aotc.ir import DType, Op, TensorType
from aotc.ir.evaluate import GraphRunner
from aotc.ir.templates import KernelKind
from aotc.kernels.scheduler import schedule_graph
from aotc.runtime.backends.triton_interp import launch_source
from tests.graph_kit import make_graph
from tests.kernel_layer.kernel_kit import check, run_schedule

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
ROOT = Path(__file__).resolve().parents[2]

# ONNX's Mod edge cases (test_mod_float_edge_cases_*) and a few exact multiples of either sign.
INF, NAN = np.inf, np.nan
EDGE_A = [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, INF, -INF, 1.0, 1.0, NAN, 1.0, -4.0, 4.0, 5.5, -5.5]
EDGE_B = [-2.0, 2.0, 2.0, -2.0, INF, INF, -INF, -INF, 2.0, 2.0, 0.0, -0.0, 2.0, NAN, 2.0, -2.0, -2.0, 2.0]


@pytest.mark.parametrize("dtype", [F32, F16], ids=lambda d: d.name)
@pytest.mark.parametrize("op", [Op.MOD, Op.FMOD], ids=lambda o: o.value)
def test_float_mod_at_infinite_divisors_and_zeros(op: Op, dtype: DType) -> None:
    """a - floor(a / b) * b made NaN of a finite ``a`` mod an infinite ``b`` (numpy gives ``a``, or ``b`` when
    the signs differ for the floored mod) and +0 of zero remainders the cpu backend (numpy) signs like ``b``
    (mod) or ``a`` (fmod)."""
    n = len(EDGE_A)
    g = make_graph({"a": TensorType(dtype, (n,)), "b": TensorType(dtype, (n,))}, lambda b, x, y: [b.op(op, x, y)])
    a, b = np.array(EDGE_A, dtype.np), np.array(EDGE_B, dtype.np)
    check(g, [a, b], tol=(0.0, 0.0))
    (got,) = run_schedule(g, [a, b], {})
    (want,) = GraphRunner(g).run([a, b], {})
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def test_depthwise_conv_over_a_concat_along_its_taps() -> None:
    """A causal conv with state: the concat joining the state and the new step is read at a static tap index,
    so its "which part" test is a scalar bool ANDed with the tile mask. The interpreter typed that scalar as
    int32 and the load refused the mask ("mask has unsupported dtype")."""

    def body(b, x, state, w):
        joined = b.op(Op.CONCAT, state, x, axis=2)
        return [b.op(Op.CONV, joined, w, strides=(1,), pads=(0, 0), dilations=(1,), groups=4)]

    inputs = {
        "x": TensorType(F32, (2, 4, 1)),
        "state": TensorType(F32, (2, 4, 3)),
        "w": TensorType(F32, (4, 1, 4)),
    }
    g = make_graph(inputs, body)
    schedule = schedule_graph(g)
    (kern,) = schedule.kernels
    assert kern.kind is KernelKind.CONV and "concat" in kern.fused and "tl.static_range" in kern.source
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs.values()]
    check(g, feeds, schedule=schedule)


SCALAR_TEST_MASK = """
import triton
import triton.language as tl


@triton.jit
def scalar_test_mask(x_ptr, out_ptr, rows, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    row_ok = offs < rows
    for tap in tl.static_range(3):
        k = tap  # an assigned name is a scalar tensor in the interpreter (the conv template assigns its taps)
        inside = (k >= 1) & (k < 3)
        v = tl.load(x_ptr + offs[:, None] * 3 + k, mask=row_ok[:, None] & inside, other=-1.0)
        tl.store(out_ptr + offs[:, None] * 3 + k, v, mask=row_ok[:, None])
"""


def test_launcher_splats_a_scalar_comparison_as_a_bool() -> None:
    """The launcher's fix itself: a scalar comparison ANDed into a 2-D mask, as the compiled kernel allows."""
    x = np.arange(12, dtype=np.float32)
    out = np.zeros(12, np.float32)
    launch_source(SCALAR_TEST_MASK, "scalar_test_mask", (1,), [x, out, 3], ["*fp32", "*fp32", "i32"], {"BLOCK": 4})
    want = np.where(np.arange(12) % 3 >= 1, x, -1.0)
    want[9:] = 0.0  # row 3 is past ``rows``: never stored
    np.testing.assert_array_equal(out, want)


def test_float32_to_bf16_rounds_to_nearest_even_as_the_gpu() -> None:
    """The interpreter dropped the low 16 bits; its bias over a chain of bf16 ops put the bf16 attention node
    tests at the edge of their tolerance. Ties, values just above and below them, and overflow to inf."""
    g = make_graph({"x": TensorType(F32, (4, 64))}, lambda b, x: [b.cast(x, BF16), b.cast(b.op(Op.NEG, x), BF16)])
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    bits = x.view(np.uint32) & np.uint32(0xFFFF0000)
    x[:192] = (bits[:192] | np.repeat(np.array([0x8000, 0x8001, 0x7FFF], np.uint32), 64)).view(np.float32)
    x[192:] = [3.3961776e38, np.inf, np.nan, 0.0, *x[196:]]  # the first rounds up to inf
    check(g, [x.reshape(4, 64)], tol=(0.0, 0.0))


@pytest.mark.parametrize("keep", [False, True])
def test_where_on_a_constant_condition_takes_a_bool(keep: bool) -> None:
    """A folded mask (softmax's where over a constant condition) was written ``tl.where(0, ...)``: an int32
    condition, which Triton warns is deprecated and will refuse."""

    def body(b, x):
        return [b.op(Op.WHERE, b.full(keep, DType.bool, (3, 5)), x, b.full(0.0, F32, (3, 5)))]

    g = make_graph({"x": TensorType(F32, (3, 5))}, body)
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*non-boolean condition")
        check(g, [x], tol=(0.0, 0.0))


def _node_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("onnx_node_tests", ROOT / "scripts" / "onnx_node_tests.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_node_script_interprets_kernels_and_skips_models_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _node_script()
    modules, ops = ("relu", "mod", "scatterelements", "identity"), ("Relu", "Mod", "ScatterElements", "Identity")
    results = script.run(modules, ops=ops, device="interpret")
    by_op: dict[str, set[str]] = {}
    for r in results:
        by_op.setdefault(r.op, set()).add(r.status)
    assert by_op["Relu"] == {"passed"}, [r for r in results if r.op == "Relu"]
    assert "failed" not in by_op["Mod"], [r for r in results if r.status == "failed"]
    assert by_op["ScatterElements"] == {"passed"}, [r for r in results if r.op == "ScatterElements"]
    identity = [r for r in results if r.name == "test_identity"]
    assert identity and identity[0].status == "skipped" and "needs none" in identity[0].reason

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise UnsupportedError("no kernel for op scatter (refused by the test)")

    monkeypatch.setattr("aotc.kernels.scatter.emit_plan", refuse)  # a model the scheduler refuses
    scatter = script.run(("scatterelements",), ops=("ScatterElements",), device="interpret")
    assert scatter and all(r.status == "skipped" and "refused by the test" in r.reason for r in scatter)
