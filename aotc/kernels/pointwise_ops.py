"""Each elementwise primitive as a Triton expression over already-computed operands.

Semantics follow the op table's numpy references (aotc/ir/ops/elementwise.py): half-precision operands
are computed in float32 and rounded once per op, integer division truncates toward zero with x / 0 == 0,
integer powers wrap as numpy's (negative exponents as torch's), ``maximum``/``minimum`` propagate NaN.
Only ``triton.language`` is used, no libdevice, so the kernels also run under the Triton interpreter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op

TL_DTYPE = {
    DType.float32: "tl.float32",
    DType.float16: "tl.float16",
    DType.bfloat16: "tl.bfloat16",
    DType.int32: "tl.int32",
    DType.int64: "tl.int64",
    DType.bool: "tl.int1",
}
HALF = frozenset({DType.float16, DType.bfloat16})

_NAN_ALL = "propagate_nan=tl.PropagateNan.ALL"
Bind = Callable[[str], str]


def _inline(expr: str) -> str:
    return f"({expr})"


def literal(v: float | int | bool, dtype: DType) -> str:
    """A Python literal Triton folds at compile time (inf and NaN included)."""
    if dtype is DType.bool:
        # True/False, not 1/0: Triton types a Python bool as int1, so `True & (x >= 0)` stays a mask where
        # `1 & (x >= 0)` would be an int32 that tl.where then warns about as a condition
        return "True" if v else "False"
    if dtype.is_int:
        return str(int(v))
    f = float(v)
    if math.isnan(f):
        return 'float("nan")'
    if math.isinf(f):
        return 'float("inf")' if f > 0 else '-float("inf")'
    return repr(f)


def is_literal(text: str) -> bool:
    """A Python number Triton folds (as ``literal`` writes them): it takes the other operand's type."""
    return bool(_NUMBER.fullmatch(text))


_NUMBER = re.compile(r'-?(\d+(\.\d*)?(e[-+]?\d+)?|float\("(nan|inf)"\))|True|False')


def _tanh(x: str, bind: Bind) -> str:
    # tanh from exp of -2|x| never overflows; a short series keeps relative accuracy near 0.
    ax = bind(f"tl.abs({x})")
    e = bind(f"tl.exp(-2.0 * {ax})")
    x2 = bind(f"{x} * {x}")
    small = bind(
        f"{x} * (1.0 + {x2} * (-0.3333333333333333 + {x2} * (0.13333333333333333 - {x2} * 0.05396825396825397)))"
    )
    big = bind(f"tl.where({x} < 0, -1.0, 1.0) * (1.0 - {e}) / (1.0 + {e})")
    return f"tl.where({ax} < 0.0625, {small}, {big})"


# Cephes' asinf: asin(t) ~= t + t * z * P(z), z = t*t, for |t| <= 0.5 (2.5e-7 relative error in float32)
_ASIN_POLY = (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1)
# Cephes' atanf: atan(t) ~= t + t * z * P(z), z = t*t, for |t| <= tan(pi/8)
_ATAN_POLY = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
_PI, _PI_2, _PI_4 = repr(math.pi), repr(math.pi / 2), repr(math.pi / 4)


def _odd_series(t: str, z: str, poly: tuple[float, ...]) -> str:
    """``t + t * z * P(z)``, P by Horner's rule from its leading coefficient."""
    p = repr(poly[0])
    for c in poly[1:]:
        p = f"({p} * {z} + {c!r})"
    return f"{t} + {t} * {z} * {p}"


def _asin_parts(x: str, bind: Bind) -> tuple[str, str]:
    """``(big, p)``: whether |x| > 0.5, and ``p = asin(t)`` for ``t = sqrt((1 - |x|) / 2)`` there, else for
    ``t = x`` (the half-angle form keeps the series' argument within 0.5, and 1 - |x| is exact near 1). NaN and
    |x| > 1 (the square root of a negative) come out NaN, as torch's."""
    a = bind(f"tl.abs({x})")
    big = bind(f"{a} > 0.5")
    z = bind(f"tl.where({big}, 0.5 * (1.0 - {a}), {x} * {x})")
    t = bind(f"tl.where({big}, tl.sqrt({z}), {x})")
    return big, bind(_odd_series(t, z, _ASIN_POLY))


