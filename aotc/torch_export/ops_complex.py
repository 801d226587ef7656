"""Complex tensors in a torch program, carried as their two float parts: aotc's IR has no complex dtype, and the
complex arithmetic models use is a few float ops on each part (Llama 4's rotary embedding: ``torch.polar``, then
``view_as_complex(q) * freqs`` and ``view_as_real``).

A ``Complex`` lives only while the program is translated: every op that reads or makes one comes here
(``translation``), an op that only moves elements (a view, a slice, a concatenation) runs once on each part, and a
model output or a state that is complex is refused: aotc's outputs and states are real tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aotc.errors import UnsupportedError
from aotc.frontend import elementwise as ew
from aotc.frontend import functions as T
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.torch_export import ops_layout as L
from aotc.torch_export.table import ATEN

Cx = Any


@dataclass(frozen=True)
class Complex:
    """A complex tensor as its real and imaginary parts, two float tensors of one shape and dtype."""

    real: Tensor
    imag: Tensor


@dataclass(frozen=True)
class ComplexOf:
    """A complex dtype argument (``dtype=torch.complex64``), by the float dtype of its parts."""

    part: DType


# Ops that only move or pick elements, or sum them: each part goes through the real translation on its own.
PARTWISE = frozenset(
    {
        *("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.permute.default"),
        *("aten.transpose.int", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims"),
        *("aten.squeeze.default", "aten.expand.default", "aten.flatten.using_ints", "aten.slice.Tensor"),
        *("aten.select.int", "aten.narrow.default", "aten.index.Tensor", "aten.index_select.default"),
        *("aten.repeat.default", "aten.cat.default", "aten.stack.default", "aten.split.Tensor", "aten.chunk.default"),
        *("aten.split_with_sizes.default", "aten.unbind.int", "aten.clone.default", "aten.contiguous.default"),
        *("aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default", "aten.sum.dim_IntList"),
        "aten.mean.dim",
    }
)


def _part(x: Any, which: str) -> Any:
    if isinstance(x, Complex):
        return getattr(x, which)
    if isinstance(x, ComplexOf):
        return x.part
    if isinstance(x, (list, tuple)):
        return [_part(v, which) for v in x]
    return x


def _promoted(xs: Any) -> Any:
    """A list that holds a complex tensor with every real tensor in it made complex (``cat([c, r])``)."""
    if isinstance(xs, (list, tuple)) and any(isinstance(v, Complex) for v in xs):
        return [as_complex(v) for v in xs]
    return xs


def _zipped(re: Any, im: Any) -> Any:
    if isinstance(re, Tensor):
        return Complex(re, im)
    if isinstance(re, (list, tuple)):
        return type(re)(_zipped(a, b) for a, b in zip(re, im))
    return re


def partwise(name: str) -> Callable[..., Any]:
    fn = ATEN[name]

    def run(cx: Cx, *args: Any) -> Any:
        args = tuple(_promoted(a) for a in args)
        return _zipped(fn(cx, *_part(args, "real")), fn(cx, *_part(args, "imag")))

    return run


def as_complex(x: Any) -> Complex:
    """A complex value from a complex one, a real tensor (imaginary part zero) or a Python number."""
    if isinstance(x, Complex):
        return x
    if isinstance(x, Tensor):
        return Complex(x, T.zeros_like(x))
    if isinstance(x, (int, float, complex)):
        return Complex(complex(x).real, complex(x).imag)
    raise UnsupportedError(f"a complex op got {type(x).__name__} {x!r}, which is not a tensor or a number")


def _mul(a: Any, b: Any) -> Complex:
    """(a.re + i a.im)(b.re + i b.im); a real factor scales both parts."""
    if not isinstance(a, (Complex, complex)):
        y = as_complex(b)
        return Complex(y.real * a, y.imag * a)
    if not isinstance(b, (Complex, complex)):
        x = as_complex(a)
        return Complex(x.real * b, x.imag * b)
    x, y = as_complex(a), as_complex(b)
    return Complex(x.real * y.real - x.imag * y.imag, x.real * y.imag + x.imag * y.real)


def mul(cx: Cx, a: Any, b: Any) -> Complex:
    return _mul(a, b)


def div(cx: Cx, a: Any, b: Any, rounding_mode: str | None = None) -> Complex:
    if rounding_mode is not None:
        raise UnsupportedError(f"rounding_mode={rounding_mode!r} on a complex tensor: torch refuses it too")
    if not isinstance(b, (Complex, complex)):
        x = as_complex(a)
        return Complex(x.real / b, x.imag / b)
    y = as_complex(b)
    norm = y.real * y.real + y.imag * y.imag
    num = _mul(as_complex(a), Complex(y.real, -y.imag))
    return Complex(num.real / norm, num.imag / norm)


def add(cx: Cx, a: Any, b: Any, alpha: Any = 1) -> Complex:
    x, y = as_complex(a), as_complex(b if alpha == 1 else _mul(b, alpha))
    return Complex(x.real + y.real, x.imag + y.imag)


def sub(cx: Cx, a: Any, b: Any, alpha: Any = 1) -> Complex:
    x, y = as_complex(a), as_complex(b if alpha == 1 else _mul(b, alpha))
    return Complex(x.real - y.real, x.imag - y.imag)


def neg(cx: Cx, x: Complex) -> Complex:
    return Complex(-x.real, -x.imag)


def conj(cx: Cx, x: Complex) -> Complex:
    return Complex(x.real, -x.imag)


def exp(cx: Cx, x: Complex) -> Complex:
    scale = ew.unary(Op.EXP, x.real)
    return Complex(scale * ew.unary(Op.COS, x.imag), scale * ew.unary(Op.SIN, x.imag))


def abs_(cx: Cx, x: Complex) -> Tensor:
    return ew.unary(Op.SQRT, x.real * x.real + x.imag * x.imag)


def polar(cx: Cx, magnitude: Tensor, angle: Tensor) -> Complex:
    return Complex(magnitude * ew.unary(Op.COS, angle), magnitude * ew.unary(Op.SIN, angle))


def complex_(cx: Cx, real: Tensor, imag: Tensor) -> Complex:
    return Complex(real, imag)


def real(cx: Cx, x: Complex) -> Tensor:
    return x.real


def imag(cx: Cx, x: Complex) -> Tensor:
    return x.imag


def view_as_complex(cx: Cx, x: Tensor) -> Complex:
    """The last dim (of size 2) holds each element's real and imaginary part."""
    return Complex(L.select(cx, x, -1, 0), L.select(cx, x, -1, 1))


