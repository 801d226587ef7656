"""Schema 3 kernel tables: launch plans and kernel code (with fake cubins/PTX) round-trip into the exact ir
objects; the writer refuses every inconsistent plan, and the reader refuses each one too when the writer's
checks are switched off to make the file; features tell "needs a newer aotc" from damage."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import pytest
from graph_kit import const, make_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_kit import GOLDEN, fake_binaries, fake_binary, golden_model, meta, unchecked, with_kernel, write
from mutation import Subject, classify, fb_region, reseal

import aotc
from aotc.artifact import SCHEMA_VERSION, encode, plan_decode, plan_encode, read_artifact, write_artifact, writer
from aotc.artifact.code_checks import source_params
from aotc.errors import ArtifactError, UnsupportedError
from aotc.ir.digest import seal
from aotc.ir.dtypes import DType
from aotc.ir.launch import SCRATCH_PARAMS
from aotc.ir.schedule import ArchLaunch, Arg, ArgKind, Buffer, IndexCheck, Schedule, View
from aotc.ir.symbolic import floordiv, sym
from aotc.ir.types import TensorType
from aotc.ir.variant import Variant

# The newest golden file: a mutation re-written by today's writer is a file of today's schema version.
NEWEST = (GOLDEN.parent / f"v{SCHEMA_VERSION}_mlp.aotc").read_bytes()
NEWEST_SUBJECT = Subject.of(f"golden_v{SCHEMA_VERSION}", NEWEST)


def test_round_trip_with_binaries() -> None:
    src, variant, schedule = golden_model()
    binaries = fake_binaries(schedule)
    art = read_artifact(write(variant, schedule, binaries, source=src))
    assert tuple(v.plan for v in art.variants) == (schedule,)
    assert dict(art.kernels) == {b.name: b for b in binaries}
    assert art.features == ("graph",) and art.kernel_features == ("kernels", "binaries")
    assert art.kernels[schedule.kernels[0].name].archs == ("sm_80", "sm_90")


def test_round_trip_without_targets_and_without_kernels() -> None:
    _, variant, schedule = golden_model()
    art = read_artifact(write(variant, schedule))
    assert (
        tuple(v.plan for v in art.variants) == (schedule,)
        and dict(art.kernels) == {}
        and art.kernel_features == ("kernels",)
    )
    bare = read_artifact(write_artifact([variant]))
    assert tuple(v.plan for v in bare.variants) == (None,) and dict(bare.kernels) == {} and bare.kernel_features == ()


def test_two_variants_share_kernel_code() -> None:
    _, variant, schedule = golden_model()
    data = write_artifact([Variant(variant, schedule)] * 2, binaries=fake_binaries(schedule))
    art = read_artifact(data)
    assert tuple(v.plan for v in art.variants) == (schedule, schedule)
    # one KernelCode per distinct kernel: the second variant's launches add no code
    single = write(variant, schedule, fake_binaries(schedule))
    assert len(data) - len(single) < len(fake_binaries(schedule)[0].ptx) * 4 + 20_000
    mixed = read_artifact(write_artifact([variant, Variant(variant, schedule)]))
    assert tuple(v.plan for v in mixed.variants) == (None, schedule)


def _arg(s: Schedule, k: int, j: int, **changes: object) -> Schedule:
    def change(kernel):  # type: ignore[no-untyped-def]
        args = list(kernel.args)
        args[j] = dataclasses.replace(args[j], **changes)
        return kernel.replace(args=tuple(args))

    return with_kernel(s, k, change)


def _size(s: Schedule, k: int) -> int:
    """The index of kernel ``k``'s first size arg (pointers come first)."""
    return next(j for j, a in enumerate(s.kernels[k].args) if a.kind is ArgKind.SIZE)


def _k1(s: Schedule, **changes: object) -> Schedule:
    return with_kernel(s, 1, lambda k: k.replace(**changes))


