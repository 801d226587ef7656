"""ONNX Atan, Asin and Acos written with aotc primitives (computed in float32; about 1e-7 absolute error).

atan uses Cephes' ``atanf``: fold the argument into ``[0, tan(pi/8)]`` with ``atan(a) = pi/2 + atan(-1/a)`` or
``pi/4 + atan((a-1)/(a+1))``, then a degree-9 odd polynomial. asin and acos use half-angle forms whose
denominators are at least 1, so no lane divides by zero and neither loses accuracy near +-1.
"""

from __future__ import annotations

import math
from typing import Any

from aotc.ir.ops import Op
from aotc.ir.types import Value
from aotc.onnx.node import OnnxNode
from aotc.onnx.ops_math import Converter, activation

Importer = Any
_TAN_3PI_8 = 2.414213562373095
_TAN_PI_8 = 0.4142135623730950
# Cephes atanf: atan(t) ~= t + t * z * P(z), z = t*t, for |t| <= tan(pi/8)
_POLY = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)


def _c(imp: Importer, x: Value, v: float) -> Value:
    return imp.full(float(v), x.type.dtype)


def _odd(imp: Importer, x: Value, y: Value) -> Value:
    """``y`` with the sign of ``x`` (``y`` computed for ``|x|``)."""
    return imp.b.op(Op.WHERE, imp.b.op(Op.LT, x, _c(imp, x, 0.0)), imp.b.op(Op.NEG, y), y)


def atan_nonneg(imp: Importer, a: Value) -> Value:
    """atan(a) for a >= 0 (NaN stays NaN, +inf gives pi/2)."""
    b = imp.b
    one = _c(imp, a, 1.0)
    big = b.op(Op.GT, a, _c(imp, a, _TAN_3PI_8))
    mid = b.op(Op.GT, a, _c(imp, a, _TAN_PI_8))
    # max(a, 1) keeps the lanes that take another branch from dividing by zero
    inv = b.op(Op.NEG, b.op(Op.DIV, one, b.op(Op.MAXIMUM, a, one)))
    shifted = b.op(Op.DIV, b.op(Op.SUB, a, one), b.op(Op.ADD, a, one))
    t = b.op(Op.WHERE, big, inv, b.op(Op.WHERE, mid, shifted, a))
    base = b.op(Op.WHERE, big, _c(imp, a, math.pi / 2), b.op(Op.WHERE, mid, _c(imp, a, math.pi / 4), _c(imp, a, 0.0)))
    z = b.op(Op.MUL, t, t)
    p = _c(imp, a, _POLY[0])
    for coef in _POLY[1:]:
        p = b.op(Op.ADD, b.op(Op.MUL, p, z), _c(imp, a, coef))
    return b.op(Op.ADD, base, b.op(Op.ADD, t, b.op(Op.MUL, b.op(Op.MUL, p, z), t)))


def _atan(imp: Importer, node: OnnxNode, x: Value) -> Value:
    return _odd(imp, x, atan_nonneg(imp, imp.b.op(Op.ABS, x)))


def _one_minus_sq(imp: Importer, a: Value) -> Value:
    """sqrt((1 - a)(1 + a)): 1 - a*a without cancelling near a = 1 (NaN for a > 1, as asin/acos are)."""
    one = _c(imp, a, 1.0)
    return imp.b.op(Op.SQRT, imp.b.op(Op.MUL, imp.b.op(Op.SUB, one, a), imp.b.op(Op.ADD, one, a)))


def _asin(imp: Importer, node: OnnxNode, x: Value) -> Value:
    # asin(a) = 2 atan(a / (1 + sqrt(1 - a^2))): the tangent of the half angle
    b = imp.b
    a = b.op(Op.ABS, x)
    half = b.op(Op.DIV, a, b.op(Op.ADD, _c(imp, a, 1.0), _one_minus_sq(imp, a)))
    return _odd(imp, x, b.op(Op.MUL, atan_nonneg(imp, half), _c(imp, a, 2.0)))


def _acos(imp: Importer, node: OnnxNode, x: Value) -> Value:
    # acos(a) = 2 atan(sqrt((1 - a) / (1 + a))) for a = |x| >= 0; acos(-a) = pi - acos(a)
    b = imp.b
    a = b.op(Op.ABS, x)
    one = _c(imp, a, 1.0)
    r = b.op(
        Op.MUL,
        atan_nonneg(imp, b.op(Op.SQRT, b.op(Op.DIV, b.op(Op.SUB, one, a), b.op(Op.ADD, one, a)))),
        _c(imp, a, 2.0),
    )
    return b.op(Op.WHERE, b.op(Op.LT, x, _c(imp, x, 0.0)), b.op(Op.SUB, _c(imp, a, math.pi), r), r)


CONVERTERS: dict[str, Converter] = {
    "Atan": activation(_atan),
    "Asin": activation(_asin),
    "Acos": activation(_acos),
}