def view_as_real(cx: Cx, x: Complex) -> Tensor:
    return L.stack(cx, [x.real, x.imag], -1)


def to(cx: Cx, x: Any, dtype: Any = None, *rest: Any) -> Any:
    """A cast: to a complex dtype (a real tensor gets a zero imaginary part), or to a real one, which keeps the real
    part as torch does."""
    if dtype is None:
        return x
    if isinstance(dtype, ComplexOf):
        c = as_complex(x)
        return Complex(ew.cast(c.real, dtype.part), ew.cast(c.imag, dtype.part))
    return ew.cast(x.real if isinstance(x, Complex) else x, dtype)


def to_device(cx: Cx, x: Any, device: Any, dtype: Any = None, *rest: Any) -> Any:
    return to(cx, x, dtype)


def _dft(x: Complex, dim: int, forward: bool) -> Complex:
    """The discrete Fourier transform along ``dim`` as a product with its N×N matrix, cos(2πkn/N) ∓ i sin(2πkn/N):
    O(N²) where an FFT is O(N log N), but two matmuls a dim, and N is a model's sequence or hidden size (FNet)."""
    rank = x.real.ndim
    d = dim % rank
    xr, xi = (x.real, x.imag) if d == rank - 1 else (x.real.transpose(d, -1), x.imag.transpose(d, -1))
    n = xr.shape[-1]
    k = T.arange(0, n, 1, dtype=DType.int64)
    kn = ew.binary(Op.MOD, k.unsqueeze(1) * k.unsqueeze(0), n)  # reduced exactly in int64 before it is a float
    size = ew.cast(T.full((), n, dtype=DType.int64), xr.dtype)
    angle = ew.cast(kn, xr.dtype) * (2 * math.pi) / size
    cos, sin = ew.unary(Op.COS, angle), ew.unary(Op.SIN, angle)
    if forward:
        sin = -sin
    yr, yi = xr @ cos - xi @ sin, xr @ sin + xi @ cos
    return Complex(yr, yi) if d == rank - 1 else Complex(yr.transpose(d, -1), yi.transpose(d, -1))


