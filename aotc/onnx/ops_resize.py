"""ONNX Resize / Upsample -> one resampling step per resized axis.

ONNX resizes separably, one axis at a time, so each axis is a fixed linear map from its input length to its
output length. The importer computes that map's matrix at compile time by running ONNX's reference Resize on
an identity matrix (every mode, coordinate transform, cubic coefficient and antialias option comes out
exactly as the spec defines it), then applies it: a GATHER for nearest (the matrix only selects), a MATMUL
along the axis for linear and cubic. A dynamic resized axis takes the forms exporters write (``_resize_dynamic``).
GridSample (2-D) is torch's grid sampling, built as aotc/frontend/grid_sample.py builds it.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from aotc.errors import ShapeError
from aotc.frontend.grid_sample import grid_sample_value
from aotc.frontend.resample import resample_axis, scaled_length
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.ir.shapes import norm_axis
from aotc.ir.types import Value
from aotc.onnx.node import Known, OnnxNode, Operand
from aotc.onnx.ops_math import Converter, values

Importer = Any


def _axis_matrix(
    node: OnnxNode, attrs: dict[str, Any], n_in: int, scale: float | None, n_out: int | None, roi: tuple | None
) -> np.ndarray:
    """(out, in) matrix W plus the extrapolated rows, by resizing the identity along one axis."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    eye = np.eye(n_in, dtype=np.float64)
    names = [
        "x",
        "roi" if roi is not None else "",
        "scales" if n_out is None else "",
        "sizes" if n_out is not None else "",
    ]
    feeds: dict[str, np.ndarray] = {"x": eye}
    if roi is not None:
        feeds["roi"] = np.asarray([roi[0], roi[1]], np.float64)
    if n_out is None:
        feeds["scales"] = np.asarray([scale], np.float32)
    else:
        feeds["sizes"] = np.asarray([n_out], np.int64)
    # extrapolated rows come out all zero here; _resize_axis fills them with the extrapolation value
    attrs = {**attrs, "extrapolation_value": 0.0}
    proto = onnx.helper.make_node("Resize", names, ["y"], axes=[0], **attrs)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            (w,) = ReferenceEvaluator(proto, opsets={"": max(node.opset, 19)}).run(None, feeds)
    except Exception as e:  # the reference rejects an invalid attribute combination
        raise node.fail(f"cannot resize with these attributes: {e}") from None
    return np.asarray(w, np.float64)


def _resize_axis(imp: Importer, node: OnnxNode, x: Value, axis: int, w: np.ndarray, extrap: float) -> Value:
    b = imp.b
    n_out = w.shape[0]
    rows_used = np.abs(w).sum(axis=1) > 0
    selects = np.all((w == 0) | (w == 1)) and np.all(w.sum(axis=1) <= 1)
    if selects:
        idx = np.argmax(w, axis=1).astype(np.int64)
        y = b.op(Op.GATHER, x, imp.value(Known.of(idx), DType.int64), axis=axis)
    else:
        dt = x.type.dtype
        perm = tuple(d for d in range(x.type.rank) if d != axis) + (axis,)
        wt = imp.value(Known.of(np.ascontiguousarray(w.T).astype(np.float32)), dt)
        y = b.op(Op.MATMUL, b.permute(x, perm), wt)
        y = b.permute(y, tuple(perm.index(d) for d in range(x.type.rank)))
    if not rows_used.all() and extrap != 0.0:
        shape = [1] * x.type.rank
        shape[axis] = n_out
        outside = imp.value(Known.of((~rows_used).reshape(shape)), DType.bool)
        y = b.op(Op.WHERE, outside, imp.full(float(extrap), y.type.dtype), y)
    return y


def _resize_dynamic(
    imp: Importer, node: OnnxNode, x: Value, axis: int, attrs: dict[str, Any], scale: float | None, roi: tuple | None
) -> Value:
    """A dynamic axis has no matrix to precompute: its source coordinates are computed from an iota instead
    (aotc/frontend/resample.py, torch's rules), for the forms exporters write: nearest with asymmetric
    coordinates and floor (torch's nearest), linear with half_pixel, pytorch_half_pixel or align_corners, cubic
    with torch's coefficient -0.75 and half_pixel or align_corners; by a
    power-of-two scale, whose reciprocal is exact, so multiplying by it is ONNX's division by the scale."""
    n_in = x.type.shape[axis]
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    refuse = f"resizing dynamic dim {n_in} (axis {axis})"
    if scale is None or scale <= 0 or math.frexp(scale)[0] != 0.5:
        raise node.fail(
            f"{refuse} needs a power-of-two scale (2, 4, 0.5, ...), got {'sizes' if scale is None else scale}"
        )
    if roi is not None or attrs.get("antialias", 0) or attrs.get("exclude_outside", 0):
        raise node.fail(f"{refuse} with a roi, antialias or exclude_outside is not supported")
    if mode == "nearest" and ctm == "asymmetric" and attrs.get("nearest_mode", "round_prefer_floor") == "floor":
        form = ("nearest", False)
    elif mode == "linear" and (ctm == "half_pixel" or (ctm == "pytorch_half_pixel" and scale >= 1)):
        form = ("linear", False)  # pytorch_half_pixel differs only where an output length is 1
    elif mode == "linear" and ctm == "align_corners":
        form = ("linear", True)
    elif mode == "cubic" and attrs.get("cubic_coeff_a", -0.75) == -0.75 and ctm in ("half_pixel", "align_corners"):
        form = ("cubic", ctm == "align_corners")  # torch's bicubic
    else:
        raise node.fail(
            f"{refuse} with mode {mode!r} and coordinate_transformation_mode {ctm!r} is not supported (nearest with "
            "asymmetric and nearest_mode floor, linear with half_pixel, pytorch_half_pixel or align_corners, cubic "
            "with cubic_coeff_a -0.75 and half_pixel or align_corners are)"
        )
    try:
        n_out = scaled_length(n_in, scale, node.label)
        return resample_axis(imp.b, x, axis, n_out, form[0], form[1], scale)
    except ShapeError as e:
        raise node.fail(str(e)) from None


