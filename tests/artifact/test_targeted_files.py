"""The hostile files of issue 15, each built with the project's own writer (plan checks off) and resealed, and what
becomes of each. Most are tested beside the check that refuses them; this module adds the CLI's answer to each
file refused at load, the one file whose change no check at load can see (a kernel's source that codegen's checks
cannot tell from another kernel's), and files whose stored ONNX model was changed (the runtime never runs it).

==========================================================  =========================================================
file                                                        what happens (where it is tested)
==========================================================  =========================================================
grid doubled, x64, 2**31-1                                  refused at load: grid check (test_plan_verification.py)
size arg ``(* 100 batch)``                                  refused at load: size args check (same)
output pointer aimed at the graph input / at a weight       refused at load: buffer args check (same)
an sm_90 variant with a doubled grid                        refused at load: grid check of the variant (same)
flags = u32 max                                             refused at load: flag slots check (same)
buffer ``768*seq*min(batch, seq)``                          loads; the call at batch=4, seq=2 is refused before any
                                                            launch, interpret and fake cuda (runtime/test_plan_bounds)
an offset overlapping a live buffer only at mixed dims      the same
LayerNorm eps 1e-5 -> 1.00001 the kernels don't follow      refused at load: digest check (test_plan_binding.py)
module-level Python in a kernel's source                    interpret refuses it at load, never runs it
the gather bound 512 -> 912 in a kernel's source            loads (the reader cannot see what a bound in Triton text
                                                            guards); token id 600 is refused at the call by the
                                                            address fence on interpret and in the fake driver, before
                                                            the read (here). On a GPU the cubin runs: only a
                                                            signature vouches for code (README, Security)
the stored ONNX model edited (a Relu made a Sigmoid), or    loads; device='cpu' computes what the variant graph does:
replaced by garbage                                         onnxruntime runs a model the runtime writes from that
                                                            graph, never the stored one (here)
==========================================================  =========================================================

Every file refused at load: ``aotc run`` and ``aotc inspect`` exit 1 with one line naming the launch and the check.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from kernel_kit import SOURCE_REFUSAL, fake_binaries, fence_only, unchecked
from mutation import reseal
from plan_kit import model, write
from test_plan_binding import GRAPH_EDITS
from test_plan_verification import ATTACKS

import aotc
import aotc.functional as F
from aotc import Dim, TensorSpec
from aotc.artifact import read_artifact, write_artifact
from aotc.artifact.reader import Artifact
from aotc.errors import ArtifactError, ExecError
from aotc.ir.digest import seal
from aotc.ir.variant import Variant
from aotc.runtime import Executable
from aotc_cli.errors import EXIT_USER
from aotc_cli.main import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from fake_cuda import FakeDriver

REFUSED_AT_LOAD = [
    "grid doubled",
    "grid x64",
    "grid 2**31-1",
    "size arg (* 100 batch)",
    "output pointer aimed at the graph input",
    "output pointer aimed at a weight",
    "an arch launch's grid doubled",
    "flags of u32 max",
]


@pytest.mark.parametrize("label", REFUSED_AT_LOAD)
@pytest.mark.parametrize("command", ["run", "inspect"])
def test_the_cli_exits_1_on_each_file_refused_at_load(label: str, command: str, tmp_path: Path) -> None:
    _, change, match = next(a for a in ATTACKS if a[0] == label)
    path = tmp_path / "attack.aotc"
    path.write_bytes(write(change(model()[1]), binaries=True))
    args = [command, str(path), *(["--random", "--device", "interpret"] if command == "run" else [])]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == EXIT_USER, (result.exit_code, result.output)
    assert re.search(match, result.stderr), result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_the_cli_exits_1_on_a_graph_edit_its_kernels_do_not_follow(tmp_path: Path) -> None:
    _, s, graph = GRAPH_EDITS["LayerNorm eps 1e-5 -> 1.00001"]
    path = tmp_path / "eps.aotc"
    with unchecked():
        path.write_bytes(reseal(write_artifact([Variant(graph, s)])))
    result = CliRunner().invoke(cli, ["run", str(path), "--random", "--device", "interpret"])
    assert result.exit_code == EXIT_USER, (result.exit_code, result.output)
    assert re.search(r"launch \d+ \(.*\): digest check failed", result.stderr), result.stderr


VOCAB, WIDTH = 512, 8
TABLE = np.random.default_rng(0).standard_normal((VOCAB, WIDTH)).astype(np.float32)


def _embedding(source_edit: tuple[str, str] | None) -> bytes:
    """An embedding model's file (fake binaries, so the fake driver runs it), its gather kernel's source edited
    and its digest recomputed, as a deliberate attacker would."""
    spec = {"input_ids": TensorSpec((Dim("batch", min=1, max=4), Dim("seq", min=1, max=16)), "int64")}
    art = read_artifact(aotc.compile(lambda input_ids: F.embedding(input_ids, TABLE), spec).artifact_bytes)
    graph, s = art.variants[0].graph, art.variants[0].plan
    if source_edit is not None:
        (k,) = s.kernels
        assert k.source.count(source_edit[0]) == 1, k.source
        k = seal(graph, k.replace(source=k.source.replace(*source_edit)))
        s = dataclasses.replace(s, kernels=(k,))
    with unchecked():
        return reseal(write_artifact([Variant(graph, s)], source=art.source, meta=art.meta, binaries=fake_binaries(s)))


def test_a_gather_bound_raised_in_a_kernels_source_is_refused_before_any_launch() -> None:
    """512 -> 912 in the gather's bounds check: the file loads (its extents, plan and digest are consistent), but
    its source, read at the call's shape, reaches rows 512..911 of the table, past the extents the reader proved:
    refused on interpret and the fake driver before anything runs, naming the line and the pointer."""
    from aotc.runtime.backends.cuda import CudaBackend

    art = read_artifact(_embedding((">= 512)", ">= 912)")))
    good = np.array([[3, 511]], np.int64)
    match = SOURCE_REFUSAL.format(pointer=r"\w+")
    with pytest.raises(ArtifactError, match=match):
        Executable(art, "interpret")(input_ids=good)
    fake = FakeDriver()
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as exe, pytest.raises(ArtifactError, match=match):
        exe(input_ids=good)
    assert fake.launches == [] and fake.faults == []


def test_a_gather_bound_raised_in_a_kernels_source_is_fenced_at_the_call() -> None:
    """The same edit with the source check off: the valid ids run as before, and token id 600, which the original
    refuses by the kernel's flag, is refused on the interpret backend and in the fake driver by the address fence
    before the read past the table happens."""
    with fence_only():
        _gather_bound_fenced()


def _gather_bound_fenced() -> None:
    from aotc.runtime.backends.cuda import CudaBackend

    original = read_artifact(_embedding(None))
    art = read_artifact(_embedding((">= 512)", ">= 912)")))
    good, bad = np.array([[3, 511]], np.int64), np.array([[3, 600]], np.int64)
    fence = r"kernel \w+: a load through (\w+) .* past the end of \1 \(16384 bytes\)"
    for a in (original, art):
        np.testing.assert_array_equal(Executable(a, "interpret")(input_ids=good), TABLE[good])
    with pytest.raises(ExecError, match=r"index in input 'input_ids' is outside the valid range \[0, 512\)"):
        Executable(original, "interpret")(input_ids=bad)
    with pytest.raises(ExecError, match=fence):
        Executable(art, "interpret")(input_ids=bad)
    fake = FakeDriver()
    fake.register(art.variants[0].plan, art.kernels)
    with Executable(art, CudaBackend(driver=fake)) as exe:
        np.testing.assert_array_equal(exe(input_ids=good), TABLE[good])
        with pytest.raises(ExecError):
            exe(input_ids=bad)
    assert len(fake.faults) == 1 and re.search(fence, fake.faults[0]), fake.faults


def _mlp_with_stored_onnx(edit: Callable[[bytes], bytes]) -> tuple[Artifact, Artifact]:
    """The MLP's file, and the same file with its stored ONNX model replaced by ``edit(model)``, written by the
    project's own writer."""
    spec = importlib.util.spec_from_file_location("mlp", Path(__file__).resolve().parents[2] / "models" / "mlp.py")
    mlp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mlp)
    art = read_artifact(aotc.compile(*mlp.build()).artifact_bytes)
    data = write_artifact(
        list(art.variants),
        source=art.source,
        meta=art.meta,
        binaries=tuple(art.kernels.values()),
        onnx=edit(art.onnx),
    )
    return art, read_artifact(data)