def _bad_plans() -> list[tuple[str, Callable[[Schedule], Schedule], str]]:
    n, batch, seq = sym("n"), sym("batch"), sym("seq")
    return [
        ("unknown buffer value", lambda s: _arg(s, 0, 0, value=999), "value %999 is not in the graph"),
        ("arg type vs dtype", lambda s: _arg(s, 0, 0, type="*fp16"), "does not fit value"),
        ("size arg with a value", lambda s: _arg(s, 1, _size(s, 1), value=3), "a size arg has type"),
        (
            "unknown symbol",
            lambda s: _arg(s, 1, _size(s, 1), size=n * 2),
            "symbols \\['n'\\] the variant does not declare",
        ),
        ("divisor may be 0", lambda s: _arg(s, 1, _size(s, 1), size=floordiv(batch, seq - 2)), "not positive"),
        ("grid dims", lambda s: _k1(s, grid=(1, 1)), "grid has 2 dims"),
        ("negative grid", lambda s: _k1(s, grid=(1 - batch, 1, 1)), "is negative \\(-7\\)"),
        ("node index", lambda s: _k1(s, nodes=(0, 10_000)), "increasing indices below"),
        ("fused ops", lambda s: _k1(s, fused=("add",)), "fused ops"),
        ("writes an input", lambda s: _k1(s, outputs=(0,)), "a graph input or constant"),
        ("check slot", lambda s: _k1(s, checks=(IndexCheck(5, "", "gather", 0, 10),)), "slot 5"),
        ("flag without checks", lambda s: _k1(s, checks=()), "exactly when it has index checks"),
        ("buffer lifetime", lambda s: _buf(s, 0, last=99), "lifetime 0..99"),
        ("misaligned offset", lambda s: _buf(s, 0, offset=8), "not provably a multiple of 256"),
        ("overlap", lambda s: _buf(s, 1, offset=0, first=0, last=2), "live together and overlap"),
        ("too small", lambda s: _buf(s, 1, nbytes=8), "for a .*-byte value"),
        ("outside the arena", lambda s: dataclasses.replace(s, arena_bytes=256), "-byte arena"),
        ("buffer of an input", lambda s: _buf(s, 0, value=0), "not an intermediate"),
        ("view of a non-output", lambda s: dataclasses.replace(s, views=(View(4, 3),)), "not a graph output"),
    ]


def _buf(s: Schedule, j: int, **changes: object) -> Schedule:
    buffers: list[Buffer] = list(s.buffers)
    buffers[j] = dataclasses.replace(buffers[j], **changes)
    return dataclasses.replace(s, buffers=tuple(buffers))


@pytest.mark.parametrize(("label", "change", "match"), _bad_plans(), ids=[c[0] for c in _bad_plans()])
def test_inconsistent_plans_are_refused_by_writer_and_reader(
    label: str, change: Callable[[Schedule], Schedule], match: str
) -> None:
    _, variant, schedule = golden_model()
    bad = change(schedule)
    with pytest.raises(ArtifactError, match=match):
        write(variant, bad)
    with unchecked():
        data = write(variant, bad)
    with pytest.raises(ArtifactError, match=match):
        read_artifact(data)


def _bad_code() -> list[tuple[str, Callable[[Schedule], Schedule], str]]:
    return [
        (
            "source parameters",
            lambda s: _k1(s, source=s.kernels[1].source.replace("n_rows,", "rows,", 1)),
            "parameters",
        ),
        ("no def line", lambda s: _k1(s, source="import triton\n"), "has no `def"),
        ("warps", lambda s: _k1(s, num_warps=3), "num_warps 3"),
        ("stages", lambda s: _k1(s, num_stages=0), "num_stages 0"),
        ("divisible", lambda s: _k1(s, divisible=(3, 2)), "divisible"),
        ("arg type", lambda s: _arg(s, 1, 0, type="f64"), "type '?f64"),
    ]


