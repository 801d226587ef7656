"""Small primitive graphs the contraction template tests run: a bare product, a Linear with each
epilogue, convolutions (the case table) and the CNN's conv + bias + batch norm + ReLU."""

from __future__ import annotations

from aotc.ir import DType, Op, TensorType
from aotc.lowering.decompose import decompose
from tests.graph_kit import make_graph

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16


def matmul_graph(a_shape, b_shape, dtype=F32, epilogue=None, symbols=(), extra=None):
    inputs = {"a": TensorType(dtype, a_shape), "b": TensorType(dtype, b_shape), **(extra or {})}

    def body(b, x, y, *rest):
        z = b.op(Op.MATMUL, x, y)
        return [epilogue(b, z, *rest)] if epilogue else [z]

    return decompose(make_graph(inputs, body, symbols=symbols))


def linear_graph(x_dtype=F32, act=None, bias=True, residual=False, out_cast=None, w_cast=False):
    """Linear(x) with a transposed (out, in) weight, as the frontend lowers it, then the epilogue."""
    d_in, d_out = 40, 24
    wdt = F32 if w_cast else x_dtype
    inputs = {"x": TensorType(x_dtype, (3, 7, d_in)), "w": TensorType(wdt, (d_out, d_in))}
    if bias:
        inputs["bias"] = TensorType(x_dtype, (d_out,))
    if residual:
        inputs["res"] = TensorType(x_dtype, (3, 7, d_out))

    def body(b, x, w, *rest):
        if w_cast:
            w = b.cast(w, x_dtype)
        ins = [x, w, rest[0]] if bias else [x, w]
        y = b.op(Op.LINEAR, *ins)
        if act is not None:
            y = b.op(act[0], y, **act[1])
        if residual:
            y = b.op(Op.ADD, y, rest[-1])
        if out_cast is not None:
            y = b.cast(y, out_cast)
        return [y]

    return decompose(make_graph(inputs, body))


def conv_graph(x_shape, w_shape, dtype=F32, symbols=(), **attrs):
    inputs = {"x": TensorType(dtype, x_shape), "w": TensorType(dtype, w_shape)}
    return make_graph(inputs, lambda b, x, w: [b.op(Op.CONV, x, w, **attrs)], symbols=symbols)


def conv_attrs(stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), groups=1):
    return dict(strides=stride, pads=pads, dilations=dil, groups=groups)


CONV_CASES = {
    "3x3_same": ((2, 3, 9, 9), (8, 3, 3, 3), conv_attrs(pads=(1, 1, 1, 1))),
    "stride2_asym_pad": ((1, 4, 11, 10), (6, 4, 3, 3), conv_attrs(stride=(2, 2), pads=(0, 2, 1, 0))),
    "dilation": ((1, 2, 12, 12), (5, 2, 3, 2), conv_attrs(pads=(2, 2, 1, 0), dil=(2, 3))),
    "groups": ((1, 4, 10, 11), (6, 2, 3, 2), conv_attrs(stride=(2, 1), pads=(0, 2, 1, 0), dil=(2, 1), groups=2)),
    "1x1": ((2, 16, 5, 5), (32, 16, 1, 1), conv_attrs()),
    "one_output_position": ((3, 4, 3, 3), (8, 4, 3, 3), conv_attrs()),
    "depthwise": ((2, 6, 7, 7), (6, 1, 3, 3), conv_attrs(pads=(1, 1, 1, 1), groups=6)),
    "depthwise_multiplier": ((1, 3, 8, 9), (6, 1, 3, 3), conv_attrs(stride=(2, 2), pads=(1, 0, 0, 1), groups=3)),
}


def conv_bn_relu_graph(dtype, groups=1, c=8):
    """nn.Conv2d(bias) -> nn.BatchNorm2d (eval) -> ReLU, lowered to primitives as a model compiles."""
    cin_g = c // groups
    inputs = {
        "x": TensorType(dtype, (2, c, 7, 7)),
        "w": TensorType(dtype, (c, cin_g, 3, 3)),
        "bias": TensorType(dtype, (c,)),
        **{p: TensorType(dtype, (c,)) for p in ("mean", "var", "gamma", "beta")},
    }

    def body(b, x, w, bias, mean, var, gamma, beta):
        var = b.op(Op.ABS, var)  # a valid running variance
        y = b.op(Op.CONV2D, x, w, bias, **conv_attrs(pads=(1, 1, 1, 1), groups=groups))
        y = b.op(Op.BATCH_NORM, y, mean, var, gamma, beta, eps=1e-5)
        return [b.op(Op.RELU, y)]

    return decompose(make_graph(inputs, body))
