"""The one table of ATen translations: each ATen overload (and each Python function torch.export leaves in a graph
for size arithmetic) -> the function that builds it with aotc's frontend.

Every op in this table is kept whole when torch decomposes an ExportedProgram (``decomposition_table``): SDPA,
linear, layer norm, GELU, convolution, batch norm... reach aotc as themselves, so lowering sees attention as
attention (torch's own SDPA decomposition also breaks GPT-2 exports with a view error). Every other op is
decomposed by torch to core ATen first, and core ATen ops are rows here too. Adding an op is one row.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aotc.ir.ops import Op
from aotc.torch_export import ops_layout as L
from aotc.torch_export import ops_math as M
from aotc.torch_export import ops_nn as N
from aotc.torch_export import ops_scatter as W
from aotc.torch_export import ops_sym as S

Translation = Callable[..., Any]

ATEN: dict[str, Translation] = {
    # -- arithmetic
    "aten.add.Tensor": M.add,
    "aten.add.Scalar": M.add,
    "aten.sub.Tensor": M.sub,
    "aten.sub.Scalar": M.sub,
    "aten.rsub.Tensor": M.rsub,
    "aten.rsub.Scalar": M.rsub,
    "aten.mul.Tensor": M.binary(Op.MUL),
    "aten.mul.Scalar": M.binary(Op.MUL),
    "aten.div.Tensor": M.div,
    "aten.div.Scalar": M.div,
    "aten.div.Tensor_mode": M.div,
    "aten.div.Scalar_mode": M.div,
    "aten.floor_divide.default": M.floor_divide,
    "aten.remainder.Tensor": M.binary(Op.MOD),
    "aten.remainder.Scalar": M.binary(Op.MOD),
    "aten.fmod.Tensor": M.binary(Op.FMOD),
    "aten.fmod.Scalar": M.binary(Op.FMOD),
    "aten.pow.Tensor_Scalar": M.pow_,
    "aten.pow.Tensor_Tensor": M.pow_,
    "aten.pow.Scalar": M.pow_,
    "aten.maximum.default": M.binary(Op.MAXIMUM),
    "aten.minimum.default": M.binary(Op.MINIMUM),
    "aten.neg.default": M.unary(Op.NEG),
    "aten.abs.default": M.unary(Op.ABS),
    "aten.exp.default": M.unary(Op.EXP),
    "aten.log.default": M.unary(Op.LOG),
    "aten.log1p.default": M.log1p,
    "aten.expm1.default": M.expm1,
    "aten.sqrt.default": M.unary(Op.SQRT),
    "aten.rsqrt.default": M.unary(Op.RSQRT),
    "aten.reciprocal.default": M.unary(Op.RECIPROCAL),
    "aten.sin.default": M.unary(Op.SIN),
    "aten.cos.default": M.unary(Op.COS),
    "aten.tanh.default": M.unary(Op.TANH),
    "aten.erf.default": M.unary(Op.ERF),
    "aten.acos.default": M.unary(Op.ACOS),
    "aten.asin.default": M.unary(Op.ASIN),
    "aten.atan.default": M.unary(Op.ATAN),
    "aten.floor.default": M.unary(Op.FLOOR),
    "aten.ceil.default": M.unary(Op.CEIL),
    "aten.round.default": M.unary(Op.ROUND),
    "aten.sign.default": M.unary(Op.SIGN),
    "aten.isnan.default": M.unary(Op.ISNAN),
    "aten.isinf.default": M.unary(Op.ISINF),
    "aten.clamp.default": M.clamp,
    "aten.clamp.Tensor": M.clamp,
    "aten.clamp_min.default": M.clamp_min,
    "aten.clamp_max.default": M.clamp_max,
    "aten.where.self": M.where,
    "aten.where.ScalarSelf": M.where,
    "aten.where.ScalarOther": M.where,
    "aten.where.Scalar": M.where,
    "aten.masked_fill.Scalar": M.masked_fill,
    "aten.masked_fill.Tensor": M.masked_fill,
    # -- activations (kept whole: one op each in aotc's graph)
    "aten.relu.default": M.unary(Op.RELU),
    "aten.sigmoid.default": M.unary(Op.SIGMOID),
    "aten.gelu.default": M.gelu,
    "aten.silu.default": M.silu,
    "aten.hardtanh.default": M.hardtanh,
    "aten.relu6.default": lambda cx, x: M.hardtanh(cx, x, 0.0, 6.0),
    "aten.hardsigmoid.default": M.hardsigmoid,
    "aten.hardswish.default": M.hardswish,
    "aten.leaky_relu.default": M.leaky_relu,
    "aten.elu.default": M.elu,
    "aten.softplus.default": M.softplus,
    "aten.softmax.int": M.softmax,
    "aten._softmax.default": M.softmax_internal,
    "aten.log_softmax.int": M.log_softmax,
    "aten._log_softmax.default": M.log_softmax_internal,
    # -- comparisons and logic
    "aten.eq.Tensor": M.binary(Op.EQ),
    "aten.eq.Scalar": M.binary(Op.EQ),
    "aten.ne.Tensor": M.binary(Op.NE),
    "aten.ne.Scalar": M.binary(Op.NE),
    "aten.lt.Tensor": M.binary(Op.LT),
    "aten.lt.Scalar": M.binary(Op.LT),
    "aten.le.Tensor": M.binary(Op.LE),
    "aten.le.Scalar": M.binary(Op.LE),
    "aten.gt.Tensor": M.binary(Op.GT),
    "aten.gt.Scalar": M.binary(Op.GT),
    "aten.ge.Tensor": M.binary(Op.GE),
    "aten.ge.Scalar": M.binary(Op.GE),
    "aten.logical_and.default": M.logical(Op.AND),
    "aten.logical_or.default": M.logical(Op.OR),
    "aten.logical_xor.default": M.logical(Op.XOR),
    "aten.logical_not.default": M.logical_not,
    "aten.bitwise_and.Tensor": M.bitwise(Op.AND),
    "aten.bitwise_and.Scalar": M.bitwise(Op.AND),
    "aten.bitwise_and.Scalar_Tensor": M.bitwise(Op.AND),
    "aten.__and__.Tensor": M.bitwise(Op.AND),
    "aten.__and__.Scalar": M.bitwise(Op.AND),
    "aten.bitwise_or.Tensor": M.bitwise(Op.OR),
    "aten.bitwise_or.Scalar": M.bitwise(Op.OR),
    "aten.bitwise_or.Scalar_Tensor": M.bitwise(Op.OR),
    "aten.__or__.Tensor": M.bitwise(Op.OR),
    "aten.__or__.Scalar": M.bitwise(Op.OR),
    "aten.bitwise_xor.Tensor": M.bitwise(Op.XOR),
    "aten.bitwise_xor.Scalar": M.bitwise(Op.XOR),
    "aten.bitwise_xor.Scalar_Tensor": M.bitwise(Op.XOR),
    "aten.__xor__.Tensor": M.bitwise(Op.XOR),
    "aten.__xor__.Scalar": M.bitwise(Op.XOR),
    "aten.bitwise_not.default": M.bitwise_not,
    # -- dtypes, copies and no-ops at inference
    "aten._to_copy.default": M.to_copy,
    "aten.to.dtype": M.to_dtype,
    "aten.to.dtype_layout": M.to_copy,
    "aten.to.device": M.to_device,
    "aten.to.other": M.to_other,
    "aten.type_as.default": M.type_as,
    "aten.clone.default": M.identity,
    "aten.contiguous.default": M.identity,
    "aten.alias.default": M.identity,
    "aten.detach.default": M.identity,
    "aten.lift_fresh_copy.default": M.identity,
    "aten.dropout.default": M.dropout,
    "aten.native_dropout.default": M.native_dropout,
    "aten.feature_dropout.default": M.dropout,
    "aten.alpha_dropout.default": M.dropout,
    # -- reductions
    "aten.sum.dim_IntList": M.sum_,
    "aten.sum.default": M.sum_all,
    "aten.mean.dim": M.mean,
    "aten.mean.default": M.mean_all,
    "aten.prod.dim_int": M.prod,
    "aten.amax.default": M.amax,
    "aten.amin.default": M.amin,
    "aten.max.dim": M.max_dim,
    "aten.min.dim": M.min_dim,
    "aten.max.default": M.max_all,
    "aten.min.default": M.min_all,
    "aten.argmax.default": M.argmax,
    "aten.topk.default": M.topk,
    "aten.bucketize.Tensor": M.bucketize,
    "aten.argmin.default": M.argmin,
    "aten.var.correction": M.var,
    "aten.std.correction": M.std,
    "aten.any.dim": M.any_,
    "aten.any.default": M.any_,
    "aten.all.dim": M.all_,
    "aten.all.default": M.all_,
    "aten.logsumexp.default": M.logsumexp,
    "aten.cumsum.default": M.cumsum,
    "aten.linalg_vector_norm.default": M.vector_norm,
    "aten.norm.Scalar": M.norm,
    "aten.norm.ScalarOpt_dim": M.norm,
    "aten.norm.ScalarOpt_dtype": lambda cx, x, p, dtype: M.norm(cx, x, p, None, False, dtype),
    "aten.norm.ScalarOpt_dim_dtype": M.norm,
    "aten.linalg_matrix_norm.default": M.matrix_norm,
    "aten.linalg_matrix_norm.str_ord": M.matrix_norm,
    # -- creation
    "aten.full.default": M.full,
    "aten.zeros.default": M.zeros,
    "aten.ones.default": M.ones,
    "aten.empty.memory_format": M.zeros,
    "aten.new_full.default": M.new_full,
    "aten.new_zeros.default": M.new_value(0),
    "aten.new_ones.default": M.new_value(1),
    "aten.new_empty.default": M.new_value(0),
    "aten.full_like.default": M.full_like,
    "aten.zeros_like.default": M.like_value(0),
    "aten.ones_like.default": M.like_value(1),
    "aten.empty_like.default": M.like_value(0),
    "aten.scalar_tensor.default": M.scalar_tensor,
    "aten.arange.default": M.arange,
    "aten.eye.default": M.eye,
    "aten.eye.m": M.eye_m,
    "aten.arange.start": M.arange_start,
    "aten.arange.start_step": M.arange_step,
    "aten.fill.Scalar": L.fill_scalar,
    "aten.fill.Tensor": L.copy,  # a 0-d tensor broadcast over x, in its dtype
    "aten.copy.default": L.copy,
    # -- layout
    "aten.view.default": L.view,
    "aten._unsafe_view.default": L.view,
    "aten.reshape.default": L.view,
    "aten.permute.default": L.permute,
    "aten.transpose.int": L.transpose,
    "aten.t.default": L.t,
    "aten.unsqueeze.default": L.unsqueeze,
    "aten.squeeze.dim": L.squeeze,
    "aten.squeeze.dims": L.squeeze,
    "aten.squeeze.default": L.squeeze,
    "aten.expand.default": L.expand,
    "aten.expand_as.default": L.expand_as,
    "aten.flatten.using_ints": L.flatten,
    "aten.unflatten.int": L.unflatten,
    "aten.cat.default": L.cat,
    "aten.stack.default": L.stack,
    "aten.split.Tensor": L.split,
    "aten.split_with_sizes.default": L.split_with_sizes,
    "aten.chunk.default": L.chunk,
    "aten.unbind.int": L.unbind,
    "aten.slice.Tensor": L.slice_,
    "aten.select.int": L.select,
    "aten.narrow.default": L.narrow,
    "aten.flip.default": L.flip,
    "aten.roll.default": L.roll,
    "aten.repeat.default": L.repeat,
    "aten.repeat_interleave.self_int": L.repeat_interleave,
    "aten.diff.default": L.diff,
    "aten.tril.default": L.tril,
    "aten.triu.default": L.triu,
    "aten.constant_pad_nd.default": L.constant_pad_nd,
    "aten.pad.default": L.pad,
    "aten.index.Tensor": L.index,
    "aten.index_select.default": L.index_select,
    "aten.gather.default": L.gather,
    "aten.scatter.value": L.scatter_value,
    "aten.slice_scatter.default": L.slice_scatter,
    "aten.select_scatter.default": L.select_scatter,
    "aten.index_put.default": W.index_put,
    "aten.scatter.src": W.scatter_src,
    "aten.scatter_add.default": W.scatter_add,
    "aten.scatter_reduce.two": W.scatter_reduce,
    # -- neural-network ops aotc keeps whole
    "aten.linear.default": N.linear,
    "aten.addmm.default": N.addmm,
    "aten.mm.default": N.matmul,
    "aten.bmm.default": N.matmul,
    "aten.matmul.default": N.matmul,
    "aten.baddbmm.default": N.baddbmm,
    "aten.embedding.default": N.embedding,
    "aten.layer_norm.default": N.layer_norm,
    "aten.native_layer_norm.default": N.native_layer_norm,
    "aten.rms_norm.default": N.rms_norm,
    "aten.group_norm.default": N.group_norm,
    "aten.batch_norm.default": N.batch_norm,
    "aten._native_batch_norm_legit_no_training.default": N.batch_norm_no_training,
    "aten._native_batch_norm_legit.no_stats": N.batch_norm_batch_stats,
    "aten.convolution.default": N.convolution,
    "aten.conv1d.default": N.conv(1),
    "aten.conv2d.default": N.conv(2),
    "aten.conv3d.default": N.conv(3),
    "aten.conv1d.padding": N.conv(1),
    "aten.conv2d.padding": N.conv(2),
    "aten.conv3d.padding": N.conv(3),
    "aten.conv_transpose1d.default": N.conv_transpose(1),
    "aten.conv_transpose2d.input": N.conv_transpose(2),
    "aten.max_pool2d.default": N.max_pool2d,
    "aten.max_pool2d_with_indices.default": N.max_pool2d_with_indices,
    "aten.avg_pool2d.default": N.avg_pool2d,
    "aten.adaptive_avg_pool2d.default": N.adaptive_avg_pool2d,
    "aten._adaptive_avg_pool2d.default": N.adaptive_avg_pool2d,
    "aten.max_pool3d.default": N.max_pool3d,
    "aten.max_pool3d_with_indices.default": N.max_pool3d_with_indices,
    "aten.avg_pool3d.default": N.avg_pool3d,
    "aten.adaptive_avg_pool3d.default": N.adaptive_avg_pool3d,
    "aten._adaptive_avg_pool3d.default": N.adaptive_avg_pool3d,
    "aten.upsample_nearest1d.vec": N.upsample("nearest1d", False, True),
    "aten.upsample_nearest1d.default": N.upsample("nearest1d", False, False),
    "aten.upsample_nearest2d.vec": N.upsample("nearest2d", False, True),
    "aten.upsample_nearest2d.default": N.upsample("nearest2d", False, False),
    "aten.upsample_linear1d.vec": N.upsample("linear1d", True, True),
    "aten.upsample_linear1d.default": N.upsample("linear1d", True, False),
    "aten.upsample_bilinear2d.vec": N.upsample("bilinear2d", True, True),
    "aten.upsample_bilinear2d.default": N.upsample("bilinear2d", True, False),
    "aten.upsample_bicubic2d.vec": N.upsample("bicubic2d", True, True),
    "aten.upsample_bicubic2d.default": N.upsample("bicubic2d", True, False),
    "aten.grid_sampler_2d.default": N.grid_sampler_2d,
    "aten.scaled_dot_product_attention.default": N.sdpa,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": N.sdpa_flash_cpu,
    # -- sizes, tuples and asserts
    "aten.sym_size.int": S.sym_size,
    "aten.sym_numel.default": S.sym_numel,
    "aten._assert_scalar.default": S.assert_scalar,
    "aten._assert_tensor_metadata.default": S.no_op,
    "aten._assert_async.msg": S.no_op,
    "operator.getitem": S.getitem,
    "operator.add": S.arith("add"),
    "operator.sub": S.arith("sub"),
    "operator.mul": S.arith("mul"),
    "operator.floordiv": S.arith("floordiv"),
    "operator.mod": S.arith("mod"),
    "operator.neg": S.neg,
    "torch.sym_max": S.arith("sym_max"),
    "torch.sym_min": S.arith("sym_min"),
    "operator.eq": S.compare("=="),
    "operator.ne": S.compare("!="),
    "operator.lt": S.compare("<"),
    "operator.le": S.compare("<="),
    "operator.gt": S.compare(">"),
    "operator.ge": S.compare(">="),
}


def target_name(target: Any) -> str:
    """The table key of an FX node's target: ``aten.add.Tensor`` for an ATen overload, ``operator.add`` for the
    Python functions torch.export leaves for size arithmetic."""
    name = getattr(target, "_name", None)  # torch._ops.OpOverload: "aten::add.Tensor"
    if isinstance(name, str) and "::" in name:
        ns, rest = name.split("::", 1)
        overload = getattr(target, "_overloadname", "default") or "default"
        base = rest.split(".", 1)[0]
        return f"{ns}.{base}.{overload}"
    module = getattr(target, "__module__", None) or ""
    module = {"_operator": "operator"}.get(module, module)
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def _split_key(key: str) -> tuple[str, str]:
    """(namespace, op name) of a table key: ``("aten", "conv_transpose2d")`` of ``aten.conv_transpose2d.input``."""
    parts = key.split(".")
    return parts[0], parts[1] if len(parts) == 3 else parts[-1]


def _stem(base: str) -> str:
    """The op's name less its private or ``native_`` prefix and its rank suffix: ``conv_transpose3d`` ->
    ``conv_transpose``, ``native_group_norm`` -> ``group_norm``."""
    return re.sub(r"(?<=[a-z_])[0-9]d(_.*)?$", "", re.sub(r"^_*(native_)?", "", base))


def nearby(name: str, n: int = 6) -> list[str]:
    """Supported ops of the same name stem as ``name``: its other overloads, then the ops that differ only in
    rank (``conv_transpose3d`` -> ``conv_transpose1d``, ``conv_transpose2d``), else those sharing its first word
    (``upsample_bicubic2d`` -> ``upsample_*``); none when no op is that close (a list of unrelated names would
    only mislead)."""
    ns, base = _split_key(name)
    ours = [(k, _split_key(k)[1]) for k in ATEN if _split_key(k)[0] == ns]
    same = sorted(k for k, b in ours if b == base)
    stem = _stem(base)
    ranks = sorted(k for k, b in ours if b != base and _stem(b) == stem)
    word = stem.split("_", 1)[0]
    words = (
        []
        if ranks or word == stem
        else sorted(k for k, b in ours if _stem(b) == word or _stem(b).startswith(word + "_"))
    )
    return list(dict.fromkeys(same + ranks + words))[:n]


def decomposition_table() -> dict[Any, Any]:
    """torch.export's default decompositions, less every overload this table translates (those stay whole)."""
    from torch.export import default_decompositions

    table = default_decompositions()
    for op in list(table.keys()):
        if target_name(op) in ATEN:
            del table[op]
    return table
