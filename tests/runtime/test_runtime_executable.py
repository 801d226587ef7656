"""load() and Executable: sources, devices, output structure, owned outputs, variants, threads."""

from __future__ import annotations

from multiprocessing.pool import ThreadPool

import numpy as np
import pytest
from runtime_graphs import artifact_bytes, const, make_graph

import aotc
import aotc.runtime
from aotc.artifact import read_artifact, save_artifact
from aotc.errors import AotcError, ArtifactError, GuardError, UnsupportedError
from aotc.ir import DType, Graph, Op, Symbol, TensorType, sym
from aotc.ir.evaluate import run_graph
from aotc.runtime import Executable, InputSpec

F32 = DType.float32
batch, seq = sym("batch"), sym("seq")
W = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 7


def mlp(scale: float = 1.0, max_batch: int = 16, name: str = "mlp") -> Graph:
    def body(b, x):
        h = b.op(Op.MATMUL, x, const(b, "w", W))
        h = b.op(Op.MUL, b.op(Op.MAXIMUM, h, b.full(0.0, F32)), b.full(scale, F32))
        return [h, b.op(Op.REDUCE_SUM, h, axes=(1, 2), keepdim=False)]

    return make_graph(
        {"x": TensorType(F32, (batch, seq, 4))},
        body,
        symbols=(Symbol("batch", 1, max_batch), Symbol("seq", 1, 64)),
        constants={"w": W},
        tree={"dict": [["h", 0], ["stats", {"tuple": [1]}]]},
        name=name,
    )


