"""``aotc run``'s input preparation and ``aotc inspect``'s output on a small hand-built artifact."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from aotc.artifact.writer import write_artifact
from aotc.ir.builder import Builder
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, Guard, Symbol
from aotc.ir.ops import Op
from aotc.ir.shapes import ShapeCtx
from aotc.ir.symbolic import sym
from aotc.ir.types import TensorType
from aotc.lowering.pipeline import lower
from aotc_cli.errors import EXIT_USER, UserError
from aotc_cli.feeds import build_feeds, choose_dims, output_names, random_array
from aotc_cli.main import cli


def small_graph(guards: tuple[Guard, ...] = ()) -> Graph:
    """softmax(x) and mask + 1 over (batch, seq) with seq a multiple of 2."""
    batch, seq = sym("batch"), sym("seq")
    b = Builder(ShapeCtx({"batch": (1, 8), "seq": (1, 64)}, {"seq": 2}, ()))
    x = b.new_value(TensorType(DType.float32, (batch, seq, 4)))
    m = b.new_value(TensorType(DType.int64, (batch, seq)))
    probs = b.op(Op.SOFTMAX, x, axis=-1)
    plus = b.op(Op.ADD, b.cast(m, DType.float32), b.full(1.0, DType.float32))
    return Graph(
        inputs=(x, m),
        input_names=("x", "mask"),
        nodes=tuple(b.nodes),
        outputs=(probs, plus),
        output_tree={"dict": [["probs", 0], ["shifted", 1]]},
        symbols=(Symbol("batch", 1, 8), Symbol("seq", 1, 64, 2)),
        guards=guards,
        name="small",
    )


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    graph = small_graph((Guard(sym("seq"), ">=", 12, "model.py:7"),))
    path = tmp_path / "small.aotc"
    path.write_bytes(write_artifact([lower(graph)], source=graph, meta={}))
    return path


def test_output_names() -> None:
    assert output_names(0) == [(0, "output")]
    assert output_names({"tuple": [0, 1]}) == [(0, "0"), (1, "1")]
    tree = {"dict": [["logits", 1], ["cache", {"list": [0, 2]}]]}
    assert output_names(tree) == [(1, "logits"), (0, "cache.0"), (2, "cache.1")]


def test_choose_dims_meets_ranges_multiples_and_guards() -> None:
    assert choose_dims(small_graph(), {}) == {"batch": 8, "seq": 8}
    guarded = small_graph((Guard(sym("seq"), ">", 20, ""), Guard(sym("batch") * 2, "<", sym("seq") - 17, "")))
    env = choose_dims(guarded, {})
    assert env["seq"] % 2 == 0 and env["seq"] > 20 and 2 * env["batch"] < env["seq"] - 17
    assert choose_dims(small_graph(), {"seq": 30}) == {"batch": 8, "seq": 30}


def test_choose_dims_rejects_unknown_names() -> None:
    with pytest.raises(UserError, match=r"unknown dim 'heads'.*batch, seq"):
        choose_dims(small_graph(), {"heads": 3})


@pytest.mark.parametrize("dtype", list(DType))
def test_random_arrays_fit_their_dtype(dtype: DType) -> None:
    a = random_array(np.random.default_rng(0), dtype, (3, 50))
    assert a.shape == (3, 50) and a.dtype == dtype.np
    if dtype.is_int:
        assert set(np.unique(a)) == {0, 1}
    if dtype is DType.bool:
        assert a.any() and not a.all()


def test_build_feeds_binds_dims_from_files(tmp_path: Path) -> None:
    np.save(tmp_path / "m.npy", np.ones((3, 6), np.int64))
    feeds, env = build_feeds(small_graph(), {"mask": str(tmp_path / "m.npy")}, {}, random=True, seed=0)
    assert env == {"batch": 3, "seq": 6}
    assert feeds["x"].shape == (3, 6, 4) and list(feeds) == ["x", "mask"]
    with pytest.raises(UserError, match=r"dim 1 \(seq\) is 6 but seq is 4"):
        build_feeds(small_graph(), {"mask": str(tmp_path / "m.npy")}, {"seq": 4}, random=True, seed=0)
    with pytest.raises(UserError, match=r"give --input NAME=FILE\.npy or --random"):
        build_feeds(small_graph(), {"mask": str(tmp_path / "m.npy")}, {}, random=False, seed=0)


def test_run_and_inspect_a_hand_built_artifact(artifact: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    run = runner.invoke(cli, ["run", str(artifact), "--random", "-o", str(tmp_path / "o.npz")])
    assert run.exit_code == 0, run.output
    assert "dims: batch=8, seq=12" in run.stdout  # 8 breaks the guard seq >= 12
    assert "probs" in run.stdout and "shifted" in run.stdout
    with np.load(tmp_path / "o.npz") as out:
        np.testing.assert_allclose(out["probs"].sum(-1), 1.0, rtol=1e-6)
        assert set(np.unique(out["shifted"])) <= {1.0, 2.0}

    text = runner.invoke(cli, ["inspect", str(artifact)])
    assert text.exit_code == 0
    for expected in (
        "x     float32  (batch, seq, 4)",
        "seq    in [1, 64], multiple of 2",
        "seq >= 12  (from model.py:7)",
    ):
        assert expected in text.stdout
    info = json.loads(runner.invoke(cli, ["inspect", str(artifact), "--json"]).stdout)
    assert [i["name"] for i in info["inputs"]] == ["x", "mask"]
    # inspect verifies the header but does not read the weights unless asked to
    assert info["checksums"] == "header ok, segments not verified" and info["segments_verified"] is False
    info = json.loads(runner.invoke(cli, ["inspect", str(artifact), "--json", "--verify"]).stdout)
    assert info["checksums"] == "ok" and info["segments_verified"] is True


def test_guard_failure_is_a_user_error(artifact: Path) -> None:
    result = CliRunner().invoke(cli, ["run", str(artifact), "--random", "--dim", "seq=10"])
    assert result.exit_code == EXIT_USER
    assert result.stderr == "error: input 'x' dim 1 (seq) = 10 breaks guard seq >= 12 (recorded at model.py:7)\n"
