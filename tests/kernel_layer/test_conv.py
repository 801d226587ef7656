"""The conv template under the Triton interpreter against the cpu backend: implicit GEMM with stride,
padding, dilation and groups, the direct depthwise kernel, symbolic sizes, and the conv + bias +
batch norm + ReLU epilogue as one kernel."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from aotc.errors import UnsupportedError
from aotc.ir import DType, Op, Symbol, TensorType
from aotc.ir.symbolic import sym
from aotc.ir.templates import KernelKind
from aotc.ir.tiles import TileConfig
from aotc.kernels.conv import conv_shape, emit_conv, why_not_conv
from tests.graph_kit import make_graph
from tests.kernel_layer.contraction_graphs import CONV_CASES, conv_attrs, conv_bn_relu_graph, conv_graph
from tests.kernel_layer.contraction_kit import anchor_of, builder_for, check_kernel, epilogue_of

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
TILE = TileConfig(64, 16, 32)


def _emit(graph, config=TILE, **kw):
    node = anchor_of(graph, Op.CONV)
    return emit_conv(builder_for(graph, node), node, epilogue_of(graph, node), config=config, **kw)


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d(case):
    xs, ws, attrs = CONV_CASES[case]
    g = conv_graph(xs, ws, **attrs)
    kern = _emit(g)
    assert kern.kind is KernelKind.CONV
    direct = "depthwise" in case
    assert ("tl.dot" in kern.source) is not direct
    check_kernel(g, kern)


def test_groups_ride_grid_y():
    xs, ws, attrs = CONV_CASES["groups"]
    assert _emit(conv_graph(xs, ws, **attrs)).grid[1] == 2


def test_conv1d_and_default_config():
    g = conv_graph((2, 5, 12), (7, 5, 3), strides=(2,), pads=(1, 0), dilations=(1,), groups=1)
    check_kernel(g, _emit(g, config=None))


def test_conv3d_generic_spatial_dims():
    g = conv_graph((1, 2, 5, 6, 7), (4, 2, 2, 3, 2), strides=(1, 2, 1), pads=(0, 1, 1, 0, 1, 1), dilations=(2, 1, 1))
    check_kernel(g, _emit(g))


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_16bit(dtype):
    g = conv_graph((1, 8, 6, 6), (16, 8, 3, 3), dtype, **conv_attrs(pads=(1, 1, 1, 1)))
    check_kernel(g, _emit(g))


@pytest.mark.parametrize("hw", [(5, 6), (9, 4)])
def test_symbolic_batch_and_image(hw):
    syms = (Symbol("n", 1, 8), Symbol("h", 3, 64), Symbol("w", 3, 64))
    g = conv_graph(
        (sym("n"), 3, sym("h"), sym("w")), (4, 3, 3, 3), symbols=syms, **conv_attrs(stride=(2, 1), pads=(1, 1, 1, 1))
    )
    check_kernel(g, _emit(g), {"n": 2, "h": hw[0], "w": hw[1]})


@pytest.mark.parametrize("dtype,groups", [(F32, 1), (F16, 1), (F32, 8)])
def test_conv_bias_batchnorm_relu_is_one_kernel(dtype, groups):
    g = conv_bn_relu_graph(dtype, groups)
    kern = _emit(g)
    # One kernel reads x, w and the per-channel parameters and writes only the ReLU output.
    assert kern.outputs == (g.outputs[0].id,)
    assert {"conv", "add", "rsqrt", "maximum"} <= set(kern.fused)
    assert len(kern.inputs) == 7
    check_kernel(g, kern)


def test_conv_shape_and_rejections():
    xs, ws, attrs = CONV_CASES["depthwise_multiplier"]
    shape = conv_shape(anchor_of(conv_graph(xs, ws, **attrs), Op.CONV))
    assert shape.depthwise and shape.c_out_group == 2 and shape.taps == 9 and shape.rows == 1 * 4 * 4
    assert not conv_shape(
        anchor_of(conv_graph(*CONV_CASES["groups"][:2], **CONV_CASES["groups"][2]), Op.CONV)
    ).depthwise
    mm = make_graph({"a": TensorType(F32, (4, 4))}, lambda b, x: [b.op(Op.MATMUL, x, x)]).nodes[0]
    assert "not a two-input conv" in why_not_conv(mm)
    with pytest.raises(UnsupportedError, match="conv template"):
        conv_shape(mm)


def test_scheduler_gives_conv_bn_relu_one_kernel():
    # Through the real scheduler and the interpret backend: the CNN block is one CONV kernel.
    from aotc.kernels.scheduler import schedule_graph
    from tests.kernel_layer.contraction_kit import random_feeds
    from tests.kernel_layer.kernel_kit import check

    g = conv_bn_relu_graph(F32)
    schedule = schedule_graph(g)
    (kern,) = schedule.kernels
    assert kern.kind is KernelKind.CONV and kern.outputs == (g.outputs[0].id,)
    assert {"conv", "add", "rsqrt", "mul", "maximum"} <= set(kern.fused)
    check(g, random_feeds(g, {}), {}, tol=(1e-4, 1e-4), schedule=schedule)


def test_constant_weight_and_broadcast_input():
    # Operands that are index math, not buffers: a FULL weight and an input broadcast over the batch.
    def body(b, x):
        xb = b.op(Op.BROADCAST, x, shape=(2, 3, 6, 6))
        return [b.op(Op.CONV, xb, b.full(0.25, F32, (16, 3, 3, 3)), **conv_attrs(pads=(1, 1, 1, 1)))]

    g = make_graph({"x": TensorType(F32, (1, 3, 6, 6))}, body)
    check_kernel(g, _emit(g, TileConfig(64, 16, 32)))