def _asin(x: str, bind: Bind) -> str:
    # asin(x) = sign(x) * (pi/2 - 2 asin(sqrt((1 - |x|) / 2))) for |x| > 0.5; the series keeps -0.0 below that
    big, p = _asin_parts(x, bind)
    return f"tl.where({big}, tl.where({x} < 0, 2.0 * {p} - {_PI_2}, {_PI_2} - 2.0 * {p}), {p})"


def _acos(x: str, bind: Bind) -> str:
    # acos(x) = 2 asin(sqrt((1 - x) / 2)) for x > 0.5, pi - that for x < -0.5, pi/2 - asin(x) between
    big, p = _asin_parts(x, bind)
    return f"tl.where({big}, tl.where({x} < 0, {_PI} - 2.0 * {p}, 2.0 * {p}), {_PI_2} - {p})"


def _atan(x: str, bind: Bind) -> str:
    # Fold |x| into [0, tan(pi/8)] with atan(a) = pi/2 + atan(-1/a) or pi/4 + atan((a-1)/(a+1)); the lanes that
    # take no fold keep x's sign in t. A lane's 1/0 in a branch it does not take is never read.
    a = bind(f"tl.abs({x})")
    far = bind(f"{a} > 2.414213562373095")
    mid = bind(f"{a} > 0.41421356237309503")
    t = bind(f"tl.where({far}, -1.0 / {a}, tl.where({mid}, ({a} - 1.0) / ({a} + 1.0), {x}))")
    r = bind(_odd_series(t, bind(f"{t} * {t}"), _ATAN_POLY))
    folded = bind(f"tl.where({far}, {_PI_2}, {_PI_4}) + {r}")
    # P(0) < 0 makes the series' -0.0 + 0.0 a +0.0: a zero is its own atan
    return f"tl.where({mid}, tl.where({x} < 0, -{folded}, {folded}), tl.where({x} == 0, {x}, {r}))"


def _rint(x: str, bind: Bind) -> str:
    # round half to even; values of magnitude >= 2**23 are already integers
    r = bind(f"tl.floor({x} + 0.5)")
    tie_odd = bind(f"(({r} - {x}) == 0.5) & (({r} - 2.0 * tl.floor({r} * 0.5)) != 0.0)")
    return f"tl.where(tl.abs({x}) >= 8388608.0, {x}, tl.where({tie_odd}, {r} - 1.0, {r}))"


def _pow(a: str, b: str, bind: Bind) -> str:
    mag = bind(f"tl.exp2({b} * tl.log2(tl.abs({a})))")
    b_int = bind(f"tl.floor({b}) == {b}")
    b_odd = bind(f"{b_int} & ((tl.floor({b} * 0.5) * 2.0) != {b})")
    neg = bind(f"tl.where({b_int}, tl.where({b_odd}, -{mag}, {mag}), float('nan'))")
    return f"tl.where({b} == 0.0, 1.0, tl.where({a} < 0, {neg}, {mag}))"


def _int_pow(a: str, b: str, dt: DType, bind: Bind) -> str:
    """The reference's integer power: exact modulo 2**bits (products wrap, as numpy's), by squaring; a negative
    exponent gives 0, except 1 for a base of 1 and +-1 for a base of -1 (torch's rule)."""
    if is_literal(a):
        a = f"tl.full([], {a}, {TL_DTYPE[dt]})"  # a typed base: its squares wrap instead of growing
    if is_literal(b):
        return _int_pow_by(a, int(b), dt, bind)
    if bind is _inline:
        raise UnsupportedError("integer pow by a computed exponent needs its squares bound to variables")
    e = bind(f"tl.maximum({b}, 0)")
    p = bind(a)
    r = bind(f"tl.where(({e} & 1) != 0, {p}, 1)")
    for k in range(1, 8 * dt.itemsize - 1):  # the sign bit of e is 0
        p = bind(f"{p} * {p}")
        r = bind(f"tl.where((({e} >> {k}) & 1) != 0, {r} * {p}, {r})")
    return f"tl.where({b} < 0, {_int_pow_negative(a, f'tl.where(({b} & 1) != 0, -1, 1)', dt)}, {r})"


