"""End to end: every example model compiles, saves, loads and matches an independent numpy reference
at several values of each dynamic dim, through both the compiled object and the loaded executable.

Tolerance: outputs are float32, references float64; we require |out - ref| <= ATOL + RTOL * |ref|
with RTOL = ATOL = 2e-5. Outputs are O(0.1..5); the observed errors are 1e-8 (mlp, lstm) to 2e-6
(gpt2, bert, cnn: accumulated float32 rounding), so the bound leaves a 10x margin while still
catching a wrong formula (e.g. tanh- instead of erf-GELU changes outputs by ~1e-3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reference as ref

import aotc
from aotc_cli.loader import import_file

MODELS = Path(__file__).resolve().parents[2] / "models"
RTOL = ATOL = 2e-5


@dataclass
class Case:
    config: dict[str, Any]
    dims: list[dict[str, int]]  # each dynamic dim takes >= 2 distinct values across the list
    make_inputs: Callable[[np.random.Generator, dict[str, int]], dict[str, np.ndarray]]
    reference: Callable[..., Any]
    ref_kwargs: dict[str, Any] = field(default_factory=dict)


def _tokens(vocab: int) -> Callable[[np.random.Generator, dict[str, int]], dict[str, np.ndarray]]:
    def make(rng: np.random.Generator, d: dict[str, int]) -> dict[str, np.ndarray]:
        return {"input_ids": rng.integers(0, vocab, (d["batch"], d["seq"])).astype(np.int64)}

    return make


def _bert_inputs(rng: np.random.Generator, d: dict[str, int]) -> dict[str, np.ndarray]:
    b, t = d["batch"], d["seq"]
    mask = np.ones((b, t), np.int64)
    for row in range(1, b):  # row 0 unpadded, the others end in 1.. t-1 padding tokens
        mask[row, max(1, t - row) :] = 0
    return {"input_ids": rng.integers(0, 100, (b, t)).astype(np.int64), "attention_mask": mask}


def _normal(name: str, *tail: int) -> Callable[[np.random.Generator, dict[str, int]], dict[str, np.ndarray]]:
    def make(rng: np.random.Generator, d: dict[str, int]) -> dict[str, np.ndarray]:
        return {name: rng.standard_normal((d["batch"], *tail)).astype(np.float32)}

    return make


CASES = {
    "mlp": Case({}, [{"batch": 1}, {"batch": 3}, {"batch": 17}], _normal("x", 32), ref.mlp),
    "gpt2": Case(
        {},
        [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}, {"batch": 3, "seq": 20}],
        _tokens(512),
        ref.gpt2,
        {"n_head": 4},
    ),
    "bert": Case(
        {},
        [{"batch": 1, "seq": 5}, {"batch": 3, "seq": 12}, {"batch": 2, "seq": 1}],
        _bert_inputs,
        ref.bert,
        {"n_head": 4},
    ),
    "lstm_ensemble": Case(
        {"members": 2, "steps": 4, "hidden_size": 8},
        [{"batch": 1}, {"batch": 5}],
        _normal("x", 4, 16),
        ref.lstm_ensemble,
    ),
    "cnn": Case({"width": 4}, [{"batch": 1}, {"batch": 3}], _normal("images", 3, 32, 32), ref.cnn),
}


def build(name: str, **config: Any) -> tuple[Any, dict[str, Any]]:
    return import_file(MODELS / f"{name}.py").build(**config)


def state_dict(model: Any) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in model.state_dict().items()}


def assert_matches(out: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert isinstance(out, dict) and out.keys() == expected.keys()
        for k in expected:
            assert_matches(out[k], expected[k])
        return
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module")
def compiled_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any, Any]]:
    """name -> (state dict, compiled model, executable loaded from the saved file); built on first use."""
    cache: dict[str, tuple[Any, Any, Any]] = {}

    def get(name: str) -> tuple[Any, Any, Any]:
        if name not in cache:
            model, inputs = build(name, **CASES[name].config)
            compiled = aotc.compile(model, inputs)
            path = tmp_path_factory.mktemp(name) / f"{name}.aotc"
            compiled.save(path)
            cache[name] = (state_dict(model), compiled, aotc.load(path, device="cpu"))
        return cache[name]

    return get  # type: ignore[return-value]


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_matches_reference(name: str, compiled_models: Any) -> None:
    case = CASES[name]
    sd, compiled, exe = compiled_models(name)
    rng = np.random.default_rng(1)
    for dims in case.dims:
        feeds = case.make_inputs(rng, dims)
        expected = case.reference(sd, *feeds.values(), **case.ref_kwargs)
        assert_matches(compiled(**feeds), expected)
        assert_matches(exe(**feeds), expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_dynamic_dim_takes_two_values(name: str) -> None:
    """Guards the test table itself: every dynamic dim is exercised at >= 2 sizes."""
    _, inputs = build(name, **CASES[name].config)
    dims = {d.name for spec in inputs.values() for d in spec.shape if isinstance(d, aotc.Dim)}
    for dim in dims:
        assert len({case[dim] for case in CASES[name].dims}) >= 2, dim


def test_weights_are_deterministic_and_seeded() -> None:
    a, b, c = (state_dict(build("mlp", seed=s)[0]) for s in (0, 0, 1))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["fc1.weight"], c["fc1.weight"])


def test_outputs_are_not_degenerate(compiled_models: Any) -> None:
    """Random weights give outputs that vary across tokens, so the reference comparison means something."""
    _, compiled, _ = compiled_models("gpt2")
    logits = compiled(input_ids=np.arange(16, dtype=np.int64).reshape(2, 8))
    assert 0.3 < logits.std() < 30
    assert np.abs(np.diff(logits, axis=1)).mean() > 0.1


# -- BERT: Hugging Face key names and the padding mask ------------------------------------------------


def hf_bert_shapes(layers: int, vocab: int, hidden: int, inter: int, positions: int) -> dict[str, tuple[int, ...]]:
    """Every key of Hugging Face ``BertModel.state_dict()`` with its shape, for a config."""
    shapes = {
        "embeddings.word_embeddings.weight": (vocab, hidden),
        "embeddings.position_embeddings.weight": (positions, hidden),
        "embeddings.token_type_embeddings.weight": (2, hidden),
        "embeddings.LayerNorm.weight": (hidden,),
        "embeddings.LayerNorm.bias": (hidden,),
        "pooler.dense.weight": (hidden, hidden),
        "pooler.dense.bias": (hidden,),
    }
    per_layer = {
        "attention.self.query": (hidden, hidden),
        "attention.self.key": (hidden, hidden),
        "attention.self.value": (hidden, hidden),
        "attention.output.dense": (hidden, hidden),
        "attention.output.LayerNorm": None,
        "intermediate.dense": (inter, hidden),
        "output.dense": (hidden, inter),
        "output.LayerNorm": None,
    }
    for i in range(layers):
        for module, weight in per_layer.items():
            p = f"encoder.layer.{i}.{module}"
            shapes[f"{p}.weight"] = weight or (hidden,)
            shapes[f"{p}.bias"] = (weight or (hidden,))[:1]
    return shapes


def hf_gpt2_shapes(layers: int, vocab: int, d: int, positions: int) -> dict[str, tuple[int, ...]]:
    """Every key of Hugging Face ``GPT2Model.state_dict()`` with its shape (Conv1D weights are (in, out))."""
    shapes = {"wte.weight": (vocab, d), "wpe.weight": (positions, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}
    per_layer = {"attn.c_attn": (d, 3 * d), "attn.c_proj": (d, d), "mlp.c_fc": (d, 4 * d), "mlp.c_proj": (4 * d, d)}
    for i in range(layers):
        for norm in ("ln_1", "ln_2"):
            shapes |= {f"h.{i}.{norm}.weight": (d,), f"h.{i}.{norm}.bias": (d,)}
        for module, (n_in, n_out) in per_layer.items():
            shapes |= {f"h.{i}.{module}.weight": (n_in, n_out), f"h.{i}.{module}.bias": (n_out,)}
    return shapes


def test_bert_state_dict_matches_hugging_face() -> None:
    model, _ = build("bert", num_hidden_layers=3, vocab_size=300, intermediate_size=96, max_position_embeddings=40)
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == hf_bert_shapes(3, vocab=300, hidden=64, inter=96, positions=40)


def test_gpt2_state_dict_matches_hugging_face() -> None:
    model, _ = build("gpt2", n_layer=3, vocab_size=300, d_model=32, n_positions=40)
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == hf_gpt2_shapes(3, vocab=300, d=32, positions=40)


def test_bert_loads_hf_named_weights_strictly() -> None:
    model, _ = build("bert", num_hidden_layers=1, seed=0)
    other, _ = build("bert", num_hidden_layers=1, seed=7)
    hf = {k: v + np.float32(1.0) for k, v in state_dict(other).items()}  # HF-named dict, distinct values
    model.load_state_dict(hf)
    assert all(np.array_equal(np.asarray(model.state_dict()[k]), hf[k]) for k in hf)
    with pytest.raises(Exception, match=r"embeddings\.position_ids"):
        model.load_state_dict(hf | {"embeddings.position_ids": np.arange(128)})


def test_bert_padding_does_not_change_unpadded_outputs(compiled_models: Any) -> None:
    _, compiled, _ = compiled_models("bert")
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 100, (2, 10)).astype(np.int64)
    mask = np.ones((2, 10), np.int64)
    mask[:, 6:] = 0
    base = compiled(input_ids=ids, attention_mask=mask)
    changed = ids.copy()
    changed[:, 6:] = rng.integers(100, 200, (2, 4))
    other = compiled(input_ids=changed, attention_mask=mask)
    np.testing.assert_allclose(
        other["last_hidden_state"][:, :6], base["last_hidden_state"][:, :6], rtol=RTOL, atol=ATOL
    )
    np.testing.assert_allclose(other["pooler_output"], base["pooler_output"], rtol=RTOL, atol=ATOL)
    # and a padded batch equals the unpadded prefix run alone
    prefix = compiled(input_ids=ids[:, :6], attention_mask=mask[:, :6])
    np.testing.assert_allclose(base["last_hidden_state"][:, :6], prefix["last_hidden_state"], rtol=RTOL, atol=ATOL)
    # without the mask the padded tokens would matter
    unmasked = compiled(input_ids=changed, attention_mask=np.ones_like(mask))
    assert not np.allclose(unmasked["last_hidden_state"][:, :6], base["last_hidden_state"][:, :6], atol=1e-3)
