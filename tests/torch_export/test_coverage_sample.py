"""The coverage sweep's fixed sample (scripts/torch_coverage.py ``SAMPLE``), run in this process: every model
either matches eager torch at two sizes of each dynamic dim or is refused with a typed error that names the op
and the model's source line; never a wrong answer or an untyped error. The whole sweep writes
docs/torch_coverage.md and is run by hand (minutes to hours)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from torch_kit import torchvision_module, transformers_module

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from torch_coverage import SAMPLE, _leaves, carry, run_case, sliced, table  # noqa: E402


@pytest.mark.parametrize("job", SAMPLE)
def test_a_sampled_model_matches_eager_or_is_refused_naming_its_op_and_line(job: str) -> None:
    suite, name = job.split(":", 1)
    torchvision_module() if suite == "torchvision" else transformers_module()
    r = run_case(suite, name)
    assert r["status"] in ("pass", "refused", "skip"), r
    if r["status"] == "refused":
        assert re.fullmatch(r".+\.py:\d+", r["where"]), r  # the model's own source line
        assert r["op"].startswith("aten.") or "not supported" in r["detail"], r


def test_leaves_name_outputs_by_key_and_position() -> None:
    np = pytest.importorskip("numpy")
    a, b = np.zeros(2), np.ones(3)
    assert set(_leaves({"out": a, "aux": (b, None)})) == {"out", "aux[0]"}
    assert list(_leaves(a)) == [""]


def test_slices_interleave_and_together_hold_every_model_once() -> None:
    jobs = list(range(10))
    parts = [sliced(jobs, k, 3) for k in (1, 2, 3)]
    assert parts[0] == [0, 3, 6, 9] and parts[1] == [1, 4, 7]
    assert sorted(j for part in parts for j in part) == jobs


def test_the_table_counts_what_ran_and_leaves_skips_out() -> None:
    results = {
        "torchvision:classification/a": {"status": "pass", "dims": "batch"},
        "torchvision:classification/b": {"status": "refused", "op": "aten.x.default", "where": "m.py:3", "detail": "d"},
        "torchvision:classification/c": {"status": "skip", "detail": "does not build"},
        "hf:t/M": {"status": "mismatch", "detail": "output at (2, 7): max |diff| 1"},
    }
    text = table(
        results, [{"op": "aten.add.Tensor", "supported": True}, {"op": "aten.y.default", "supported": False}], "c"
    )
    assert "| torchvision classification | 1 (50%) | 2 |" in text
    assert "| Hugging Face architectures | 0 (0%) | 1 |" in text
    assert "| core ATen overloads | 1 (50%) | 2 |" in text
    assert "| `aten.x.default` | 1 |" in text


def test_a_tables_rows_carry_over_into_a_later_sweep(tmp_path: Path) -> None:
    results = {
        "torchvision:classification/a": {"dims": "batch", "status": "pass"},
        "hf:t/M": {
            "dims": "batch, seq",
            "status": "refused",
            "op": "aten.x.default",
            "where": "m.py:3",
            "detail": "a|b",
        },
        "torchvision:video/v": {"status": "skip", "detail": "does not build"},
    }
    path = tmp_path / "cov.md"
    path.write_text(table(results, [{"op": "aten.add.Tensor", "supported": True}], "python scripts/x.py --y"))
    rows, made = carry(path)
    assert rows == results
    assert made.startswith("`python scripts/x.py --y` on ")
    assert "2 rows carried over" in table(rows, [], "c", "2 rows carried over unchanged from the table written by m")


def test_a_model_that_specializes_seq_is_run_again_with_seq_static(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recurrence unrolled over the tokens fixes seq: aotc refuses the dynamic seq naming the line, and the
    sweep declares seq static (batch still dynamic), as a user would; the row keeps the first refusal."""
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    import coverage_zoo
    from coverage_zoo import BATCH, SEQ, Case

    from aotc import TensorSpec

    class Unrolled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(16, 4)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(input_ids.shape[0], 4)
            for t in range(input_ids.shape[1]):  # a Python loop over seq: torch.export specializes it
                h = torch.tanh(h + self.emb(input_ids[:, t]))
            return h

    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 16, size=s).astype(np.int64) for s in ((2, 5), (3, 7), (3, 5))]
    m = Unrolled().eval()
    case = Case(m, {"input_ids": TensorSpec((BATCH, SEQ), "int64")}, [{"input_ids": x} for x in ids[:2]], "batch, seq")
    case.static_seq = Case(
        m, {"input_ids": TensorSpec((BATCH, 5), "int64")}, [{"input_ids": ids[0]}, {"input_ids": ids[2]}], "batch"
    )
    monkeypatch.setattr(coverage_zoo, "build", lambda suite, name: case)
    r = run_case("hf", "unrolled/Unrolled")
    assert r["status"] == "pass" and r["dims"] == "batch", r
    assert "dim 'seq'" in r["specialized"] and "test_coverage_sample.py" in r["specialized"], r
    row = table({"hf:unrolled/Unrolled": r}, [], "test").splitlines()[-1]
    assert "| batch | pass |" in row and "seq static: " in row
    case.static_seq = None  # without the static form the refusal stands
    r = run_case("hf", "unrolled/Unrolled")
    assert r["status"] == "refused" and "specialized" in r["detail"], r


