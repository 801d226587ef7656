"""The resealed-mutation sweep: one integer, one character of one string or one weight of a real model's
artifact changed and every checksum recomputed. The reader must refuse the file, return the original, or return
a different model that the writer itself writes exactly so (see mutation.py): never accept a file it could have
refused. Every file it accepts as another model is then called on every backend it runs on (sweep_run.py): no
access out of bounds (the interpreter's address fence, narrowed to each pointer's extents, and the fake CUDA
driver see none), no hang, no untyped error, no allocation over 1 GiB, and every difference in the outputs is a
weight edit.

Subjects: three example models (models/mlp.py, cnn.py, gpt2.py, default sizes), scheduled for sm_80 and sm_90
(launches with per-architecture arch launches) with fake binaries, so launch tables, arch launches, kernel code, launch
metadata and graph tables are all in the file; the golden model (tests/golden/make_golden.py) with its launch plan,
which adds guards, multiple_of symbols and bool/int64 constants; and today's golden file, whose kernels carry real sm_80/sm_90 cubins
and PTX. The default run samples 150 mutations per subject; ``-m slow`` / AOTC_RUN_SLOW=1 runs 3,400 per example
model and 1,700 per golden subject (10,200 files over the example models, 13,600 in all).
"""

from __future__ import annotations

import importlib.util
import resource
from collections import Counter
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
from kernel_kit import fake_binaries, fence_only
from mutation import Subject, classify, mutate_slot, mutate_text, mutate_weight
from sweep_run import TIMEOUT, Violation, call_once, deadline, feeds_for, leaves, run, tally

import aotc
from aotc.artifact import SCHEMA_VERSION, Artifact, read_artifact, write_artifact
from aotc.ir.variant import Variant
from aotc.lowering.decompose import decompose
from aotc.runtime import Executable

TESTS = Path(__file__).resolve().parents[1]
MODELS = TESTS.parent / "models"
EXAMPLES = ("mlp", "cnn", "gpt2")
# golden_newest: the golden file of today's schema (a mutation re-written by today's writer is of that version).
NAMES = (*EXAMPLES, "golden", "golden_newest")


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"sweep_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_model(name: str, path: Path) -> bytes:
    if name == "golden_newest":
        return (TESTS / "golden" / f"v{SCHEMA_VERSION}_mlp.aotc").read_bytes()
    from aotc.kernels.scheduler import schedule_graph

    if name == "golden":  # its launch plan, no binaries
        golden = load_module(TESTS / "golden" / "make_golden.py")
        src = golden.source_graph()
        variant = decompose(src)
        return write_artifact([Variant(variant, schedule_graph(variant))], source=src, meta={"golden": True})

    model, inputs = load_module(MODELS / f"{name}.py").build()
    compiled = aotc.compile(model, inputs)
    meta = read_artifact(compiled.artifact_bytes).meta
    plan = schedule_graph(compiled.lowered, SimpleNamespace(targets=("sm_80", "sm_90")))
    return write_artifact(
        [Variant(compiled.lowered, plan)], source=compiled.graph, meta=meta, binaries=fake_binaries(plan)
    )


@pytest.fixture(scope="module")
def subjects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Subject]:
    tmp = tmp_path_factory.mktemp("sweep")
    return {name: Subject.of(name, compile_model(name, tmp / f"{name}.aotc")) for name in NAMES}


def mutate(subject: Subject, rng: np.random.Generator) -> tuple[str, bytes]:
    """(what was changed, the file): a weight 5% of the time, a character of a string 15% (half of them in a
    kernel's source), else one integer."""
    draw = rng.random()
    if draw < 0.05:
        return "a weight", mutate_weight(subject, rng)
    if draw < 0.20 and subject.texts:
        return mutate_text(subject, rng, ".source" if draw < 0.125 else "")
    slot = subject.slots[int(rng.integers(len(subject.slots)))]
    return slot.what, mutate_slot(subject, slot, rng)


def sweep(subject: Subject, n: int, seed: int) -> tuple[Counter[str], Counter[str], list[str]]:
    """(the reader's outcomes, what the accepted files did when called, the violations)."""
    rng = np.random.default_rng([seed, NAMES.index(subject.name)])
    feeds = feeds_for(subject.art.variants[0].graph)
    ref = leaves(call_once(Executable(subject.art, "cpu"), feeds))
    outcomes: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    violations: list[str] = []
    examples: dict[str, str] = {}
    for _ in range(n):
        what, data = mutate(subject, rng)
        try:
            with deadline(TIMEOUT):
                outcome = classify(subject, data)
        except Violation as e:
            violations.append(f"{subject.name}: reading the file after mutating {what}: {e}")
            continue
        except Exception as e:
            raise AssertionError(f"{subject.name}: mutating {what}: {type(e).__name__}: {e}") from e
        outcomes[outcome] += 1
        examples.setdefault(outcome, what)
        if not outcome.startswith("different"):
            continue
        try:
            label, _ = run(read_artifact(data), feeds, ref)
        except Violation as e:
            if what == "a weight" and "the backends disagree" in str(e) and overflows(subject, read_artifact(data)):
                calls["backends disagree: a weight edited past float32's safe range"] += 1
                continue
            violations.append(f"{subject.name}: mutating {what}: {e}")
            continue
        calls[label] += 1
        if "outputs differ" in label and what != "a weight":
            violations.append(
                f"{subject.name}: mutating {what}: a silent difference ({outcome}) that is no weight edit"
            )
    print(f"{subject.name} examples: {examples}")
    return outcomes, calls, violations