def _targets(
    imp: Importer, node: OnnxNode, x: Value, axes: tuple[int, ...]
) -> tuple[list[float | None], list[int | None]]:
    """Per resized axis: the scale, or the output size (ONNX gives one or the other)."""
    rank = x.type.rank
    modern = node.op_type == "Resize" and node.opset >= 11
    scales = node.known(2 if modern else 1, "scales")
    sizes = node.static_ints(3, "sizes") if modern else None
    if scales is not None and scales.array.size:
        s = [float(v) for v in scales.array.reshape(-1)]
        if len(s) == rank and len(axes) != rank:
            s = [s[a] for a in axes]
        return list(s), [None] * len(axes)
    if not sizes:
        raise ShapeError(f"{node.label}: Resize needs scales or sizes")
    sz = list(sizes)
    if len(sz) == rank and len(axes) != rank:
        sz = [sz[a] for a in axes]
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        return [None] * len(axes), sz
    dims = [x.type.shape[a] for a in axes]
    ratios = [o / d for o, d in zip(sz, dims)]
    common = min(ratios) if policy == "not_larger" else max(ratios)
    out = [int(common * d + 0.5) for d in dims]
    if any(int(common * d) != o for d, o in zip(dims, out)):
        raise node.fail(f"keep_aspect_ratio_policy={policy!r} with a scaled size that needs rounding")
    return [common] * len(axes), [None] * len(axes)


def _resize(imp: Importer, node: OnnxNode) -> list[Operand]:
    (x,) = values(imp, node, 0)
    rank = x.type.rank
    axes = tuple(norm_axis(a, rank) for a in (node.attr("axes") or range(rank)))
    mode = node.attr("mode", "nearest")
    if node.op_type == "Upsample" or node.opset < 11:
        attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        roi_all = None
    else:
        keys = (
            "mode",
            "coordinate_transformation_mode",
            "nearest_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "antialias",
        )
        attrs = {k: node.attrs[k] for k in keys if k in node.attrs}
        roi = node.known(1, "roi")
        roi_all = [float(v) for v in roi.array.reshape(-1)] if roi is not None and roi.array.size else None
    if mode != "nearest" and not x.type.dtype.is_float:
        raise node.fail(f"{mode} resizing needs a floating-point input")
    if node.op_type == "Upsample" and node.opset < 9:
        scales, sizes = [float(s) for s in node.attr("scales")], [None] * rank
    else:
        scales, sizes = _targets(imp, node, x, axes)
    y = x
    for i, a in enumerate(axes):
        n_in = x.type.shape[a]
        roi = None
        if roi_all is not None:
            n = len(roi_all) // 2
            j = a if n == rank else i
            roi = (roi_all[j], roi_all[n + j])
        if scales[i] is not None and scales[i] == 1.0 and roi is None:
            continue
        if not isinstance(n_in, int):
            y = _resize_dynamic(imp, node, y, a, attrs, scales[i], roi)
            continue
        w = _axis_matrix(node, attrs, n_in, scales[i], sizes[i], roi)
        y = _resize_axis(imp, node, y, a, w, float(attrs.get("extrapolation_value", 0.0)))
    return [y]


# GridSample's modes: opset 16's names, and opset 20's (which also allows N-D inputs; 2-D is what aotc samples)
_GRID_MODES = {
    "bilinear": "bilinear",
    "linear": "bilinear",
    "nearest": "nearest",
    "bicubic": "bicubic",
    "cubic": "bicubic",
}


def _grid_sample(imp: Importer, node: OnnxNode) -> list[Operand]:
    x, grid = values(imp, node, 0, 1)
    mode = node.attr("mode", "linear" if node.opset >= 20 else "bilinear")
    if mode not in _GRID_MODES:
        raise node.fail(f"GridSample mode {mode!r} is not supported ({', '.join(_GRID_MODES)} are)")
    padding, align = node.attr("padding_mode", "zeros"), bool(node.attr("align_corners", 0))
    try:
        return [grid_sample_value(imp.b, x, grid, _GRID_MODES[mode], padding, align)]
    except ShapeError as e:
        raise node.fail(str(e)) from None


CONVERTERS: dict[str, Converter] = {"Resize": _resize, "Upsample": _resize, "GridSample": _grid_sample}
