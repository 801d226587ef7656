"""``aotc compile --dump-kernels`` and ``aotc inspect --kernels``: each kernel as a file that runs on its own under
``TRITON_INTERPRET=1``, and matches what the kernel computes inside the artifact's own run (issue 19 item 5).

The round trip: the artifact runs on the interpret backend with every launch recorded (its pointer arguments
before and after); then, in a fresh interpreter with only TRITON_INTERPRET=1 set, each dumped file is loaded and
launched on copies of its first launch's arguments, and every argument must come out as it did in the artifact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import aotc
from aotc.runtime.backends import triton_interp
from aotc_cli.main import cli

ROOT = Path(__file__).resolve().parents[2]

# Loads each dumped file as a module and launches it on the recorded arguments: what `python FILE --load` does,
# for every file in one process (torch and triton import once).
DRIVER = """
import importlib.util, json, sys
import numpy as np, torch
folder, cases = sys.argv[1], json.loads(sys.argv[2])
for name, dims in cases.items():
    spec = importlib.util.spec_from_file_location(name, f"{folder}/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with np.load(f"{folder}/{name}.in.npz") as z:
        arrays = {k: torch.from_numpy(z[k].copy()) for k in z.files}
    dtypes = {n: dt for n, _, dt, _ in mod.ARGS}
    arrays = {k: t.view(dtypes[k]) if dtypes[k] == torch.bfloat16 else t for k, t in arrays.items()}
    mod.launch(arrays, dims)
    np.savez(f"{folder}/{name}.out.npz", **{k: (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy() for k, t in arrays.items()})
    print(name)
"""


def _invoke(*args: object) -> Any:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def _raw(a: np.ndarray) -> np.ndarray:
    return a.view(np.int16) if a.dtype.itemsize == 2 and a.dtype.kind == "V" else a  # bf16 as its raw bits


@pytest.mark.parametrize(("model", "dims"), [("mlp", {"batch": 3}), ("gpt2", {"batch": 2, "seq": 8})])
def test_dumped_kernels_run_on_their_own_and_match_the_artifact(
    model: str, dims: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    art, folder = tmp_path / f"{model}.aotc", tmp_path / "kernels"
    _invoke("compile", ROOT / "models" / f"{model}.py", "-o", art, "--dump-kernels", folder)
    files = sorted(p.stem for p in folder.glob("*.py"))
    assert files

    recorded: dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}
    real = triton_interp.launch

    def recording(kernel: Any, grid: Any, args: Any) -> None:
        pointers = {a.name: v for a, v in zip(kernel.args, args) if isinstance(v, np.ndarray)}
        before = {n: v.copy() for n, v in pointers.items()}
        real(kernel, grid, args)
        recorded.setdefault(kernel.name, (before, {n: v.copy() for n, v in pointers.items()}))

    monkeypatch.setattr(triton_interp, "launch", recording)
    exe = aotc.load(art, device="interpret")
    exe(**_feeds(exe, dims, np.random.default_rng(0)))
    assert recorded and set(recorded) <= set(files), "every launched kernel was dumped"
    for name, (before, _) in recorded.items():
        np.savez(folder / f"{name}.in.npz", **{k: _raw(v) for k, v in before.items()})

    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    cases = json.dumps({name: dims for name in recorded})
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(folder), cases], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, (_, after) in recorded.items():
        with np.load(folder / f"{name}.out.npz") as got:
            for arg, want in after.items():
                np.testing.assert_allclose(
                    got[arg].astype(np.float64),
                    _raw(want).astype(np.float64),
                    rtol=1e-6,
                    atol=1e-6,
                    err_msg=f"{name} {arg}",
                )


def _feeds(exe: Any, dims: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs of the example model at ``dims``: floats standard normal, ids 0 or 1 (valid for every model)."""
    from aotc_cli.feeds import random_array

    out = {}
    graph = exe.artifact.variants[0].graph
    for v, name in zip(graph.inputs, exe.input_names):
        shape = tuple(d if isinstance(d, int) else dims[d.symbol_name] for d in v.type.shape)
        out[name] = random_array(rng, v.type.dtype, shape)
    return out


def test_inspect_kernels_prints_each_kernel_source(tmp_path: Path) -> None:
    art = tmp_path / "mlp.aotc"
    _invoke("compile", ROOT / "models" / "mlp.py", "-o", art)
    text = _invoke("inspect", art, "--kernels").stdout
    assert text.count("@triton.jit") == 3 and "# ---- k0_" in text and "It computes these graph nodes" in text
    info = json.loads(_invoke("inspect", art, "--kernels", "--json").stdout)
    assert len(info["kernel_sources"]) == 3 and all("def launch(" in t for t in info["kernel_sources"].values())
    assert "kernel_sources" not in json.loads(_invoke("inspect", art, "--json").stdout)
