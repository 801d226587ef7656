"""Mixed precision end to end: the GPT-2 example in bf16/fp16 against float32 on the cpu backend, weight bytes,
fp32 and tf32 unchanged, and bad precision values.

Tolerance. bf16 keeps 8 significant bits (unit roundoff u = 2^-8 ~ 0.39%), fp16 11 bits (u = 2^-11 ~ 0.049%).
Each contraction input is rounded once (weights at compile time, activations at the cast) and the logits are
rounded once more; the roundings are independent, so they add in quadrature and the relative (Frobenius) error of
the logits lands at a small multiple of u: measured about 2u for both dtypes on this model. The bound is 8u:
it leaves 4x headroom, yet a contraction run in the wrong dtype (fp16 rounding where bf16 was asked, or the
softmax/norm statistics in bf16) moves the error by far more than that.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import aotc
from aotc.artifact.reader import read_artifact
from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.ops import Op
from aotc.lowering.options import CompileOptions
from aotc_cli.loader import import_file

MODELS = Path(__file__).resolve().parents[2] / "models"
UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11}
LOW = {"bf16": DType.bfloat16, "fp16": DType.float16}
# Lowering and the cpu backend only: generated kernels are tested in tests/kernel_layer.
OPTIONS = dataclasses.replace(CompileOptions.from_env(), kernels=False)


@pytest.fixture(scope="module")
def gpt2() -> tuple:
    model, inputs = import_file(MODELS / "gpt2.py").build()
    ids = np.random.default_rng(1).integers(0, 512, (3, 17)).astype(np.int64)
    ref = aotc.compile(model, inputs, options=OPTIONS)
    return model, inputs, ids, ref, ref(input_ids=ids)


def _weight_bytes(artifact: bytes) -> int:
    return sum(a.nbytes for a in read_artifact(artifact).constants.values())


def _rel_error(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_gpt2_half_matches_float32_within_tolerance(gpt2: tuple, precision: str) -> None:
    model, inputs, ids, _, y32 = gpt2
    compiled = aotc.compile(model, inputs, options=OPTIONS, precision=precision)
    y = compiled(input_ids=ids)
    assert y.dtype == np.float32 and y.shape == y32.shape  # the model's output dtype is kept
    err = _rel_error(y, y32)
    assert 0 < err <= 8 * UNIT_ROUNDOFF[precision], err  # > 0: the half precision really ran
    # The predicted tokens agree wherever float32's top two logits are further apart than the rounding noise can
    # move them (each logit moves by about 3u of the largest logit, measured; their gap by twice that).
    top2 = np.sort(y32, axis=-1)[..., -2:]
    clear = (top2[..., 1] - top2[..., 0]) > 8 * UNIT_ROUNDOFF[precision] * np.abs(y32).max()
    assert clear.mean() > 0.5
    np.testing.assert_array_equal(y.argmax(-1)[clear], y32.argmax(-1)[clear])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_gpt2_half_stores_weights_in_half(gpt2: tuple, precision: str) -> None:
    model, inputs, _, ref, _ = gpt2
    compiled = aotc.compile(model, inputs, options=OPTIONS, precision=precision)
    full, half = _weight_bytes(ref.artifact_bytes), _weight_bytes(compiled.artifact_bytes)
    # Matmul weights and embeddings are half; norm scales and biases (under 1% of the bytes) stay float32.
    assert 0.5 * full <= half <= 0.52 * full, (half, full)
    stored = read_artifact(compiled.artifact_bytes).constants
    assert stored["wte.weight"].dtype == LOW[precision].np
    assert stored["h.0.mlp.c_fc.weight"].dtype == LOW[precision].np
    assert stored["h.0.ln_1.weight"].dtype == np.float32
    # Every contraction computes in the low dtype.
    matmuls = [n for n in compiled.lowered.nodes if n.op is Op.MATMUL]
    assert matmuls and all(v.type.dtype is LOW[precision] for n in matmuls for v in n.inputs)


def test_gpt2_bf16_keeps_softmax_and_norm_statistics_in_float32(gpt2: tuple) -> None:
    model, inputs, *_ = gpt2
    lowered = aotc.compile(model, inputs, options=OPTIONS, precision="bf16").lowered
    stats = [n for n in lowered.nodes if n.op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.EXP, Op.RSQRT)]
    assert stats and all(n.outputs[0].type.dtype is DType.float32 for n in stats)
    assert [v.type.dtype for v in lowered.inputs] == [DType.int64]
    assert [v.type.dtype for v in lowered.outputs] == [DType.float32]


def test_gpt2_bf16_artifact_reloads_and_keeps_a_consistent_source_graph(gpt2: tuple, tmp_path: Path) -> None:
    model, inputs, ids, _, _ = gpt2
    compiled = aotc.compile(model, inputs, options=OPTIONS, precision="bf16")
    path = tmp_path / "gpt2.aotc"
    compiled.save(path)
    np.testing.assert_array_equal(aotc.load(path, device="reference")(input_ids=ids), compiled(input_ids=ids))
    source = read_artifact(compiled.artifact_bytes).source
    assert source is not None
    # The source graph reads the stored bf16 weight and casts it back: one array under each name.
    casts = [n for n in source.nodes if n.op is Op.CAST and n.inputs[0].type.dtype is DType.bfloat16]
    assert casts


def test_fp32_is_unchanged_bit_for_bit(gpt2: tuple) -> None:
    model, inputs, ids, ref, y32 = gpt2
    again = aotc.compile(model, inputs, options=OPTIONS, precision="fp32")
    assert again.artifact_bytes == ref.artifact_bytes
    assert not any(o.type.dtype in LOW.values() for n in again.lowered.nodes for o in n.outputs)
    np.testing.assert_array_equal(again(input_ids=ids), y32)


def test_tf32_marks_float32_matmuls_and_changes_nothing_on_the_cpu(gpt2: tuple) -> None:
    model, inputs, ids, ref, y32 = gpt2
    compiled = aotc.compile(model, inputs, options=OPTIONS, precision="tf32")
    matmuls = [n for n in compiled.lowered.nodes if n.op is Op.MATMUL]
    assert matmuls and all(n.attrs["allow_tf32"] is True for n in matmuls)
    assert not any("allow_tf32" in n.attrs for n in ref.lowered.nodes)
    np.testing.assert_array_equal(compiled(input_ids=ids), y32)
    assert _weight_bytes(compiled.artifact_bytes) == _weight_bytes(ref.artifact_bytes)


@pytest.mark.parametrize("bad", ["int8", "BF16", "", 16, None])
def test_bad_precision_is_a_typed_error(bad: object) -> None:
    with pytest.raises(UnsupportedError, match=r"precision .* is not supported: expected one of 'fp32', 'tf32'"):
        CompileOptions(precision=bad)  # type: ignore[arg-type]


def test_bad_precision_in_compile_names_the_value(gpt2: tuple) -> None:
    model, inputs, *_ = gpt2
    with pytest.raises(UnsupportedError, match="precision 'half' is not supported"):
        aotc.compile(model, inputs, options=OPTIONS, precision="half")


def test_cnn_example_runs_its_convs_in_bf16() -> None:
    model, inputs = import_file(MODELS / "cnn.py").build()
    ref = aotc.compile(model, inputs, options=OPTIONS)
    compiled = aotc.compile(model, inputs, options=OPTIONS, precision="bf16")
    convs = [n for n in compiled.lowered.nodes if n.op is Op.CONV]
    assert convs and all(v.type.dtype is DType.bfloat16 for n in convs for v in n.inputs)
    feeds = {
        name: np.random.default_rng(2).standard_normal([d if isinstance(d, int) else 2 for d in spec.shape])
        for name, spec in inputs.items()
    }
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    y32, y16 = ref(**feeds), compiled(**feeds)
    assert 0 < _rel_error(y16, y32) <= 8 * UNIT_ROUNDOFF["bf16"]
