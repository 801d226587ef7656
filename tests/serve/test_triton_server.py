"""``aotc export-triton`` repositories in a real Triton Inference Server (slow: -m slow or AOTC_RUN_SLOW=1).

The server is the ``tritonserver`` binary and python backend that the nvidia-pytriton wheel bundles (CPU-only here;
it runs without a GPU). That wheel pins numpy < 2, so it lives in a virtualenv of its own, built on first use
(``pip install nvidia-pytriton flatbuffers xxhash``, ~20 s; kept in ``AOTC_TRITON_VENV``, default
``~/.cache/aotc/triton-venv``), with this checkout on its path (a .pth file) for the backend's ``import aotc``.
Outputs are compared bit for bit with ``aotc.runtime.load`` run in that same environment (another numpy wheel
ships another BLAS, whose float rounding differs in the last bit).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .conftest import MODELS, ROOT, free_port, random_feeds, running_server

pytestmark = pytest.mark.slow

V2 = {"float32": "FP32", "int64": "INT64"}
EXPECTED = """
import sys
import numpy as np
import aotc.runtime
from aotc.serve.signature import output_names
exe = aotc.runtime.load(sys.argv[1], device="cpu")
z = np.load(sys.argv[2])
flat = exe.run({k: z[k] for k in z.files})
np.savez(sys.argv[3], **dict(zip(output_names(exe.output_tree, len(flat)), flat)))
"""


@pytest.fixture(scope="module")
def triton_venv() -> Path:
    venv = Path(os.environ.get("AOTC_TRITON_VENV", Path.home() / ".cache" / "aotc" / "triton-venv"))
    python = venv / "bin" / "python"
    if not (venv / "ready").exists():
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        built = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if built.returncode == 0:
            built = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "nvidia-pytriton", "flatbuffers", "xxhash"],
                capture_output=True,
                text=True,
                timeout=600,
            )
        if built.returncode != 0:
            pytest.skip(f"could not install nvidia-pytriton: {built.stderr[-2000:]}")
        (venv / "ready").write_text("")
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "aotc_checkout.pth").write_text(f"{ROOT}\n")
    return venv


@pytest.fixture(scope="module")
def triton(triton_venv: Path, artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    from click.testing import CliRunner

    from aotc_cli.main import cli

    work = tmp_path_factory.mktemp("triton")
    repo = work / "repo"
    for name in MODELS:
        result = CliRunner().invoke(cli, ["export-triton", str(artifacts[name]), "-o", str(repo), "--device", "cpu"])
        assert result.exit_code == 0, result.output
    python = triton_venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import pytriton, os; print(os.path.dirname(pytriton.__file__))"], text=True
        ).strip()
    )
    server = work / "tritonserver"
    shutil.copytree(site / "tritonserver", server, ignore=shutil.ignore_patterns("python_backend_stubs"))
    version = subprocess.check_output(
        [str(python), "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"], text=True
    ).strip()
    stub = site / "tritonserver" / "python_backend_stubs" / version / "triton_python_backend_stub"
    shutil.copy(stub, server / "backends" / "python" / "triton_python_backend_stub")
    command = [
        str(server / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={server / 'backends'}",
        "--http-port={http_port}",
        "--grpc-port={grpc_port}",
        f"--metrics-port={free_port()}",
        "--exit-timeout-secs=10",
    ]
    env = {
        "LD_LIBRARY_PATH": str(site.parent / "nvidia_pytriton.libs"),
        "PATH": f"{triton_venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    with running_server([], work / "tritonserver.log", command=command, env=env, timeout=120) as srv:
        yield srv, repo, python, work


def expected(python: Path, artifact: Path, feeds: dict[str, np.ndarray], work: Path, tag: str) -> dict[str, np.ndarray]:
    inputs, outputs = work / f"{tag}_in.npz", work / f"{tag}_out.npz"
    np.savez(inputs, **feeds)
    subprocess.run([str(python), "-c", EXPECTED, str(artifact), str(inputs), str(outputs)], check=True)
    with np.load(outputs) as z:
        return {k: z[k] for k in z.files}


def infer_inputs(feeds: dict[str, np.ndarray]) -> list:
    inputs = []
    for name, a in feeds.items():
        t = httpclient.InferInput(name, list(a.shape), V2[a.dtype.name])
        t.set_data_from_numpy(a)
        inputs.append(t)
    return inputs


def test_every_example_model_in_triton_bit_exact(triton: Any) -> None:
    import aotc

    server, repo, python, work = triton
    client = httpclient.InferenceServerClient(server.url)
    rng = np.random.default_rng(0)
    for name in MODELS:
        artifact = repo / name / "1" / "model.aotc"
        exe = aotc.load(artifact, device="cpu")
        meta = client.get_model_metadata(name)
        assert [(t["name"], t["shape"][0]) for t in meta["inputs"]] == [(n, -1) for n in exe.input_names]
        config = client.get_model_config(name)
        assert config["max_batch_size"] == {"mlp": 1024, "bert": 64, "gpt2": 64, "cnn": 256, "lstm_ensemble": 256}[name]
        for i, dims in enumerate([{"batch": 1, "seq": 5}, {"batch": 3, "seq": 17}]):
            feeds = random_feeds(exe, rng, dims)
            result = client.infer(name, infer_inputs(feeds))
            want = expected(python, artifact, feeds, work, f"{name}{i}")
            for k, v in want.items():
                assert np.array_equal(result.as_numpy(k), v), (name, dims, k)


def test_refusals_carry_aotcs_message(triton: Any) -> None:
    server, _, _, _ = triton
    client = httpclient.InferenceServerClient(server.url)
    ids = np.ones((2, 8), np.int64)
    bad = ids.copy()
    bad[0, 0] = 10**6
    with pytest.raises(InferenceServerException) as e:
        client.infer("bert", infer_inputs({"input_ids": bad, "attention_mask": ids}))
    assert e.value.status() == "400" and "index 1000000 in input 'input_ids'" in e.value.message()
    long = np.ones((1, 200), np.int64)
    with pytest.raises(InferenceServerException) as e:
        client.infer("bert", infer_inputs({"input_ids": long, "attention_mask": long}))
    assert "input 'input_ids' dim 1 (seq) = 200 is outside [1, 128]" in e.value.message()
    x = np.ones((2, 32), np.float32)
    assert client.infer("mlp", infer_inputs({"x": x})).as_numpy("output").shape == (2, 10)


def test_triton_batches_concurrent_requests(triton: Any) -> None:
    server, _, _, _ = triton
    before = httpclient.InferenceServerClient(server.url).get_inference_statistics("bert")["model_stats"][0]
    feeds = [{"input_ids": np.ones((1, 12), np.int64), "attention_mask": np.ones((1, 12), np.int64)}] * 32
    errors: list[BaseException] = []

    def send(f: dict[str, np.ndarray]) -> None:
        try:
            httpclient.InferenceServerClient(server.url).infer("bert", infer_inputs(f))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=send, args=(f,)) for f in feeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    after = httpclient.InferenceServerClient(server.url).get_inference_statistics("bert")["model_stats"][0]
    requests = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert requests == 32 and executions < 32, (requests, executions)