def _int_pow_by(a: str, e: int, dt: DType, bind: Bind) -> str:
    """``a`` to a constant power: square-and-multiply, unrolled."""
    if e < 0:
        return _int_pow_negative(a, "-1" if e % 2 else "1", dt)
    r, p = None, bind(a)
    while e:
        if e & 1:
            r = p if r is None else bind(f"{r} * {p}")
        e >>= 1
        if e:
            p = bind(f"{p} * {p}")
    return f"({a} * 0 + 1)" if r is None else r


def _int_pow_negative(a: str, minus_one: str, dt: DType) -> str:
    """``a`` to a negative power: ``minus_one`` is what -1 gives (-1 for an odd power, else 1)."""
    return f"tl.where({a} == 1, 1, tl.where({a} == -1, {minus_one}, 0)).to({TL_DTYPE[dt]})"


def _float_fmod(a: str, b: str, bind: Bind) -> str:
    """C's fmod: a - trunc(a / b) * b, with the sign of ``a``. Where the quotient truncates to 0 (|a| < |b|, an
    infinite ``b`` included) the result is ``a`` itself, which ``a - 0 * inf`` would make NaN; an exact multiple
    gives a zero of ``a``'s sign (``a * 0.0``)."""
    q = bind(f"{a} / {b}")
    t = bind(f"tl.where({q} < 0, tl.ceil({q}), tl.floor({q}))")
    r = bind(f"{a} - {t} * {b}")
    return f"tl.where({t} == 0, {a}, tl.where({r} == 0, {a} * 0.0, {r}))"


def _float_mod(r: str, b: str, bind: Bind) -> str:
    """numpy's floored mod from the fmod remainder ``r``: a remainder whose sign differs from ``b``'s moves by
    ``b`` (so -3 mod inf is inf), and a zero takes ``b``'s sign."""
    r = bind(r)
    moved = f"tl.where(({r} < 0) != ({b} < 0), {r} + {b}, {r})"
    # The zero's sign from arithmetic, not a -0.0 literal: Triton 3.6 folds a constant equal to 0 into +0.0.
    return f"tl.where({r} != 0, {moved}, tl.abs({r}) * tl.where({b} < 0, -1.0, 1.0))"


def _int_div(a: str, b: str) -> str:
    return f"tl.where({b} == 0, 0, {a} // tl.where({b} == 0, 1, {b}))"


def _int_mod(a: str, b: str, floored: bool) -> str:
    r = f"({a} % tl.where({b} == 0, 1, {b}))"
    if floored:
        r = f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})"
    return f"tl.where({b} == 0, 0, {r})"


_UNARY_FLOAT = {
    Op.EXP: "tl.exp({0})",
    Op.LOG: "tl.log({0})",
    Op.SQRT: "tl.sqrt({0})",
    Op.RSQRT: "1.0 / tl.sqrt({0})",
    Op.RECIPROCAL: "1.0 / {0}",
    Op.SIN: "tl.sin({0})",
    Op.COS: "tl.cos({0})",
    Op.ERF: "tl.erf({0})",
    Op.FLOOR: "tl.floor({0})",
    Op.CEIL: "tl.ceil({0})",
}
_INVERSE_TRIG = {Op.ACOS: _acos, Op.ASIN: _asin, Op.ATAN: _atan}
_COMPARE = {Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}
_LOGIC = {Op.AND: "&", Op.OR: "|", Op.XOR: "^"}
_ARITH = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*"}


def elementwise(op: Op, args: list[str], dtype: DType, out: DType, bind: Bind = _inline) -> str:
    """The Triton expression of ``op`` on operand variables ``args`` of element type ``dtype``. ``bind`` names a
    subexpression the expression uses more than once (a builder binds it to a variable); by default it is
    repeated inline."""
    if dtype in HALF and op not in _COMPARE and op not in (Op.WHERE, Op.CAST):
        args = [a if is_literal(a) else f"{a}.to(tl.float32)" for a in args]
        return f"({_expr(op, args, DType.float32, bind)}).to({TL_DTYPE[out]})"
    return _expr(op, args, dtype, bind)