@pytest.mark.parametrize(("label", "change", "match"), _bad_code(), ids=[c[0] for c in _bad_code()])
def test_inconsistent_kernel_code_is_refused(label: str, change: Callable[[Schedule], Schedule], match: str) -> None:
    _, variant, schedule = golden_model()
    bad = change(schedule)
    with pytest.raises(ArtifactError, match=match):
        write(variant, bad)
    with unchecked():
        data = write(variant, bad)
    with pytest.raises(ArtifactError, match=match):
        read_artifact(data)


def test_launches_sharing_a_kernel_must_agree() -> None:
    _, variant, schedule = golden_model()
    other = with_kernel(schedule, 1, lambda k: k.replace(num_warps=8))
    with pytest.raises(ArtifactError, match=r"two launches of kernel .* differ"):
        write_artifact([Variant(variant, schedule), Variant(variant, other)])


def _binary_cases() -> list[tuple[str, Callable[[object], object], str]]:
    def cubin(b, **changes):  # type: ignore[no-untyped-def]
        c = dataclasses.replace(b.cubins[0], **changes)
        return dataclasses.replace(b, cubins=(c, *b.cubins[1:]))

    def cubin_meta(b, **changes):  # type: ignore[no-untyped-def]
        return cubin(b, meta=dataclasses.replace(b.cubins[0].meta, **changes))

    return [
        ("params", lambda b: cubin_meta(b, params=("*fp32", *SCRATCH_PARAMS)), "params"),
        ("meta name", lambda b: cubin_meta(b, name="other"), "names kernel 'other'"),
        ("meta arch", lambda b: cubin_meta(b, arch="sm_90a"), "targets 'sm_90a'"),
        ("meta warps", lambda b: cubin_meta(b, num_warps=16), "num_warps 16"),
        ("zero ctas", lambda b: cubin_meta(b, num_ctas=0), "zero count"),
        ("arch repeats", lambda b: dataclasses.replace(b, cubins=(b.cubins[0], b.cubins[0])), "targets repeat"),
        ("bad arch", lambda b: cubin(b, arch="gfx90a"), "not an sm_XX"),
        ("empty cubin", lambda b: cubin(b, data=b""), "empty"),
        ("ptx entry", lambda b: dataclasses.replace(b, ptx=".version 8.7\n"), "PTX has no entry"),
    ]


@pytest.mark.parametrize(("label", "change", "match"), _binary_cases(), ids=[c[0] for c in _binary_cases()])
def test_inconsistent_binaries_are_refused(label: str, change: Callable[[object], object], match: str) -> None:
    _, variant, schedule = golden_model()
    binaries = list(fake_binaries(schedule))
    binaries[0] = change(binaries[0])  # type: ignore[assignment]
    with pytest.raises(ArtifactError, match=match):
        write(variant, schedule, tuple(binaries))
    with unchecked():
        data = write(variant, schedule, tuple(binaries))
    with pytest.raises(ArtifactError, match=match):
        read_artifact(data)


def test_binaries_cover_every_kernel_or_none() -> None:
    _, variant, schedule = golden_model()
    binaries = fake_binaries(schedule)
    with pytest.raises(ArtifactError, match="have no binary"):
        write(variant, schedule, binaries[1:])
    stray = dataclasses.replace(binaries[0], name="nowhere")
    with pytest.raises(ArtifactError, match="belongs to no kernel"):
        write(variant, schedule, (*binaries, stray))
    with pytest.raises(ArtifactError, match="two binaries"):
        write(variant, schedule, (*binaries, dataclasses.replace(binaries[0])))
    with pytest.raises(ArtifactError, match="variant 0 plan is a tuple, not a Schedule"):
        write_artifact([Variant(variant, (schedule,))])  # type: ignore[arg-type]