def _assert_cpu_computes_the_graph(original: Artifact, edited: Artifact) -> None:
    """device='cpu' on the edited file agrees with the references on it and with the original file on the cpu."""
    pytest.importorskip("onnxruntime")
    from aotc.runtime.backends.onnxrt import OrtBackend

    rng = np.random.default_rng(0)
    feeds = {
        name: rng.standard_normal(tuple(d if isinstance(d, int) else 2 for d in v.type.shape)).astype(np.float32)
        for name, v in zip(edited.variants[0].graph.input_names, edited.variants[0].graph.inputs)
    }
    cpu = aotc.load(edited, device="cpu")
    assert isinstance(cpu._backend, OrtBackend)
    got = cpu(**feeds)
    np.testing.assert_allclose(got, aotc.load(edited, device="reference")(**feeds), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got, aotc.load(original, device="cpu")(**feeds))


def test_an_onnx_model_its_graph_does_not_follow_is_refused_or_agrees() -> None:
    """The MLP's file with its stored ONNX model edited (a Relu made a Sigmoid): it loads (the stored model is bound
    to nothing the reader checks), and the cpu backend computes what the file's graph and kernels do, since it
    builds its onnxruntime model from the verified variant graph and never runs the stored one."""
    import onnx

    def relu_to_sigmoid(blob: bytes) -> bytes:
        model = onnx.load_from_string(blob)
        relu = next(n for n in model.graph.node if n.op_type == "Relu")
        relu.op_type = "Sigmoid"
        return model.SerializeToString()

    original, edited = _mlp_with_stored_onnx(relu_to_sigmoid)
    assert edited.onnx != original.onnx
    _assert_cpu_computes_the_graph(original, edited)


def test_a_stored_onnx_model_of_garbage_does_not_change_the_cpu_result() -> None:
    garbage = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    original, edited = _mlp_with_stored_onnx(lambda _: garbage)
    assert edited.onnx == garbage
    _assert_cpu_computes_the_graph(original, edited)