def test_a_composites_autoconfig_towers_are_shrunk_with_its_own_defaults() -> None:
    """LLaVA's towers are AutoConfig sub-configs (CLIP vision, Llama text): left alone they build the 7B model,
    which the sweep could not allocate; shrunk, they keep the composite's defaults for the rest."""
    transformers_module()
    from coverage_zoo import _small
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING["llava"]
    config = cls(**_small(cls))
    assert type(config.vision_config).__name__ == "CLIPVisionConfig"
    assert type(config.text_config).__name__ == "LlamaConfig"
    for tower in (config.vision_config, config.text_config):
        assert tower.hidden_size == 32 and tower.num_hidden_layers == 2, tower
    default = cls()
    assert config.vision_config.hidden_act == default.vision_config.hidden_act  # the composite's own default


def test_a_transformer_backbone_is_shrunk_and_a_staged_one_keeps_its_sizes() -> None:
    """SAM3's vision model wraps a ViT backbone (32 layers of 1024 at 1008 pixels: a 3.2 GiB attention matrix in
    the sweep's evaluation) that _SMALL shrinks as any tower; Mask2Former's Swin keeps its per-stage lists, and
    LW-DETR's ViT, which names the layers it outputs, is left as it is when its shrink is refused."""
    transformers_module()
    from coverage_zoo import _config
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    backbone = _config(CONFIG_MAPPING["sam3_vision_model"])[0].backbone_config
    assert (backbone.num_hidden_layers, backbone.hidden_size, backbone.image_size) == (2, 32, 32), backbone
    swin = _config(CONFIG_MAPPING["mask2former"])[0].backbone_config
    assert swin.embed_dim == CONFIG_MAPPING["swin"]().embed_dim and isinstance(swin.depths, list | tuple)
    vit = _config(CONFIG_MAPPING["lw_detr"])[0].backbone_config
    assert vit.num_hidden_layers == CONFIG_MAPPING["lw_detr"]().backbone_config.num_hidden_layers


def test_a_vision_towers_merger_writes_the_shrunk_text_width() -> None:
    """LLaVA-OneVision-1.5's validator ties its vision merger's output width to the text model's: left at 4096,
    the shrink was refused and the fallback built the 7B text model, past the sweep's memory."""
    transformers_module()
    from coverage_zoo import _config
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config, fitted = _config(CONFIG_MAPPING["llava_onevision1_5"])
    assert not fitted and config.text_config.hidden_size == config.vision_config.out_hidden_size == 32


def test_a_speech_tokenizer_is_shrunk_by_its_own_sizes() -> None:
    """VibeVoice's audio tower and semantic encoder are sized by filters and per-stage depths, not _SMALL's names:
    left alone, the model has 1.0B parameters, past the sweep's memory cap."""
    transformers_module()
    from coverage_zoo import _config
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = _config(CONFIG_MAPPING["vibevoice"])[0]
    for tower in (config.audio_config, config.semantic_model_config):
        assert tower.num_filters == 4 and set(tower.depths) == {1}, tower


def test_a_vanishing_init_is_given_a_signal_and_every_other_init_is_left_alone() -> None:
    torch = pytest.importorskip("torch")
    from coverage_zoo import _unzero

    def net() -> torch.nn.Module:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(4, 4))
        with torch.no_grad():
            m[0].weight.normal_(0.0, 0.01)
            m[0].bias.zero_()
            m[1].weight.zero_()
        return m

    plain = net()
    conv = plain[0].weight.clone()
    _unzero(plain)
    assert plain[1].weight.any() and not plain[0].bias.any() and torch.equal(plain[0].weight, conv)
    vanishing = net()
    _unzero(vanishing, vanishing=True)
    assert vanishing[0].bias.any()
    assert 0.3 < float(vanishing[0].weight.detach().std()) * 27**0.5 / 2 < 3  # std 2/sqrt(fan-in 27), not 0.01


def test_a_model_that_traces_to_another_program_than_it_runs_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """PaliGemma masks causally when traced and not when run eagerly: aotc gives what torch.export's program
    gives, which the row says (a failure, not counted as aotc's wrong answer); an answer that matches neither
    stays a mismatch."""
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    import coverage_zoo
    from coverage_zoo import BATCH, Case

    import aotc
    from aotc import TensorSpec

    class Traced(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2.0 if torch.compiler.is_exporting() else x * 3.0

    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((n, 4)).astype(np.float32)} for n in (2, 3)]
    case = Case(Traced().eval(), {"x": TensorSpec((BATCH, 4))}, feeds, "batch")
    monkeypatch.setattr(coverage_zoo, "build", lambda suite, name: case)
    r = run_case("hf", "traced/Traced")
    assert r["status"] == "export differs" and "torch.export's program gives aotc's" in r["detail"], r

    real = aotc.compile

    def off(*args, **kwargs):  # an answer of neither program
        model = real(*args, **kwargs)
        return lambda **feeds: model(**feeds) + 1.0

    monkeypatch.setattr(aotc, "compile", off)
    r = run_case("hf", "traced/Traced")
    assert r["status"] == "mismatch", r


