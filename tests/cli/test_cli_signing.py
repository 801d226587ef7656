"""``aotc keygen``, ``aotc sign``, ``compile --sign``, ``run --trusted-key`` and what ``inspect`` says of a signature.

Keys are made at test time; nothing here is committed key material.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

pytest.importorskip("cryptography")
pytest.importorskip("blake3")

from aotc_cli.errors import EXIT_OK, EXIT_USER
from aotc_cli.main import cli

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v5_mlp.aotc"
MLP = Path(__file__).resolve().parents[2] / "models" / "mlp.py"


def aotc(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def user_error(result: Result, match: str) -> None:
    assert result.exit_code == EXIT_USER, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], result.stderr


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    for name in ("alice", "mallory"):
        assert aotc("keygen", tmp_path / name).exit_code == EXIT_OK
    return {
        "alice": tmp_path / "alice",
        "alice.pub": tmp_path / "alice.pub",
        "mallory": tmp_path / "mallory",
        "mallory.pub": tmp_path / "mallory.pub",
    }


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "m.aotc"
    shutil.copyfile(GOLDEN, path)
    return path


def test_keygen(tmp_path: Path) -> None:
    result = aotc("keygen", tmp_path / "k")
    assert result.exit_code == EXIT_OK, result.output
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "k.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert result.stdout.splitlines()[1].startswith("key SHA256:")
    user_error(aotc("keygen", tmp_path / "k"), "exists")


def test_compile_sign_then_run_with_the_trusted_key(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = tmp_path / "mlp.aotc"
    result = aotc("compile", MLP, "-o", out, "--target", "none", "--sign", keys["alice"])
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout.splitlines()[-1].startswith("signed with key SHA256:")
    run = aotc("run", out, "--random", "--trusted-key", keys["alice.pub"])
    assert run.exit_code == EXIT_OK, run.output
    assert aotc("run", out, "--random").exit_code == EXIT_OK  # no key asked for: it loads like any file
    # any of several keys will do
    run = aotc("run", out, "--random", "--trusted-key", keys["mallory.pub"], "--trusted-key", keys["alice.pub"])
    assert run.exit_code == EXIT_OK, run.output


def test_compile_with_a_bad_key_fails_before_compiling(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = tmp_path / "mlp.aotc"
    user_error(aotc("compile", MLP, "-o", out, "--sign", keys["alice.pub"]), "is a public key")
    user_error(aotc("compile", MLP, "-o", out, "--sign", tmp_path / "nope"), "--sign: no such file")
    assert not out.exists()


def test_sign_in_place_and_to_another_path(tmp_path: Path, artifact: Path, keys: dict[str, Path]) -> None:
    original = artifact.read_bytes()
    result = aotc("sign", artifact, "--key", keys["alice"], "-o", tmp_path / "s.aotc")
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout.startswith(f"signed {tmp_path / 's.aotc'} (") and "with key SHA256:" in result.stdout
    assert artifact.read_bytes() == original
    assert aotc("sign", artifact, "--key", keys["alice"]).exit_code == EXIT_OK
    assert artifact.read_bytes() == (tmp_path / "s.aotc").read_bytes()
    assert aotc("run", artifact, "--random", "--trusted-key", keys["alice.pub"]).exit_code == EXIT_OK


def test_run_refusals(tmp_path: Path, artifact: Path, keys: dict[str, Path]) -> None:
    user_error(aotc("run", artifact, "--random", "--trusted-key", keys["alice.pub"]), "artifact is not signed")
    user_error(aotc("run", artifact, "--random", "--trusted-key", keys["alice.pub"]), "is not signed")
    assert aotc("sign", artifact, "--key", keys["alice"]).exit_code == EXIT_OK
    user_error(aotc("run", artifact, "--random", "--trusted-key", keys["mallory.pub"]), "not a trusted key")
    # flipped byte in a weight
    data = bytearray(artifact.read_bytes())
    data[len(data) - 300] ^= 0x01
    bad = tmp_path / "bad.aotc"
    bad.write_bytes(bytes(data))
    user_error(aotc("run", bad, "--random", "--trusted-key", keys["alice.pub"]), "modified after it was signed")
    # re-signed by someone else
    assert aotc("sign", artifact, "--key", keys["mallory"], "-o", bad).exit_code == EXIT_OK
    user_error(aotc("run", bad, "--random", "--trusted-key", keys["alice.pub"]), "not a trusted key")
    user_error(aotc("run", artifact, "--random", "--trusted-key", keys["alice"]), "is a private key")
    user_error(aotc("sign", artifact, "--key", keys["alice.pub"]), "is a public key")


def test_inspect_shows_the_signature(artifact: Path, keys: dict[str, Path]) -> None:
    result = aotc("inspect", artifact)
    assert "signature  none (unsigned)" in result.stdout.splitlines()
    assert aotc("sign", artifact, "--key", keys["alice"]).exit_code == EXIT_OK

    result = aotc("inspect", artifact)
    line = next(line for line in result.stdout.splitlines() if line.startswith("signature"))
    assert line.startswith("signature  ed25519, key SHA256:") and line.endswith("(not verified: give --trusted-key)")

    result = aotc("inspect", artifact, "--trusted-key", keys["alice.pub"])
    assert result.exit_code == EXIT_OK, result.output
    assert any(line.endswith("verified against a trusted key") for line in result.stdout.splitlines())

    result = aotc("inspect", artifact, "--json", "--trusted-key", keys["alice.pub"])
    sig = json.loads(result.stdout)["signature"]
    assert sig["signed"] and sig["verified"] and sig["algorithm"] == "ed25519" and sig["error"] is None
    assert sig["key"].startswith("SHA256:")

    result = aotc("inspect", artifact, "--json", "--trusted-key", keys["mallory.pub"])
    assert result.exit_code == EXIT_USER and "not a trusted key" in result.stderr
    sig = json.loads(result.stdout)["signature"]
    assert sig["verified"] is False and "not a trusted key" in sig["error"]

    result = aotc("inspect", artifact, "--trusted-key", keys["mallory.pub"])
    assert result.exit_code == EXIT_USER
    assert any("NOT VERIFIED: signed by key SHA256:" in line for line in result.stdout.splitlines())


def test_inspect_of_a_tampered_file_reports_the_signature(
    tmp_path: Path, artifact: Path, keys: dict[str, Path]
) -> None:
    assert aotc("sign", artifact, "--key", keys["alice"]).exit_code == EXIT_OK
    data = bytearray(artifact.read_bytes())
    data[200] ^= 0x01  # in the FlatBuffer
    artifact.write_bytes(bytes(data))
    user_error(aotc("inspect", artifact, "--trusted-key", keys["alice.pub"]), "modified after it was signed")
    user_error(aotc("inspect", artifact), "FlatBuffer is corrupted")