def overflows(subject: Subject, art: Artifact) -> bool:
    """Whether a weight of ``art`` differs from the subject's in an element that is not finite or at least 2**64 in
    magnitude. Float32 arithmetic on such a value overflows (its square already does: a LayerNorm's variance), and
    whether a backend then gets inf, NaN or a finite number depends on the order it adds in: the backends may
    disagree on such a file as they may on any input that overflows. (A weight bit flip made a LayerNorm bias
    -1.26e37 in GPT-2: the cpu backend stayed finite, the interpret backend's fused kernels gave NaN.)"""
    for name, a in subject.art.constants.items():
        b = art.constants[name]
        if a.dtype.kind != "f" or a.tobytes() == b.tobytes():
            continue
        bytes_a, bytes_b = (x.reshape(-1).view(np.uint8).reshape(-1, a.dtype.itemsize) for x in (a, b))
        changed = b.reshape(-1)[(bytes_a != bytes_b).any(axis=1)].astype(np.float64)
        if not np.isfinite(changed).all() or (np.abs(changed) >= 2.0**64).any():
            return True
    return False


def check(outcomes: Counter[str], violations: list[str], n: int) -> None:
    assert sum(outcomes.values()) == n
    # every "different:..." outcome passed check_writer_makes: a file the writer itself makes
    assert all(k in ("refused", "identical") or k.startswith("different:") for k in outcomes), outcomes
    # weights changed under a recomputed checksum are the one change no check can see
    assert outcomes["different:weights"] > 0 and outcomes["refused"] > n // 2
    assert not violations, violations[:10]


def report(name: str, outcomes: Counter[str], calls: Counter[str]) -> None:
    print(f"{name}: read: {tally(outcomes)}; called: {tally(calls)}")


@pytest.mark.parametrize("name", NAMES)
def test_resealed_mutations(subjects: dict[str, Subject], name: str) -> None:
    outcomes, calls, violations = sweep(subjects[name], 150, seed=1)
    report(name, outcomes, calls)
    check(outcomes, violations, 150)


@pytest.mark.slow
def test_resealed_mutations_full(subjects: dict[str, Subject]) -> None:
    total: Counter[str] = Counter()
    called: Counter[str] = Counter()
    examples = 0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for name in NAMES:
        n = 3400 if name in EXAMPLES else 1700
        outcomes, calls, violations = sweep(subjects[name], n, seed=2)
        report(name, outcomes, calls)
        check(outcomes, violations, n)
        total += outcomes
        called += calls
        examples += n if name in EXAMPLES else 0
    report("total", total, called)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024
    print(f"peak memory grew by {grown / 2**20:.0f} MiB over the sweep")
    assert examples >= 10_000 and grown < 1 << 30


def test_subjects_cover_every_kind_of_slot(subjects: dict[str, Subject]) -> None:
    """The slots the sweep picks from include every table's fields, offsets, lengths and vtables."""
    whats = {s.what for sub in subjects.values() for s in sub.slots}
    for part in ("vtable offset", "vtable size", "table size", "vtable entry", "length", "offset", "node_ops[0]"):
        assert any(part in w for w in whats), part
    for table in ("Symbol", "Guard", "Constant", "Segment", "AttrValue", "AttrSet", "TensorType"):
        field = {"Symbol": "symbols", "Guard": "guards", "Constant": "constants", "Segment": "segments",
                 "AttrValue": "attr_values", "AttrSet": "attr_sets", "TensorType": "types"}[table]  # fmt: skip
        assert any(f".{field}[" in w for w in whats), table
    # the schema 3-9 tables: variants (a graph and a plan each), launch plans (launches, args, checks, buffers, views,
    # arch launches, extents) and kernel code with binaries and their constexprs
    for part in ("Artifact.variants[0].graph.", ".plan.launches[", ".arg_kinds[", ".arg_values[", ".checks[0].slot",
                 ".plan.buffers[", ".plan.flags", "Artifact.kernels[", ".cubins[0].data[", ".cubins[0].meta.shared",
                 ".ptx_meta.params", ".divisible[", ".constexpr_values[", "Artifact.features[",
                 "Artifact.kernel_features[", ".arch_launches[0].code", ".plan.extents[", ".range_lows[",
                 ".meta.constexpr_values[", ".extents"):  # fmt: skip
        assert any(part in w for w in whats), part
    texts = {t.what for sub in subjects.values() for t in sub.texts}
    for part in (".source text", ".arg_sizes[", ".digest text", ".highs[", ".grid[", "Artifact.strings["):
        assert any(part in w for w in texts), part


def test_the_harness_fails_on_an_out_of_bounds_access_and_a_hang() -> None:
    """What the sweep counts as a violation is seen: a kernel storing 4 MiB past its output (source edited, digest
    recomputed: the reader cannot see it) on the interpret backend and on the fake GPU, and a call that hangs."""
    import sweep_run
    from plan_kit import D, model, sealed, with_source
    from plan_kit import write as write_plan
    from test_plan_binding import STORE

    hostile = sealed(with_source(model()[1], 2, STORE, f"{STORE} + 1048576"))
    feeds = {"x": np.ones((2, 3, D), np.float32)}
    with fence_only():  # the source check would refuse it first: the fence's report is what the sweep counts
        with pytest.raises(Violation, match=r"out of bounds on interpret: kernel \w+: a store"):
            run(read_artifact(write_plan(hostile)), feeds, None)
        with pytest.raises(Violation, match=r"out of bounds on the fake GPU: kernel \w+: a store"):
            sweep_run._call(read_artifact(write_plan(hostile, binaries=True)), "cuda", feeds)
    import time
    from unittest import mock

    def hang(*_: object) -> None:
        time.sleep(30)

    with mock.patch.object(sweep_run, "TIMEOUT", 1), mock.patch.object(sweep_run, "_call", hang):
        with pytest.raises(Violation, match="hang: a call ran past 1 s"):
            run(read_artifact(write_plan(model()[1])), feeds, None)