def test_a_model_past_the_workers_memory_cap_is_told_apart_from_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    import aotc

    def big(*args, **kwargs):
        raise MemoryError("Unable to allocate 64.0 MiB for an array")

    transformers_module()
    monkeypatch.setattr(aotc, "compile", big)
    r = run_case("hf", "bert/BertModel")
    assert r["status"] == "memory" and "memory cap" in r["detail"] and "64.0 MiB" in r["detail"], r


def test_a_config_whose_validators_refuse_the_shrink_takes_the_sizes_it_accepts() -> None:
    """Swin's heads are a list per stage, so ``num_heads=2`` is refused: the fitted config keeps the sizes its
    validators accept, and is marked fitted (its model is skipped if they leave it big)."""
    transformers_module()
    from coverage_zoo import _config, _small
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    swin = CONFIG_MAPPING["swin"]
    with pytest.raises(Exception, match="num_heads"):
        swin(**_small(swin))
    config, fitted = _config(swin)
    assert fitted and config.num_channels == 3 and config.image_size == 32, config
    assert list(config.num_heads) == [3, 6, 12, 24]  # its own
    zamba, fitted = _config(CONFIG_MAPPING["zamba"])  # its layer types need 3 layers at least
    assert fitted and zamba.num_hidden_layers == 3 and zamba.hidden_size == 32, zamba
    bert, plain = _config(CONFIG_MAPPING["bert"])
    assert not plain and bert.hidden_size == 32 and bert.num_hidden_layers == 2


def test_torchs_own_allocator_past_the_cap_is_a_memory_row_and_other_runtime_errors_stay_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import aotc

    def message(text: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(text)

        return fail

    transformers_module()
    oom = (
        "[enforce fail at alloc_cpu.cpp:121] . DefaultCPUAllocator: can't allocate memory: you tried to allocate "
        "21233664 bytes. Error code 12 (Cannot allocate memory)"
    )
    monkeypatch.setattr(aotc, "compile", message(oom))
    r = run_case("hf", "bert/BertModel")
    assert r["status"] == "memory" and "21233664 bytes" in r["detail"], r

    def evaluation(*args: Any, **kwargs: Any) -> Any:
        from aotc.errors import ExecError

        try:
            raise MemoryError("Unable to allocate 3.20 GiB for an array")
        except MemoryError as e:
            raise ExecError(f"scaled_dot_product_attention at model.py:548 failed: {e}") from e

    monkeypatch.setattr(aotc, "compile", evaluation)  # a typed error whose cause is the cap: memory, not a refusal
    r = run_case("hf", "bert/BertModel")
    assert r["status"] == "memory" and "3.20 GiB" in r["detail"], r
    monkeypatch.setattr(aotc, "compile", message("expand: the requested shape has too few dimensions"))
    r = run_case("hf", "bert/BertModel")
    assert r["status"] == "error" and r["detail"].startswith("RuntimeError: expand"), r


def test_a_model_that_needs_a_mask_under_export_is_given_one_of_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """LongT5 builds no mask under torch.export when none is given, then uses it: the sweep gives it an all-ones
    mask, as a user would, and the row says so; a model with no mask parameter stays refused at its line."""
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    import coverage_zoo
    from coverage_zoo import BATCH, SEQ, Case

    from aotc import TensorSpec

    class NeedsMask(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(16, 4)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
            if attention_mask is None and not torch.compiler.is_exporting():
                attention_mask = torch.ones_like(input_ids)
            return self.embed(input_ids) * attention_mask[..., None]

    class NoMask(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            mask = None
            return input_ids * mask.shape[0]

    rng = np.random.default_rng(0)
    feeds = [{"input_ids": rng.integers(0, 16, size=s).astype(np.int64)} for s in ((2, 5), (3, 7))]
    for module in (NeedsMask(), NoMask()):
        case = Case(module.eval(), {"input_ids": TensorSpec((BATCH, SEQ), "int64")}, feeds, "batch, seq")
        monkeypatch.setattr(coverage_zoo, "build", lambda suite, name, case=case: case)
        r = run_case("hf", "mask/Model")
        if isinstance(module, NeedsMask):
            assert r["status"] == "pass" and "could not capture" in r["unmasked"], r
            assert "an all-ones attention_mask given" in table({"hf:mask/Model": r}, [], "cmd", "")
        else:
            assert r["status"] == "refused" and "test_coverage_sample.py" in r["where"] and "unmasked" not in r, r


def test_a_table_of_several_sweeps_says_how_many_rows_each_date_gave() -> None:
    from torch_coverage import _sweep_dates

    rows = {
        "a": {"status": "pass"},
        "b": {"status": "pass", "swept": "2026-12-07"},
        "c": {"status": "skip", "swept": "2026-12-07"},
    }
    assert _sweep_dates(rows) == ["Rows by the date they were swept: 2026-12-07: 2; an undated earlier sweep: 1."]
    assert _sweep_dates({k: r for k, r in rows.items() if k != "a"}) == []  # one sweep: nothing to say