def _expr(op: Op, a: list[str], dt: DType, bind: Bind = _inline) -> str:
    if op in _UNARY_FLOAT:
        return _UNARY_FLOAT[op].format(*a)
    if op is Op.TANH:
        return _tanh(a[0], bind)
    if op in _INVERSE_TRIG:
        return _INVERSE_TRIG[op](a[0], bind)
    if op is Op.ROUND:
        return _rint(a[0], bind)
    if op is Op.NEG:
        return f"-{a[0]}"
    if op is Op.ABS:
        return f"tl.abs({a[0]})"
    if op is Op.SIGN:
        if dt.is_float:
            return f"tl.where({a[0]} > 0, 1.0, tl.where({a[0]} < 0, -1.0, {a[0]}))"
        return f"tl.where({a[0]} > 0, 1, tl.where({a[0]} < 0, -1, 0)).to({TL_DTYPE[dt]})"
    if op is Op.NOT:  # bool's not as a comparison, which the source-bounds check reads as a mask's negation
        return f"{a[0]} == 0" if dt is DType.bool else f"~{a[0]}"
    if op is Op.ISNAN:
        return f"{a[0]} != {a[0]}"
    if op is Op.ISINF:
        return f"tl.abs({a[0]}) == float('inf')"
    if op in _ARITH:
        return f"{a[0]} {_ARITH[op]} {a[1]}"
    if op in _COMPARE:
        return f"{a[0]} {_COMPARE[op]} {a[1]}"
    if op in _LOGIC:
        return f"{a[0]} {_LOGIC[op]} {a[1]}"
    if op is Op.DIV:
        return _int_div(a[0], a[1]) if dt.is_int else f"{a[0]} / {a[1]}"
    if op in (Op.MAXIMUM, Op.MINIMUM):
        fn = "tl.maximum" if op is Op.MAXIMUM else "tl.minimum"
        return f"{fn}({a[0]}, {a[1]}, {_NAN_ALL})" if dt.is_float else f"{fn}({a[0]}, {a[1]})"
    if op in (Op.MOD, Op.FMOD):
        if dt.is_int:
            return _int_mod(a[0], a[1], floored=op is Op.MOD)
        r = _float_fmod(a[0], a[1], bind)
        return r if op is Op.FMOD else _float_mod(r, a[1], bind)
    if op is Op.POW:
        return _int_pow(a[0], a[1], dt, bind) if dt.is_int else _pow(a[0], a[1], bind)
    if op is Op.WHERE:
        # A constant condition is written as a bool: Triton deprecates (and will refuse) an int condition.
        cond = {"0": "False", "1": "True"}.get(a[0], a[0])
        return f"tl.where({cond}, {a[1]}, {a[2]})"
    raise UnsupportedError(f"no Triton expression for op {op.value}")


def cast(x: str, src: DType, dst: DType) -> str:
    """``x`` converted as the cast reference does: float -> int truncates with NaN -> 0, -> bool is != 0."""
    if src is dst:
        return x
    if is_literal(x):  # a folded constant (a FULL, an int scalar of the model): `1.to(...)` is not Python
        return literal(_cast_value(_literal_value(x), dst), dst)
    if dst is DType.bool:
        return f"{x} != 0"
    if src.is_float and dst.is_int:
        return f"tl.where({x} != {x}, 0.0, {x}).to({TL_DTYPE[dst]})"
    return f"{x}.to({TL_DTYPE[dst]})"


def _literal_value(text: str) -> float | int | bool:
    """The number ``literal`` wrote as ``text``."""
    if text in ("True", "False"):
        return text == "True"
    if "nan" in text:
        return math.nan
    if "inf" in text:
        return -math.inf if text.startswith("-") else math.inf
    return float(text) if any(c in text for c in ".e") else int(text)


def _cast_value(v: float | int | bool, dst: DType) -> float | int | bool:
    """``v`` converted as ``cast`` converts a tensor: -> bool is != 0, float -> int truncates with NaN -> 0."""
    if dst is DType.bool:
        return v != 0
    if dst.is_int:
        if isinstance(v, float) and math.isinf(v):
            raise UnsupportedError(f"no Triton expression for the constant {v} cast to {dst.value}")
        return 0 if isinstance(v, float) and math.isnan(v) else int(v)
    return float(v)
