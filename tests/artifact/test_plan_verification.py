"""The reader verifies a launch plan before anything runs it: hostile plans (plan_kit.py: written by the project's
own writer with its plan checks off, resealed) are refused at load with an ArtifactError naming the variant, the
launch (index and kernel) and the check, and the CLI exits 1; what the symbolic layer cannot prove over the dims'
whole ranges is left as a per-shape fact (tests/runtime/test_plan_bounds.py runs those)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_kit import fake_binaries
from plan_kit import (
    BATCH,
    MIXED,
    SEQ,
    arg,
    buffer,
    launch,
    min_sized_buffer,
    mixed_overlap,
    model,
    times,
    with_arch_launch,
    write,
)

from aotc.artifact import read_artifact
from aotc.artifact.plan_checks import plan_facts
from aotc.errors import ArtifactError
from aotc.ir.ops import Op
from aotc.ir.schedule import Schedule, View
from aotc.ir.symbolic import add, floordiv, mod, mul, smax, smin, sym
from aotc.ir.symbolic_values import evaluate, prove_nonneg
from aotc.ir.variant import Variant
from aotc_cli.errors import EXIT_USER
from aotc_cli.main import cli


def _ids() -> dict[str, int]:
    graph, s = model()
    out = {"x": graph.inputs[0].id, "out": graph.outputs[0].id}
    for node in graph.nodes:
        if node.op is Op.CONSTANT:
            out[node.attrs["name"]] = node.outputs[0].id
    out["h1"], out["h1w3"] = s.buffers[0].value, s.buffers[1].value
    return out


def _where(i: int) -> str:
    return rf"variant 0 schedule launch {i} \({re.escape(model()[1].kernels[i].name)}\)"


Change = Callable[[Schedule], Schedule]


def _attacks() -> list[tuple[str, Change, str]]:
    """(label, the hostile plan, what the refusal says)."""
    ids = _ids()
    x, w2, w3, h1 = ids["x"], ids["w2"], ids["w3"], ids["h1"]
    need = r"grid check failed: grid\[0\] = .* <= 2\*\(\(batch\*seq \+ 127\)//128\), what its template launches"
    short = r"grid check failed: grid\[0\] = .* >= 2\*\(\(batch\*seq \+ 127\)//128\), what its template launches"
    return [
        # grids: doubled (reads past a weight, stores past the output where no mask guards the rows), 64x
        # (segfaulted the interpret backend), 2**31 - 1 programs (hung it)
        ("grid doubled", lambda s: launch(s, 0, grid=times(2)(s.kernels[0])), f"{_where(0)}: {need}"),
        ("grid x64", lambda s: launch(s, 2, grid=times(64)(s.kernels[2])), f"{_where(2)}: {need}"),
        ("grid 2**31-1", lambda s: launch(s, 1, grid=(2**31 - 1, 1, 1)), f"{_where(1)}: {need}"),
        ("grid y", lambda s: launch(s, 1, grid=(s.kernels[1].grid[0], 70_000, 1)), rf"{_where(1)}: grid check"),
        ("grid z", lambda s: launch(s, 1, grid=(s.kernels[1].grid[0], 1, BATCH)), rf"{_where(1)}: grid check"),
        (
            "an arch launch's grid doubled",
            lambda s: with_arch_launch(s, 1, times(2)),
            rf"{_where(1)} arch launch 'sm_90': {need}",
        ),
        # and no fewer programs: one short leaves a tile of the output unwritten (on a GPU: the previous call's data)
        ("grid one short", lambda s: launch(s, 0, grid=(add(s.kernels[0].grid[0], -1), 1, 1)), f"{_where(0)}: {short}"),
        (
            "an arch launch's grid one short",
            lambda s: with_arch_launch(s, 1, lambda k: (add(k.grid[0], -1), 1, 1)),
            rf"{_where(1)} arch launch 'sm_90': {short}",
        ),
        # size args
        (
            "size arg (* 100 batch)",
            lambda s: arg(s, 0, "M", size=100 * BATCH),
            rf"{_where(0)} arg 3 \(M\): size args check failed: 100\*batch is no dim",
        ),
        (
            "size arg named after a dim",
            lambda s: launch(
                s,
                1,
                args=tuple(replace(a, name="seq") if a.name == "M" else a for a in s.kernels[1].args),
                source=re.sub(r"\bM\b", "seq", s.kernels[1].source),
            ),
            rf"{_where(1)} arg 3 \(seq\): size args check failed: an arg named after dim 'seq' passes batch\*seq",
        ),
        # output pointers
        (
            "output pointer aimed at the graph input",
            lambda s: arg(s, 0, "out_ptr", value=x),
            rf"{_where(0)} arg 2 \(out_ptr\): buffer args check failed: value %{x} is also passed as x_ptr",
        ),
        (
            "output pointer aimed at a weight",
            lambda s: arg(s, 1, "out_ptr", value=w2),
            rf"{_where(1)} arg 2 \(out_ptr\): buffer args check failed: value %{w2} is neither read nor written",
        ),
        (
            "input and output pointers swapped",
            lambda s: arg(arg(s, 1, "out_ptr", value=h1), 1, "x_ptr", value=ids["h1w3"]),
            rf"{_where(1)} arg 0 \(x_ptr\): buffer args check failed: the launch writes value %{ids['h1w3']}, "
            "but the kernel's arg is x_ptr",
        ),
        (
            "a view onto the graph input",
            lambda s: _view(s, ids["out"], x),
            rf"{_where(2)}: writes value %{ids['out']}, a graph input or constant \(or a view of one\)",
        ),
        # the four cheap checks
        (
            "inputs miss what its nodes read",
            lambda s: launch(s, 1, inputs=(h1,)),
            rf"{_where(1)}: node reads check failed: its nodes read values \[{w3}\] it does not",
        ),
        (
            "inputs hold what its nodes do not read",
            lambda s: launch(s, 1, inputs=(h1, w3, x)),
            rf"{_where(1)}: node reads check failed: it reads values \[{x}\] its nodes do not",
        ),
        (
            "a buffer arg outside its inputs and outputs",
            lambda s: arg(s, 1, "w3_ptr", value=w2),
            rf"{_where(1)} arg 1 \(w3_ptr\): buffer args check failed: value %{w2} is neither read nor written",
        ),
        (
            "launches out of dataflow order",
            lambda s: launch(launch(s, 0, **_launch_fields(s.kernels[1])), 1, **_launch_fields(s.kernels[0])),
            rf"variant 0 schedule launch 0 \({re.escape(model()[1].kernels[1].name)}\): dataflow order check failed: "
            rf"it reads value %{h1} before any launch writes it",
        ),
        (
            "flags of u32 max",
            lambda s: _flags(s, 2**32 - 1),
            "variant 0 schedule: flag slots check failed: flags is 4294967295, but its launches check 0 slots",
        ),
        ("flags above its slots", lambda s: _flags(s, 1), "flag slots check failed: flags is 1"),
        # the memory plan
        (
            "a buffer's lifetime ends before a read",
            lambda s: buffer(s, 0, last=0),
            r"variant 0 schedule buffer 0: buffer lifetime check failed: lifetime 0..0 does not cover launches 0..1",
        ),
        (
            "an arena far larger than its buffers (each call would allocate it)",
            lambda s: _arena(s, 2**40 * BATCH),
            r"variant 0 schedule: arena check failed: arena_bytes <= the end of its buffers is false",
        ),
        (
            "a buffer far larger than its value",
            lambda s: buffer(s, 1, nbytes=2**40 * BATCH),
            rf"variant 0 schedule buffer 1: buffer size check failed: nbytes <= the bytes of value %{ids['h1w3']}",
        ),
        (
            "a buffer too small at the ends of the ranges",
            lambda s: buffer(s, 0, nbytes=768 * BATCH),
            r"variant 0 schedule buffer 0: buffer size check failed: at .* it holds 6144 bytes for a 393216-byte",
        ),
    ]


def _launch_fields(k):  # type: ignore[no-untyped-def]
    return {f: getattr(k, f) for f in ("name", "kind", "nodes", "inputs", "outputs", "args", "grid", "source")} | {
        f: getattr(k, f) for f in ("constexprs", "num_warps", "num_stages", "divisible", "checks", "fused")
    }


def _flags(s: Schedule, n: int) -> Schedule:
    import dataclasses

    return dataclasses.replace(s, flags=n)


def _arena(s: Schedule, arena: object) -> Schedule:
    import dataclasses

    return dataclasses.replace(s, arena_bytes=arena)


def _view(s: Schedule, value: int, base: int) -> Schedule:
    import dataclasses

    return dataclasses.replace(s, views=(View(value, base),))


ATTACKS = _attacks()


def test_the_model_plan_verifies_with_nothing_left_per_shape() -> None:
    _, s = model()
    art = read_artifact(write(s))
    assert tuple(v.plan for v in art.variants) == (s,)
    facts = plan_facts(art.variants[0].graph, art.variants[0].plan)
    assert facts.facts == () and facts.live == ()


@pytest.mark.parametrize(("label", "change", "match"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_hostile_plan_is_refused_at_load(label: str, change: Change, match: str) -> None:
    _, s = model()
    data = write(change(s))
    with pytest.raises(ArtifactError, match=match):
        read_artifact(data)


@pytest.mark.parametrize(("label", "change", "match"), ATTACKS[:3], ids=[a[0] for a in ATTACKS[:3]])
def test_the_writer_refuses_what_the_reader_refuses(label: str, change: Change, match: str) -> None:
    from aotc.artifact import write_artifact

    graph, s = model()
    with pytest.raises(ArtifactError, match=match):
        write_artifact([Variant(graph, change(s))])


@pytest.mark.parametrize("label", ["grid doubled", "size arg (* 100 batch)", "flags of u32 max"])
def test_the_cli_exits_1_naming_the_launch_and_the_check(label: str, tmp_path: Path) -> None:
    _, change, match = next(a for a in ATTACKS if a[0] == label)
    path = tmp_path / "attack.aotc"
    path.write_bytes(write(change(model()[1])))
    result = CliRunner().invoke(cli, ["inspect", str(path)])
    assert result.exit_code == EXIT_USER, (result.exit_code, result.output)
    assert re.search(match, result.stderr), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("change", "fact"),
    [(min_sized_buffer, "buffer size"), (mixed_overlap, None)],
    ids=["min(batch, seq) buffer", "overlap at mixed dims"],
)
def test_what_holds_at_both_ends_but_not_in_between_is_left_per_shape(change: Change, fact: str | None) -> None:
    """Both files pass a check at every dim's min and max; the symbolic layer cannot prove them over the whole
    ranges, so they load with the fact left for the call (tests/runtime/test_plan_bounds.py refuses the call)."""
    art = read_artifact(write(change(model()[1])))
    facts = plan_facts(art.variants[0].graph, art.variants[0].plan)
    if fact is None:  # the overlap: the buffers are swept per shape
        assert facts.live == art.variants[0].plan.buffers
    else:
        assert {f.check for f in facts.facts} == {fact} and all("buffer 0" in f.what for f in facts.facts)
        assert any(evaluate(f.expr, MIXED) < 0 for f in facts.facts)
        ends = ({"batch": 1, "seq": 1}, {"batch": 8, "seq": 64})
        assert all(evaluate(f.expr, env) >= 0 for f in facts.facts for env in ends)


# -- the proofs the checks rest on ----------------------------------------------------------------------

RANGES = {"batch": (1, 8), "seq": (1, 64)}
_ATOMS = [BATCH, SEQ, 768 * BATCH * SEQ, smin(BATCH, SEQ), smax(BATCH, SEQ), floordiv(BATCH * SEQ + 127, 128)]


def _exprs() -> st.SearchStrategy:
    leaf = st.one_of(st.sampled_from(_ATOMS), st.integers(-300, 300))

    def grow(inner: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(
            st.tuples(inner, inner).map(lambda t: add(*t)),
            st.tuples(inner, st.integers(-4, 4)).map(lambda t: mul(*t)),
            st.tuples(inner, inner).map(lambda t: smax(*t)),
            st.tuples(inner, inner).map(lambda t: smin(*t)),
            st.tuples(inner, st.sampled_from([2, 128, 256])).map(
                lambda t: mul(floordiv(add(t[0], t[1] - 1), t[1]), t[1])
            ),
            st.tuples(inner, st.sampled_from([3, 256])).map(lambda t: mod(t[0], t[1])),
            st.tuples(inner, st.sampled_from([7, 1024])).map(lambda t: floordiv(t[0], t[1])),
            st.tuples(inner, st.sampled_from([BATCH, SEQ])).map(lambda t: mul(*t)),
        )

    return st.recursive(leaf, grow, max_leaves=6)


@settings(max_examples=500, deadline=None)
@given(_exprs(), st.integers(1, 64))
def test_a_proved_fact_holds_at_every_binding(e: object, seq: int) -> None:
    """prove_nonneg is sound: whatever it proves >= 0 over the ranges is >= 0 at every batch and at seq's ends,
    its small values and one drawn from its range."""
    if prove_nonneg(e, RANGES):  # type: ignore[arg-type]
        for batch in range(1, 9):
            for s in {1, 2, 3, 63, 64, seq}:
                assert evaluate(e, {"batch": batch, "seq": s}) >= 0, (e, batch, s)  # type: ignore[arg-type]


def test_the_memory_plans_aligned_slots_are_proved_apart() -> None:
    """What the chain proof needs of memplan's offsets: a slot's aligned max size covers each tenant."""
    a, b = 768 * BATCH * SEQ, 3072 * SEQ
    aligned = mul(floordiv(add(smax(a, b), 255), 256), 256)
    assert prove_nonneg(aligned - a, RANGES) and prove_nonneg(aligned - b, RANGES)
    assert not prove_nonneg(768 * SEQ * smin(BATCH, SEQ) - a, RANGES)
    assert not prove_nonneg(sym("seq") - 65, RANGES)


@pytest.mark.parametrize(
    ("field", "value"), [("global_scratch_size", 2**32 - 1), ("num_ctas", 2**32 - 1), ("shared", 2**31)]
)
def test_launch_metadata_counts_are_bounded_before_anything_is_sized_by_them(field: str, value: int) -> None:
    """The runtime sizes a launch's scratch (per CTA, times the grid) and its cluster from these u32 fields."""
    import dataclasses

    from kernel_kit import unchecked
    from mutation import reseal

    from aotc.artifact import write_artifact

    graph, s = model()
    binaries = list(fake_binaries(s))
    b = binaries[0]
    cubin = dataclasses.replace(b.cubins[0], meta=dataclasses.replace(b.cubins[0].meta, **{field: value}))
    binaries[0] = dataclasses.replace(b, cubins=(cubin, *b.cubins[1:]))
    with unchecked():
        data = reseal(write_artifact([Variant(graph, s)], binaries=tuple(binaries)))
    with pytest.raises(ArtifactError, match=rf"sm_80 cubin: launch metadata {field} {value} is above"):
        read_artifact(data)
