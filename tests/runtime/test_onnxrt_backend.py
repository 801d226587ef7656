"""How device="cpu" picks its engine, what the ONNX model an artifact stores looks like, the threads option, and
how the onnxruntime backend answers bad ids and its own failures."""

from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from ort_kit import executable

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec, nn
from aotc.artifact import describe
from aotc.artifact.reader import read_artifact
from aotc.errors import AotcError, ExecError, FallbackWarning
from aotc.ir.onnx_form import emitters
from aotc.ir.ops import Op
from aotc.lowering.options import CompileOptions
from aotc.onnx.runtime_model import runtime_onnx
from aotc.runtime.backends import CpuBackend, cpu_backend, get_backend
from aotc.runtime.backends.cpu import CpuProgram
from aotc.runtime.backends.onnxrt import OrtBackend, OrtProgram

pytest.importorskip("onnxruntime")

OPTIONS = CompileOptions(kernels=False, targets=())
SPEC = {"x": TensorSpec((Dim("batch", min=1, max=8), 16), "float32")}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return {"y": self.fc2(F.gelu(self.fc1(x))), "e": aotc.exp(x)}


@pytest.fixture(scope="module")
def compiled() -> aotc.CompiledModel:
    return aotc.compile(Net(), SPEC, options=OPTIONS)


def test_the_stored_model_holds_no_weight_data_and_names_each_weight(compiled) -> None:
    artifact = read_artifact(compiled.artifact_bytes)
    made = runtime_onnx(artifact.source)
    model = onnx.load_from_string(made.model)
    onnx.checker.check_model(model, full_check=True)
    weights = json.loads({p.key: p.value for p in model.metadata_props}["aotc.weights"])
    assert set(weights.values()) == set(artifact.source.constants)
    assert [i.name for i in model.graph.input] == ["x", *weights]
    assert all(t.name not in weights for t in model.graph.initializer)
    assert sum(len(t.raw_data) for t in model.graph.initializer) < 1024  # small constants only (axes, scalars)
    assert len(made.model) < 16 * 1024


def test_the_compiler_stores_the_model_and_cpu_runs_it(compiled) -> None:
    artifact = read_artifact(compiled.artifact_bytes)
    assert artifact.schema_version >= 7 and artifact.onnx == runtime_onnx(artifact.source).model
    assert artifact.meta["onnx"] == {"stored": True, "nodes": 11, "weights": 4, "widened_from": []}
    for device in ("cpu", None):
        exe = aotc.load(compiled.artifact_bytes, device=device)
        assert isinstance(exe._backend, OrtBackend) and exe.device == "cpu"
    assert describe(artifact)["onnx"] == {
        "stored": True, "bytes": len(artifact.onnx), "nodes": 11, "weights": 4, "computes_in": "float32",
        "widened_from": [],
    }  # fmt: skip


def test_a_graph_the_exporter_cannot_write_stores_none_and_explain_names_the_op(monkeypatch) -> None:
    monkeypatch.delitem(emitters.EMITTERS, Op.EXP)  # exp is a primitive: without its emitter it has no ONNX form
    compiled = aotc.compile(Net(), SPEC, options=OPTIONS)
    assert compiled.onnx_note.startswith("onnx: none stored") and "exp" in compiled.onnx_note
    assert compiled.onnx_note in compiled.explain().splitlines()
    artifact = read_artifact(compiled.artifact_bytes)
    assert artifact.onnx is None and "exp" in describe(artifact)["onnx"]["reason"]
    exe = aotc.load(artifact, device="cpu")  # quietly: filterwarnings makes any warning an error here
    assert exe.device == "cpu" and all(isinstance(program, CpuProgram) for _, program in exe._variants)


def test_reference_is_the_numpy_references_by_name() -> None:
    backend = get_backend("reference")
    assert isinstance(backend, CpuBackend) and backend.name == "reference"


def test_cpu_without_onnxruntime_falls_back_with_one_line_saying_what_to_install(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.warns(RuntimeWarning, match=r"pip install 'aotc\[cpu\]'") as record:
        backend = cpu_backend(SimpleNamespace(constants={}))
    assert isinstance(backend, CpuBackend) and backend.name == "cpu"
    assert len(record) == 1 and "\n" not in str(record[0].message)


def test_cpu_with_no_artifact_runs_the_references_quietly() -> None:
    assert isinstance(cpu_backend(), CpuBackend)


@pytest.mark.parametrize("threads", [1, 2, 0])
def test_intra_op_threads(compiled, threads: int) -> None:
    exe = executable(compiled.artifact_bytes, "onnxruntime", threads=threads)
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    want = executable(compiled.artifact_bytes, "reference")(x=x)
    got = exe(x=x)
    assert set(got) == {"y", "e"}
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [-1, 1.5, True, "2"])
def test_bad_threads_are_refused(compiled, threads: object) -> None:
    with pytest.raises(AotcError, match="threads must be a non-negative integer"):
        aotc.load(compiled.artifact_bytes, device="cpu", threads=threads)  # type: ignore[arg-type]


