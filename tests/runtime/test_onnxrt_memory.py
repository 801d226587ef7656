"""Loading on onnxruntime makes no second copy of the weights: in a fresh process, the resident set after a
verified load and a first call grows by at most 1.1x the weight bytes over onnxruntime's own baseline (the
verification reads every mapped weight page once, so the file's pages are that 1x)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import aotc
from aotc import Dim, TensorSpec, nn
from aotc.lowering.options import CompileOptions

pytest.importorskip("onnxruntime")

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np

    def rss():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

    import onnxruntime as ort
    import aotc.runtime
    from aotc.artifact.reader import read_artifact
    from aotc.runtime.backends.onnxrt import OrtBackend

    # onnxruntime's baseline: the library, its thread pools and a session of its own
    with open(sys.argv[2], "rb") as f:
        tiny = f.read()
    ort.InferenceSession(tiny, providers=["CPUExecutionProvider"]).run(None, {"x": np.ones(2, np.float32)})
    base = rss()
    exe = aotc.runtime.load(sys.argv[1], device="cpu")
    assert isinstance(exe._backend, OrtBackend)
    loaded = rss()
    exe(x=np.ones((1, 2048), np.float32))
    called = rss()
    print(json.dumps({"weights": exe.artifact.weight_bytes, "load": loaded - base, "call": called - base}))
    """
)


class Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(2048, 4096), nn.Linear(4096, 2048)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def tiny_model() -> bytes:
    from onnx import helper

    x, y = helper.make_tensor_value_info("x", 1, [2]), helper.make_tensor_value_info("y", 1, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_rss_after_load_is_the_weights_once(tmp_path: Path) -> None:
    model = Wide()
    rng = np.random.default_rng(0)
    model.load_state_dict({k: rng.standard_normal(v.shape, np.float32) * 0.02 for k, v in model.state_dict().items()})
    compiled = aotc.compile(
        model,
        {"x": TensorSpec((Dim("batch", min=1, max=8), 2048), "float32")},
        options=CompileOptions(kernels=False, targets=()),
    )
    path = tmp_path / "wide.aotc"
    compiled.save(path)
    (tmp_path / "tiny.onnx").write_bytes(tiny_model())
    del model, compiled
    args = [str(path), str(tmp_path / "tiny.onnx")]
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["weights"] >= 64 * 2**20
    assert got["load"] <= 1.1 * got["weights"], got
    assert got["call"] <= 1.1 * got["weights"], got