def test_a_schedule_with_no_launches() -> None:
    """A variant whose outputs need no kernel (all inputs or constants) still has a (empty) launch plan; a
    variant whose outputs are computed cannot have one (nothing would write them)."""
    _, variant, schedule = golden_model()
    empty = dataclasses.replace(schedule, kernels=(), buffers=(), arena_bytes=0, flags=0)
    w = np.ones(3, np.float32)
    passthrough = make_graph(
        {"x": TensorType(DType.float32, (2,))}, lambda b, x: [x, const(b, "w", w)], constants={"w": w}
    )
    art = read_artifact(write(passthrough, empty))
    assert (
        tuple(v.plan for v in art.variants) == (empty,)
        and art.kernel_features == ("kernels",)
        and dict(art.kernels) == {}
    )
    with pytest.raises(ArtifactError, match=r"dataflow order check failed: graph output %\d+ is written by no launch"):
        write(variant, empty)


def test_an_unknown_feature_means_a_newer_aotc_is_needed() -> None:
    _, variant, schedule = golden_model()
    with mock.patch.object(encode, "GRAPH_FEATURES", ("graph", "sparse-weights")):
        data = write(variant, schedule)
    with pytest.raises(ArtifactError, match="needs feature 'sparse-weights', which this aotc release cannot use"):
        read_artifact(data)


def _kernel_features(*features: str) -> Any:
    """The writer naming ``features`` as the file's kernel features, whatever its plans need."""
    plan = plan_encode.plan_kernels
    return mock.patch.object(writer, "plan_kernels", lambda *a: dataclasses.replace(plan(*a), kernel_features=features))


def test_an_unknown_kernel_feature_leaves_the_cpu_path() -> None:
    _, variant, schedule = golden_model()
    with _kernel_features("kernels", "tensor-maps"):
        data = write(variant, schedule)
    art = read_artifact(data)
    assert art.unusable_kernel_features == ("tensor-maps",)
    assert tuple(v.plan for v in art.variants) == (None,) and dict(art.kernels) == {}
    feeds = [np.ones((2, 4, 16), np.float32), np.zeros((2, 4), np.int64)]
    assert len(aotc.load(data, device="cpu").run(dict(zip(variant.input_names, feeds)))) == 4
    with pytest.raises(UnsupportedError, match="has no kernels"):
        aotc.load(data, device="interpret")
    with _kernel_features("binaries"):
        data = write(variant, schedule)
    with pytest.raises(ArtifactError, match="kernel features \\['binaries'\\] do not match"):
        read_artifact(data)


def test_source_params_reads_the_def_line() -> None:
    src = "import triton\n\n@triton.jit\ndef k(\n    a,\n    n,\n    BLOCK: tl.constexpr,\n):\n    pass\n"
    assert source_params(src, "k") == ["a", "n", "BLOCK"]
    assert source_params(src, "other") is None


def test_fake_binary_metadata_is_what_triton_gives() -> None:
    _, _, schedule = golden_model()
    k = schedule.kernels[1]
    b = fake_binary(k)
    assert b.cubin("sm_90").meta == meta(k, "sm_90a", 2048)
    assert b.ptx_meta.params[-2:] == SCRATCH_PARAMS
    assert any(a.kind is ArgKind.FLAG for a in k.args) and isinstance(k.args[0], Arg)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_resealed_damage_to_kernel_tables_fails_cleanly(data: st.DataObject) -> None:
    """Random bytes of the newest golden file's FlatBuffer (mostly its kernel tables: sources, PTX, launch
    plans) changed and resealed: refused, or a model the writer writes exactly so (mutation.classify)."""
    start, end = fb_region(NEWEST)
    buf = bytearray(NEWEST)
    slots = NEWEST_SUBJECT.slots
    for _ in range(data.draw(st.integers(1, 4))):
        # near a structural integer (the cubin images are most of the bytes), so strings and tables get hit
        near = start + slots[data.draw(st.integers(0, len(slots) - 1))].pos
        i = min(max(near + data.draw(st.integers(-24, 24)), start), end - 1)
        buf[i] = data.draw(st.integers(0, 255))
    classify(NEWEST_SUBJECT, reseal(buf))