def sample(b: int = 2, s: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((b, s, 4)).astype(np.float32)


def test_call_returns_the_output_structure() -> None:
    g = mlp()
    exe = aotc.runtime.load(artifact_bytes(g))
    x = sample()
    want = run_graph(g, [x], {"batch": 2, "seq": 5})
    out = exe(x)
    assert set(out) == {"h", "stats"} and isinstance(out["stats"], tuple)
    np.testing.assert_array_equal(out["h"], want[0])
    np.testing.assert_array_equal(out["stats"][0], want[1])
    np.testing.assert_array_equal(exe(x=x)["h"], want[0])
    flat = exe.run({"x": x})
    assert isinstance(flat, list) and len(flat) == 2
    np.testing.assert_array_equal(flat[1], want[1])


def test_load_sources(tmp_path) -> None:
    g = mlp()
    path = tmp_path / "m.aotc"
    save_artifact(path, [g])
    data = path.read_bytes()
    for source in (path, str(path), data, read_artifact(data)):
        exe = aotc.runtime.load(source)
        assert exe.device == "cpu"
        assert exe(sample())["h"].shape == (2, 5, 3)
    assert aotc.load is aotc.runtime.load and aotc.Executable is Executable
    with pytest.raises(ArtifactError):
        aotc.runtime.load(data[:-3])
    with pytest.raises(ArtifactError):
        aotc.runtime.load(tmp_path / "nope.aotc")


def test_devices() -> None:
    data = artifact_bytes(mlp())
    assert aotc.runtime.load(data, device="cpu").device == "cpu"
    assert aotc.runtime.load(data, device=None).device == "cpu"
    for device in ("cuda", "cuda:0", "interpret"):
        with pytest.raises(UnsupportedError, match=f"device '{device}' is not available"):
            aotc.runtime.load(data, device=device)
    with pytest.raises(AotcError, match="unknown device 'tpu'"):
        aotc.runtime.load(data, device="tpu")
    with pytest.raises(AotcError, match="device must be a string"):
        aotc.runtime.load(data, device=0)  # type: ignore[arg-type]


def test_introspection() -> None:
    exe = aotc.runtime.load(artifact_bytes(mlp()))
    assert exe.input_names == ("x",)
    assert exe.inputs == (InputSpec("x", F32, (batch, seq, 4)),)
    assert str(exe.inputs[0]) == "x: float32[batch, seq, 4]"
    assert exe.artifact.name == "mlp"
    assert repr(exe) == "<Executable 'mlp' on cpu: (x: float32[batch, seq, 4])>"
    with pytest.raises(AotcError, match="needs an Artifact"):
        Executable(b"bytes")  # type: ignore[arg-type]


def test_outputs_are_owned_by_the_caller() -> None:
    """Constants, views of them, inputs and repeated values all come back as separate writable arrays."""

    def body(b, x):
        c = const(b, "w", W)
        return [c, b.op(Op.RESHAPE, c, shape=(12,)), x, x, b.op(Op.RESHAPE, x, shape=(8,))]

    g = make_graph({"x": TensorType(F32, (2, 4))}, body, constants={"w": W})
    exe = aotc.runtime.load(artifact_bytes(g))
    x = np.ones((2, 4), np.float32)
    outs = exe.run({"x": x})
    consts = list(exe.artifact.constants.values())
    for i, out in enumerate(outs):
        assert out.flags.writeable, i
        assert not any(np.may_share_memory(out, c) for c in [x, *consts]), i
        assert not any(np.may_share_memory(out, o) for o in outs[:i]), i
    outs[0][:] = 0
    outs[2][:] = 0
    again = exe.run({"x": x})
    np.testing.assert_array_equal(again[0], W)
    np.testing.assert_array_equal(x, 1)


def test_first_variant_whose_guards_hold_runs() -> None:
    small, large = mlp(scale=2.0, max_batch=2, name="small"), mlp(scale=3.0, max_batch=16, name="large")
    exe = aotc.runtime.load(artifact_bytes(small, large))
    x1, x8 = sample(b=1), sample(b=8)
    np.testing.assert_allclose(exe(x1)["h"], run_graph(small, [x1], {"batch": 1, "seq": 5})[0])
    np.testing.assert_allclose(exe(x8)["h"], run_graph(large, [x8], {"batch": 8, "seq": 5})[0])
    with pytest.raises(GuardError) as e:
        exe(sample(b=20))
    assert str(e.value) == (
        "the inputs fit no variant of the model:\n"
        "  variant 0 (small): input 'x' dim 0 (batch) = 20 is outside [1, 2]\n"
        "  variant 1 (large): input 'x' dim 0 (batch) = 20 is outside [1, 16]"
    )


def test_one_executable_serves_many_threads() -> None:
    g = mlp()
    exe = aotc.runtime.load(artifact_bytes(g))
    jobs = [(1 + i % 7, 1 + (3 * i) % 11, i) for i in range(160)]
    want = [run_graph(g, [sample(b, s, seed)], {"batch": b, "seq": s}) for b, s, seed in jobs]

    def call(job: tuple[int, int, int]) -> list[np.ndarray]:
        b, s, seed = job
        return exe.run({"x": sample(b, s, seed)})

    with ThreadPool(8) as pool:
        got = pool.map(call, jobs)
    for w, o in zip(want, got):
        for a, b in zip(w, o):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)  # device=None: onnxruntime, in its own order


def test_a_shapes_variant_is_remembered_refusals_are_not_and_the_memory_is_bounded(monkeypatch) -> None:
    import aotc.runtime.executable as executable

    monkeypatch.setattr(executable, "CHOSEN_SHAPES", 2)
    small, large = mlp(scale=2.0, max_batch=2, name="small"), mlp(scale=3.0, max_batch=16, name="large")
    exe = aotc.runtime.load(artifact_bytes(small, large), device="reference")
    envs: list[dict[str, int]] = []
    for _, program in exe._variants:
        real = program.run

        def spy(feeds, env, real=real):
            envs.append(dict(env))
            env["batch"] = -1  # a program that writes to its env spoils no later call
            return real(feeds, env)

        monkeypatch.setattr(program, "run", spy)
    for b, s, graph in [(1, 5, small), (8, 5, large), (1, 5, small), (8, 3, large), (8, 5, large), (2, 5, small)]:
        x = sample(b, s)
        np.testing.assert_array_equal(exe(x)["h"], run_graph(graph, [x], {"batch": b, "seq": s})[0])
        assert envs.pop() == {"batch": b, "seq": s}
        assert len(exe._chosen) <= 2
    for _ in range(2):
        with pytest.raises(GuardError, match=r"^the inputs fit no variant of the model:\n  variant 0 \(small\)"):
            exe(sample(b=20))
    assert envs == [] and all(shapes != ((20, 5, 4),) for shapes in exe._chosen)
