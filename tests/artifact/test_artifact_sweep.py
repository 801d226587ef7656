"""The resealed-mutation sweep: one integer (or one weight) of a real model's artifact changed and every
checksum recomputed. The reader must refuse the file, return the original, or return a different model
that the writer itself writes exactly so (see mutation.py): never accept a file it could have refused.

Subjects: three example models (models/mlp.py, cnn.py, gpt2.py, default sizes; compiled with their launch
plans, no cubins: the suite sets AOTC_TARGETS=none), the golden model (tests/golden/make_golden.py), which
adds guards, multiple_of symbols and bool/int64 constants, and the schema 3 golden file, whose kernels
carry real sm_80 cubins and PTX with their launch metadata and index checks. The
default run samples 150 mutations per subject; ``-m slow`` / AOTC_RUN_SLOW=1 runs 1,700 per subject
(5,100 files over the three example models, 6,800 in all).
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from mutation import Subject, classify, mutate_slot, mutate_weight

import aotc
from aotc.artifact import SCHEMA_VERSION, write_artifact
from aotc.lowering.decompose import decompose

TESTS = Path(__file__).resolve().parents[1]
MODELS = TESTS.parent / "models"
# golden_newest: the golden file of today's schema (a mutation re-written by today's writer is of that version).
NAMES = ("mlp", "cnn", "gpt2", "golden", "golden_newest")


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"sweep_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_model(name: str, path: Path) -> bytes:
    if name == "golden_newest":
        return (TESTS / "golden" / f"v{SCHEMA_VERSION}_mlp.aotc").read_bytes()
    if name == "golden":
        golden = load_module(TESTS / "golden" / "make_golden.py")
        src = golden.source_graph()
        return write_artifact([decompose(src)], source=src, meta={"golden": True})
    model, inputs = load_module(MODELS / f"{name}.py").build()
    aotc.compile(model, inputs).save(path)
    return path.read_bytes()


@pytest.fixture(scope="module")
def subjects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Subject]:
    tmp = tmp_path_factory.mktemp("sweep")
    return {name: Subject.of(name, compile_model(name, tmp / f"{name}.aotc")) for name in NAMES}


def sweep(subject: Subject, n: int, seed: int) -> Counter[str]:
    rng = np.random.default_rng([seed, NAMES.index(subject.name)])
    outcomes: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for _ in range(n):
        if rng.random() < 0.05:
            what, data = "a weight", mutate_weight(subject, rng)
        else:
            slot = subject.slots[int(rng.integers(len(subject.slots)))]
            what, data = slot.what, mutate_slot(subject, slot, rng)
        try:
            outcome = classify(subject, data)
        except Exception as e:
            raise AssertionError(f"{subject.name}: mutating {what}: {type(e).__name__}: {e}") from e
        outcomes[outcome] += 1
        examples.setdefault(outcome, what)
    print(f"{subject.name} examples: {examples}")
    return outcomes


def check(outcomes: Counter[str], n: int) -> None:
    assert sum(outcomes.values()) == n
    # every "different:..." outcome passed check_writer_makes: a file the writer itself makes
    assert all(k in ("refused", "identical") or k.startswith("different:") for k in outcomes), outcomes
    # weights changed under a recomputed checksum are the one change no check can see
    assert outcomes["different:weights"] > 0 and outcomes["refused"] > n // 2


def report(name: str, outcomes: Counter[str]) -> None:
    print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))


@pytest.mark.parametrize("name", NAMES)
def test_resealed_mutations(subjects: dict[str, Subject], name: str) -> None:
    outcomes = sweep(subjects[name], 150, seed=1)
    report(name, outcomes)
    check(outcomes, 150)


@pytest.mark.slow
def test_resealed_mutations_full(subjects: dict[str, Subject]) -> None:
    total: Counter[str] = Counter()
    examples = 0
    for name in NAMES:
        outcomes = sweep(subjects[name], 1700, seed=2)
        report(name, outcomes)
        check(outcomes, 1700)
        total += outcomes
        examples += 1700 if not name.startswith("golden") else 0
    report("total", total)
    assert examples >= 5000  # over the three example models


def test_subjects_cover_every_kind_of_slot(subjects: dict[str, Subject]) -> None:
    """The slots the sweep picks from include every table's fields, offsets, lengths and vtables."""
    whats = {s.what for sub in subjects.values() for s in sub.slots}
    for part in ("vtable offset", "vtable size", "table size", "vtable entry", "length", "offset", "node_ops[0]"):
        assert any(part in w for w in whats), part
    for table in ("Symbol", "Guard", "Constant", "Segment", "AttrValue", "AttrSet", "TensorType"):
        field = {"Symbol": "symbols", "Guard": "guards", "Constant": "constants", "Segment": "segments",
                 "AttrValue": "attr_values", "AttrSet": "attr_sets", "TensorType": "types"}[table]  # fmt: skip
        assert any(f".{field}[" in w for w in whats), table
    # the schema 3 tables: launch plans (launches, args, checks, buffers, views) and kernel code with binaries
    for part in (".schedule.launches[", ".arg_kinds[", ".arg_values[", ".checks[0].slot", ".schedule.buffers[",
                 ".schedule.flags", "Artifact.kernels[", ".cubins[0].data[", ".cubins[0].meta.shared",
                 ".ptx_meta.params", ".divisible[", ".constexpr_values[", "Artifact.features[",
                 "Artifact.kernel_features["):  # fmt: skip
        assert any(part in w for w in whats), part