# -- per-target arch launches (schema 4) --------------------------------------------------------------


def _with_arch_launch(s: Schedule, index: int = 0, **changes: object) -> Schedule:
    k = s.kernels[index]
    name = f"{k.name}_sm90"
    v = k.replace(name=name, source=k.source.replace(f"def {k.name}(", f"def {name}(", 1), num_warps=8)
    v = v.replace(**changes) if changes else v
    # sealed as the compiler seals a plan: the arch launch's digest is that of its own code
    return with_kernel(s, index, lambda k: seal(golden_model()[1], k.replace(arch_launches=(ArchLaunch("sm_90", v),))))


def test_arch_launches_round_trip_and_name_their_kernel_feature() -> None:
    src, variant, schedule = golden_model()
    s = _with_arch_launch(schedule)
    binaries = fake_binaries(s)
    art = read_artifact(write(variant, s, binaries, source=src))
    assert tuple(v.plan for v in art.variants) == (s,) and art.kernel_features == (
        "kernels",
        "binaries",
        "arch_variants",
    )
    assert art.kernels[f"{schedule.kernels[0].name}_sm90"].archs == ("sm_90",)
    # without binaries too
    art = read_artifact(write(variant, s))
    assert tuple(v.plan for v in art.variants) == (s,) and art.kernel_features == ("kernels", "arch_variants")


def test_the_writer_refuses_an_arch_launch_that_is_another_launch() -> None:
    _, variant, schedule = golden_model()
    other = schedule.kernels[1]
    # the arch launch's code does not fit its source (the code checks run first, as in the reader) or the launch
    with pytest.raises(ArtifactError, match=r"does not take the launch's args|are not its args then constexprs"):
        write(variant, _with_arch_launch(schedule, args=other.args))
    with pytest.raises(ArtifactError, match="expected a target such as 'sm_90'"):
        bad = with_kernel(
            _with_arch_launch(schedule),
            0,
            lambda k: k.replace(arch_launches=(dataclasses.replace(k.arch_launches[0], arch="sm_90a"),)),
        )
        write(variant, bad)


def test_an_arch_launch_needs_its_targets_cubin() -> None:
    _, variant, schedule = golden_model()
    s = _with_arch_launch(schedule)
    name = f"{schedule.kernels[0].name}_sm90"
    binaries = tuple(
        b if b.name != name else dataclasses.replace(b, cubins=(), ptx=b.ptx, ptx_meta=b.ptx_meta)
        for b in fake_binaries(s)
    )
    with pytest.raises(ArtifactError, match="has no sm_90 cubin"):
        write(variant, s, binaries)


def test_a_reader_that_does_not_know_arch_variants_runs_the_file_on_the_cpu() -> None:
    _, variant, schedule = golden_model()
    data = write(variant, _with_arch_launch(schedule), fake_binaries(_with_arch_launch(schedule)))
    with mock.patch.object(plan_decode, "KNOWN_KERNEL_FEATURES", ("kernels", "binaries")):
        art = read_artifact(data)
    assert art.unusable_kernel_features == ("arch_variants",) and tuple(v.plan for v in art.variants) == (None,)


def test_a_schema_3_file_with_arch_launches_is_refused() -> None:
    from aotc.artifact import writer

    _, variant, schedule = golden_model()
    with mock.patch.object(writer, "SCHEMA_VERSION", 3):
        data = write(variant, _with_arch_launch(schedule))
    # today's writer also writes schema 6's and 8's fields, which a schema 3 file may be refused for first
    with pytest.raises(
        ArtifactError, match=r"schema version 3 file holds (schema 4 arch launches|schema 6|a schema 8)"
    ):
        read_artifact(data)