def _scaled(x: Complex, dims: Sequence[int], normalization: int) -> Complex:
    """torch's fft normalization modes: 0 none, 1 by 1/sqrt(n), 2 by 1/n, n the product of the dims' sizes."""
    if normalization == 0:
        return x
    size = ew.cast(T.full((), 1, dtype=DType.int64), x.real.dtype)
    for d in dims:
        size = size * ew.cast(T.full((), x.real.shape[d], dtype=DType.int64), x.real.dtype)
    scale = ew.unary(Op.SQRT, size) if normalization == 1 else size
    return Complex(x.real / scale, x.imag / scale)


def fft_c2c(cx: Cx, x: Any, dim: Sequence[int], normalization: int, forward: bool) -> Complex:
    out = as_complex(x)
    for d in dim:
        out = _dft(out, d, forward)
    return _scaled(out, dim, normalization)


def fft_r2c(cx: Cx, x: Tensor, dim: Sequence[int], normalization: int, onesided: bool) -> Complex:
    """A real tensor's transform; ``onesided`` keeps the last dim's n//2 + 1 frequencies (the rest mirror them)."""
    out = fft_c2c(cx, x, dim, normalization, True)
    if not onesided:
        return out
    last = dim[-1]
    keep = x.shape[last] // 2 + 1
    return Complex(L.slice_(cx, out.real, last, 0, keep), L.slice_(cx, out.imag, last, 0, keep))


def identity(cx: Cx, x: Any) -> Any:
    return x


def no_op(cx: Cx, *args: Any) -> None:
    return None


COMPLEX: dict[str, Callable[..., Any]] = {
    "aten.mul.Tensor": mul,
    "aten.mul.Scalar": mul,
    "aten.div.Tensor": div,
    "aten.div.Scalar": div,
    "aten.div.Tensor_mode": div,
    "aten.add.Tensor": add,
    "aten.add.Scalar": add,
    "aten.sub.Tensor": sub,
    "aten.sub.Scalar": sub,
    "aten.neg.default": neg,
    "aten.conj.default": conj,
    "aten._conj.default": conj,
    "aten.conj_physical.default": conj,
    "aten.resolve_conj.default": identity,
    "aten.resolve_neg.default": identity,
    "aten.exp.default": exp,
    "aten.abs.default": abs_,
    "aten.polar.default": polar,
    "aten.complex.default": complex_,
    "aten.real.default": real,
    "aten.imag.default": imag,
    "aten.view_as_complex.default": view_as_complex,
    "aten.view_as_real.default": view_as_real,
    "aten._fft_c2c.default": fft_c2c,
    "aten._fft_r2c.default": fft_r2c,
    "aten._to_copy.default": to,
    "aten.to.dtype": to,
    "aten.to.dtype_layout": to,
    "aten.to.device": to_device,
    "aten._assert_tensor_metadata.default": no_op,
    **{name: partwise(name) for name in PARTWISE},
}


def translation(name: str, where: str) -> Callable[..., Any]:
    """The translation of ATen op ``name`` where it reads or makes a complex tensor."""
    fn = COMPLEX.get(name)
    if fn is None:
        arithmetic = sorted({n.split(".")[1] for n in COMPLEX.keys() - PARTWISE if n.split(".")[1][0] not in "_t"})
        raise UnsupportedError(
            f"{where}{name} on a complex tensor is not supported by aotc (it carries complex tensors as their float "
            f"parts through views, slices, cat, stack, sum, mean, casts and {', '.join(arithmetic)})"
        )
    return fn


def is_complex_op(name: str) -> bool:
    return name in COMPLEX


def touches_complex(node: Any) -> bool:
    """Whether the FX node reads or makes a complex tensor (by torch's example values)."""
    vals: Sequence[Any] = [node.meta.get("val"), *(a.meta.get("val") for a in node.all_input_nodes)]
    return any(getattr(getattr(v, "dtype", None), "is_complex", False) for v in vals)