class Shifted(nn.Module):
    """An embedding whose ids are computed (ids + 1), so no input check can see a bad one before it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(10, 4)

    def forward(self, ids):
        return self.wte(ids + 1)


def test_a_bad_id_computed_inside_the_model_raises_aotcs_error_and_onnxruntime_says_nothing(capfd) -> None:
    spec = {"ids": TensorSpec((Dim("n", min=1, max=8),), "int64")}
    compiled = aotc.compile(Shifted(), spec, options=OPTIONS)
    exe, reference = (executable(compiled.artifact_bytes, p) for p in ("onnxruntime", "reference"))
    ids = np.array([0, 9, 2])
    with pytest.raises(ExecError) as fast:
        exe(ids=ids)
    with pytest.raises(ExecError) as ref:
        reference(ids=ids)
    assert str(fast.value) == str(ref.value) and "computed inside the model" in str(fast.value)
    np.testing.assert_array_equal(exe(ids=np.array([0, 8])), reference(ids=np.array([0, 8])))
    assert capfd.readouterr().err == ""


class Sub5(nn.Module):
    """An embedding whose ids are ``x - 5``: computed, so only the ids' min and max after the run can see a negative
    one (onnxruntime's Gather would wrap it and read the table's end)."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(10, 4)

    def forward(self, ids):
        return self.wte(ids - 5)


def test_a_negative_id_computed_inside_the_model_raises_the_references_error() -> None:
    spec = {"ids": TensorSpec((Dim("n", min=1, max=8),), "int64")}
    data = aotc.compile(Sub5(), spec, options=OPTIONS).artifact_bytes
    exe, reference = aotc.load(data, device="cpu"), aotc.load(data, device="reference")
    assert isinstance(exe._backend, OrtBackend) and isinstance(exe._variants[0][1], OrtProgram)
    for ids in (np.array([5, 4, 9]), np.array([15, 5])):  # -1 at [1]; 10 at [0]
        with pytest.raises(ExecError) as fast:
            exe(ids=ids)
        with pytest.raises(ExecError) as ref:
            reference(ids=ids)
        assert str(fast.value) == str(ref.value) and "computed inside the model" in str(fast.value)
    good = np.array([5, 14, 7])
    np.testing.assert_array_equal(exe(ids=good), reference(ids=good))


class Positions(nn.Module):
    """GPT-2's position embedding: rows ``arange(seq)`` of a table that covers every seq, so the graph proves the
    ids valid and the model has no id outputs to check."""

    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(10, 4), nn.Embedding(8, 4)

    def forward(self, ids):
        return self.wte(ids) + self.wpe(aotc.arange(ids.shape[1]))


def test_positions_an_arange_computes_need_no_check_and_a_bad_token_id_still_raises() -> None:
    spec = {"ids": TensorSpec((Dim("batch", min=1, max=4), Dim("seq", min=1, max=8)), "int64")}
    data = aotc.compile(Positions(), spec, options=OPTIONS).artifact_bytes
    exe, reference = aotc.load(data, device="cpu"), aotc.load(data, device="reference")
    program = exe._variants[0][1]
    assert isinstance(program, OrtProgram) and program._bounds == () and len(program._session.get_outputs()) == 1
    ids = np.array([[0, 9, 3, 1, 2, 5, 7, 8]] * 2)
    np.testing.assert_allclose(exe(ids=ids), reference(ids=ids), rtol=1e-6, atol=1e-6)
    with pytest.raises(ExecError) as fast:
        exe(ids=ids + 1)
    with pytest.raises(ExecError) as ref:
        reference(ids=ids + 1)
    assert str(fast.value) == str(ref.value) and "in input 'ids'" in str(fast.value)


class FailingSession:
    """Stands in for an onnxruntime session that fails on every call, as onnxruntime can on valid inputs."""

    def __init__(self, session: object) -> None:
        self.get_outputs = session.get_outputs  # type: ignore[attr-defined]

    def run(self, *_: object) -> None:
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code\nstack trace")


def test_onnxruntime_failing_on_valid_inputs_falls_back_to_the_references_with_one_warning(compiled) -> None:
    exe = aotc.load(compiled.artifact_bytes, device="cpu")
    program = exe._variants[0][1]
    program._call = FailingSession(program._session).run
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    want = aotc.load(compiled.artifact_bytes, device="reference")(x=x)
    first_line = r"\(\[ONNXRuntimeError\] : 6 : RUNTIME_EXCEPTION : Non-zero status code\)"
    with pytest.warns(FallbackWarning, match=first_line) as record:
        for _ in range(3):
            got = exe(x=x)
            for k in want:
                np.testing.assert_array_equal(got[k], want[k])
    assert len(record) == 1 and "stack trace" not in str(record[0].message)
    assert "numpy references" in str(record[0].message)


def test_a_model_onnxruntime_refuses_runs_on_the_references_with_a_warning(compiled, monkeypatch) -> None:
    import onnxruntime

    def refuse(*_: object, **__: object) -> None:
        raise RuntimeError("[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model failed\nmore")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)
    with pytest.warns(FallbackWarning, match=r"cannot run graph 'Net' \(\[ONNXRuntimeError\] .* failed\)"):
        exe = aotc.load(compiled.artifact_bytes, device="cpu")
    assert all(isinstance(program, CpuProgram) for _, program in exe._variants)
    x = np.ones((2, 16), np.float32)
    for got, want in zip(exe.run({"x": x}), aotc.load(compiled.artifact_bytes, device="reference").run({"x": x})):
        np.testing.assert_array_equal(got, want)


def test_a_call_runs_the_session_with_one_run_options_for_every_call(compiled) -> None:
    """A RunOptions built per call costs about half a microsecond of a small model's call: one serves every call."""
    import onnxruntime

    exe = aotc.load(compiled.artifact_bytes, device="cpu")
    program = exe._variants[0][1]
    assert program._call == program._session.run
    assert isinstance(program._options, onnxruntime.RunOptions)
