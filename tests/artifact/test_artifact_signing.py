"""Signed artifacts: what is signed, what a required signature refuses (and says), and what a plain load does.

Keys are made at test time; nothing here is committed key material.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cryptography")
pytest.importorskip("blake3")

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from mutation import reseal

import aotc
from aotc.artifact import read_artifact, sigblock, signing
from aotc.artifact.layout import FORMAT_VERSION, PREAMBLE_SIZE, SIGNED_FORMAT_VERSION, unpack_preamble
from aotc.artifact.sigblock import SignatureBlock, SignatureError, block_size, fingerprint, read_block
from aotc.artifact.signing import KeyFileError, generate_key, public_key_bytes, sign_bytes, sign_file
from aotc.errors import AotcError, ArtifactError

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v5_mlp.aotc"
DATA = GOLDEN.read_bytes()


def _private_pem(key: ed25519.Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _public_pem(key: ed25519.Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _public_ssh(key: ed25519.Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)


@pytest.fixture(scope="module")
def key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def other_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def signed(key: ed25519.Ed25519PrivateKey) -> bytes:
    return sign_bytes(DATA, key)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 KiB chunks hashed on threads even for the small golden file, so every path runs in this test."""
    monkeypatch.setattr(signing, "CHUNK_SIZE", 64 << 10)
    monkeypatch.setattr(sigblock, "PARALLEL_MIN_BYTES", 0)


def _feeds_and_outputs() -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    z = np.load(GOLDEN.with_suffix(".npz"))
    return {k[3:]: z[k] for k in z.files if k.startswith("in_")}, [z[k] for k in z.files if k.startswith("out_")]


def _refused(data: bytes, keys: list[object], match: str) -> SignatureError:
    with pytest.raises(SignatureError, match=match) as info:
        read_artifact(data, trusted_keys=keys)
    assert "\n" not in str(info.value)
    return info.value


# -- the format ------------------------------------------------------------------------------------------------------


def test_signing_appends_a_block_and_marks_the_preamble(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    pre = unpack_preamble(DATA)
    assert pre.format_version == FORMAT_VERSION and unpack_preamble(signed).format_version == SIGNED_FORMAT_VERSION
    assert unpack_preamble(signed).file_length == pre.file_length == len(DATA)
    chunks = -(-len(DATA) // sigblock.CHUNK_SIZE)
    assert len(signed) == len(DATA) + block_size(chunks)
    # only the preamble changed (the format version and the preamble's own checksum): the rest is the file as written
    assert signed[PREAMBLE_SIZE : len(DATA)] == DATA[PREAMBLE_SIZE:]
    block = read_block(memoryview(signed))
    assert block is not None and block.signed_length == len(DATA) and block.chunk_size == sigblock.CHUNK_SIZE
    assert block.public_key == key.public_key().public_bytes_raw()
    assert signed.endswith(struct.pack("<Q", len(signed) - len(DATA)) + b"AOTCSIGE")
    assert signed[len(DATA) : len(DATA) + 8] == b"AOTCSIG\0"


def test_the_signature_covers_every_byte_before_the_block(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    """What is signed: the BLAKE3 digests of [0, L) in chunks, the key and the layout, under a domain tag."""
    from blake3 import blake3

    block = read_block(memoryview(signed))
    assert block is not None
    body = signed[: block.signed_length]
    cs = block.chunk_size
    assert list(block.digests) == [blake3(body[i : i + cs]).digest() for i in range(0, len(body), cs)]
    assert block.message().startswith(sigblock.DOMAIN)
    key.public_key().verify(block.signature, block.message())


def test_fingerprint_is_openssh_sha256(key: ed25519.Ed25519PrivateKey) -> None:
    blob = base64.b64decode(_public_ssh(key).split()[1])
    want = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert fingerprint(key.public_key().public_bytes_raw()) == want


def test_a_block_after_a_format_1_file_is_refused() -> None:
    """The preamble says whether a block follows: one appended to an unsigned file is trailing garbage."""
    block = read_block(memoryview(sign_bytes(DATA, ed25519.Ed25519PrivateKey.generate())))
    assert block is not None
    with pytest.raises(ArtifactError, match="unexpected bytes after its end"):
        read_artifact(DATA + block.pack())


# -- loading ---------------------------------------------------------------------------------------------------------


def test_signed_file_runs_verified(signed: bytes, key: ed25519.Ed25519PrivateKey, tmp_path: Path) -> None:
    path = tmp_path / "m.aotc"
    path.write_bytes(signed)
    (tmp_path / "k.pub").write_bytes(_public_pem(key))
    exe = aotc.load(path, device="cpu", trusted_keys=[tmp_path / "k.pub"])
    art = exe.artifact
    assert art.signature_verified and art.weights_verified
    assert art.signed_by == fingerprint(key.public_key().public_bytes_raw())
    assert art.file_size == len(signed) and art.format_version == SIGNED_FORMAT_VERSION
    feeds, want = _feeds_and_outputs()
    for w, g in zip(want, exe.run(feeds), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_signed_file_loads_without_keys(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    """No key asked for: a signed file loads like an unsigned one (its block is still checked for damage)."""
    exe = aotc.load(signed, device="cpu")
    assert exe.artifact.signed_by == fingerprint(key.public_key().public_bytes_raw())
    assert not exe.artifact.signature_verified and exe.artifact.weights_verified
    feeds, want = _feeds_and_outputs()
    np.testing.assert_allclose(exe.run(feeds)[0], want[0], rtol=1e-5, atol=1e-6)
    assert read_artifact(signed, verify_weights=False).signed_by is not None


def test_unsigned_file_loads_by_default_and_says_so() -> None:
    art = read_artifact(DATA)
    assert art.signed_by is None and not art.signature_verified


def test_plain_load_of_a_signed_file_imports_no_crypto(signed: bytes, tmp_path: Path) -> None:
    path = tmp_path / "m.aotc"
    path.write_bytes(signed)
    script = (
        "import json, sys, aotc.runtime; art = aotc.runtime.load(sys.argv[1]).artifact; "
        "print(json.dumps([art.signed_by is not None, sorted(sys.modules)]))"
    )
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    is_signed, modules = json.loads(out.stdout)
    assert is_signed
    bad = [m for m in modules if m.split(".")[0] in ("cryptography", "blake3") or m == "aotc.artifact.signing"]
    assert not bad


def test_without_the_sign_extra_keys_say_what_to_install(signed: bytes, tmp_path: Path) -> None:
    path = tmp_path / "m.aotc"
    path.write_bytes(signed)
    script = (
        "import sys; sys.modules['cryptography'] = sys.modules['blake3'] = None\n"
        "import aotc\n"
        "assert aotc.load(sys.argv[1]).artifact.signed_by\n"
        "try:\n    aotc.load(sys.argv[1], trusted_keys=[bytes(32)])\n"
        "except aotc.UnsupportedError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    assert "pip install 'aotc[sign]'" in out.stdout


@pytest.mark.parametrize(
    "as_key",
    [
        lambda k, d: d / "k.pub",  # PEM file
        lambda k, d: d / "k_ssh.pub",  # OpenSSH file
        lambda k, d: str(d / "k.pub"),
        lambda k, d: _public_pem(k),
        lambda k, d: _public_ssh(k),
        lambda k, d: k.public_key().public_bytes_raw(),
        lambda k, d: k.public_key(),
    ],
    ids=["pem-path", "ssh-path", "str-path", "pem-bytes", "ssh-bytes", "raw", "object"],
)
def test_trusted_key_forms(signed: bytes, key: ed25519.Ed25519PrivateKey, tmp_path: Path, as_key: object) -> None:
    (tmp_path / "k.pub").write_bytes(_public_pem(key))
    (tmp_path / "k_ssh.pub").write_bytes(_public_ssh(key) + b" user@host\n")
    trusted = as_key(key, tmp_path)  # type: ignore[operator]
    assert read_artifact(signed, trusted_keys=[trusted]).signature_verified
    assert read_artifact(signed, trusted_keys=trusted).signature_verified  # one key, not in a list


def test_any_trusted_key_will_do(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    others = [ed25519.Ed25519PrivateKey.generate().public_key() for _ in range(3)]
    assert read_artifact(signed, trusted_keys=[*others, key.public_key()]).signature_verified


def test_verification_runs_on_threads_over_many_chunks(small_chunks: None, key: ed25519.Ed25519PrivateKey) -> None:
    data = sign_bytes(DATA, key)
    block = read_block(memoryview(data))
    assert block is not None and len(block.digests) == -(-len(DATA) // (64 << 10)) > 2
    assert read_artifact(data, trusted_keys=[key.public_key()]).signature_verified
    bad = bytearray(data)
    bad[(2 << 16) + 100] ^= 0x01
    _refused(bytes(bad), [key.public_key()], rf"modified after it was signed: bytes {2 << 16}-{3 << 16} ")


# -- what a required signature refuses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    ["preamble", "flatbuffer", "padding", "segment", "last byte signed"],
)
def test_a_flipped_signed_byte_is_refused(signed: bytes, key: ed25519.Ed25519PrivateKey, where: str) -> None:
    pre = unpack_preamble(DATA)
    fb_end = PREAMBLE_SIZE + pre.flatbuffer_length
    pos = {
        "preamble": 8,  # the schema version
        "flatbuffer": PREAMBLE_SIZE + pre.flatbuffer_length // 2,
        "padding": fb_end + 1,
        "segment": -(-fb_end // 4096) * 4096 + 3,
        "last byte signed": len(DATA) - 1,
    }[where]
    bad = bytearray(signed)
    bad[pos] ^= 0x10
    _refused(bytes(bad), [key.public_key()], "was modified after it was signed")
    with pytest.raises(ArtifactError):  # without a key the checksums still catch it
        read_artifact(bytes(bad))


@pytest.mark.parametrize("offset", [0, 12, 40, 80, -100, -70, -20, -16, -9, -1])
def test_a_flipped_byte_in_the_signature_block_is_refused(
    signed: bytes, key: ed25519.Ed25519PrivateKey, offset: int
) -> None:
    """Magic, versions, key, digests, signature, checksum, footer: damage reads as damage, with or without keys."""
    bad = bytearray(signed)
    bad[len(DATA) + offset if offset >= 0 else offset] ^= 0x01
    err = _refused(bytes(bad), [key.public_key()], "signature block")
    assert "corrupted" in str(err) or "missing" in str(err) or "does not fit" in str(err)
    with pytest.raises(SignatureError, match="signature block"):
        read_artifact(bytes(bad))


def test_every_flip_is_refused_with_a_signature_error(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    """A sample of single-byte flips across the signed bytes and every byte of the block."""
    rng = random.Random(0)
    positions = rng.sample(range(len(DATA)), 150) + list(range(len(DATA), len(signed)))
    for pos in positions:
        bad = bytearray(signed)
        bad[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(SignatureError):
            read_artifact(bytes(bad), trusted_keys=[key.public_key()])


def test_wrong_key_is_refused(signed: bytes, other_key: ed25519.Ed25519PrivateKey) -> None:
    _refused(signed, [other_key.public_key()], r"signed by key SHA256:\S+, which is not a trusted key")


def test_unsigned_file_is_refused_when_a_key_is_given(key: ed25519.Ed25519PrivateKey) -> None:
    _refused(DATA, [key.public_key()], "artifact is not signed, and a signature is required")


def test_removed_signature_is_refused(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    cut = signed[: len(DATA)]
    _refused(cut, [key.public_key()], "signed but its signature block is missing or truncated")
    with pytest.raises(SignatureError, match="missing or damaged"):  # format 2 with no block: damaged, even keyless
        read_artifact(cut)
    _refused(signed[:-1], [key.public_key()], "missing or truncated")
    # stripped and the preamble set back to format 1: a valid unsigned file, refused as unsigned
    downgraded = reseal(cut, fmt=FORMAT_VERSION)
    assert read_artifact(downgraded).signed_by is None
    _refused(downgraded, [key.public_key()], "not signed")


def test_resigned_with_another_key_is_refused(
    signed: bytes, key: ed25519.Ed25519PrivateKey, other_key: ed25519.Ed25519PrivateKey
) -> None:
    resigned = sign_bytes(signed, other_key)
    assert len(resigned) == len(signed)  # the old block is replaced, not stacked
    assert read_artifact(resigned, trusted_keys=[other_key.public_key()]).signature_verified
    err = _refused(resigned, [key.public_key()], "which is not a trusted key")
    assert fingerprint(other_key.public_key().public_bytes_raw()) in str(err)


def test_forged_block_is_refused(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    """A block rebuilt with a consistent checksum but a signature the key never made (here: over other digests)."""
    block = read_block(memoryview(signed))
    assert block is not None
    forged = SignatureBlock(
        block.chunk_size, block.signed_length, block.public_key, (bytes(32),) * len(block.digests), block.signature
    )
    _refused(signed[: len(DATA)] + forged.pack(), [key.public_key()], "does not verify")
    garbage = SignatureBlock(block.chunk_size, block.signed_length, block.public_key, block.digests, bytes(64))
    _refused(signed[: len(DATA)] + garbage.pack(), [key.public_key()], "does not verify")


def test_modified_and_resigned_by_an_attacker_is_refused(
    signed: bytes, key: ed25519.Ed25519PrivateKey, other_key: ed25519.Ed25519PrivateKey
) -> None:
    """Signing needs the private key: an attacker who changes the file can only sign it with their own."""
    tampered = bytearray(reseal(signed[: len(DATA)], schema=4))
    block = read_block(memoryview(signed))
    assert block is not None
    from blake3 import blake3

    cs = block.chunk_size
    digests = tuple(blake3(bytes(tampered[i : i + cs])).digest() for i in range(0, len(DATA), cs))
    own = SignatureBlock(cs, len(DATA), other_key.public_key().public_bytes_raw(), digests)
    attack = (
        bytes(tampered) + SignatureBlock(cs, len(DATA), own.public_key, digests, other_key.sign(own.message())).pack()
    )
    _refused(attack, [key.public_key()], "not a trusted key")
    # and with the victim's key id but the attacker's signature
    claim = SignatureBlock(cs, len(DATA), block.public_key, digests)
    attack = (
        bytes(tampered)
        + SignatureBlock(cs, len(DATA), block.public_key, digests, other_key.sign(claim.message())).pack()
    )
    _refused(attack, [key.public_key()], "does not verify")


# -- the policy arguments ----------------------------------------------------------------------------------------------


def test_require_signature_false_accepts_unsigned_but_checks_signed(
    signed: bytes, key: ed25519.Ed25519PrivateKey, other_key: ed25519.Ed25519PrivateKey
) -> None:
    assert read_artifact(DATA, trusted_keys=[key.public_key()], require_signature=False).signed_by is None
    assert read_artifact(signed, trusted_keys=[key.public_key()], require_signature=False).signature_verified
    with pytest.raises(SignatureError, match="not a trusted key"):
        read_artifact(signed, trusted_keys=[other_key.public_key()], require_signature=False)


def test_a_required_signature_needs_keys(signed: bytes) -> None:
    with pytest.raises(AotcError, match="no trusted keys"):
        read_artifact(signed, require_signature=True)
    with pytest.raises(AotcError, match="no trusted keys"):  # an empty key list fails closed
        read_artifact(signed, trusted_keys=[])
    assert read_artifact(signed, require_signature=False).signed_by is not None


def test_keys_need_the_weights_read(signed: bytes, key: ed25519.Ed25519PrivateKey) -> None:
    with pytest.raises(AotcError, match="verify_weights=True"):
        read_artifact(signed, trusted_keys=[key.public_key()], verify_weights=False)


def test_load_of_an_artifact_object_checks_how_it_was_read(
    signed: bytes, key: ed25519.Ed25519PrivateKey, other_key: ed25519.Ed25519PrivateKey
) -> None:
    keys = [key.public_key()]
    assert aotc.load(read_artifact(signed, trusted_keys=keys), device="cpu", trusted_keys=keys)
    with pytest.raises(SignatureError, match="was not verified against these keys"):
        aotc.load(read_artifact(signed), device="cpu", trusted_keys=keys)
    with pytest.raises(SignatureError, match="was not verified against these keys"):
        aotc.load(read_artifact(signed, trusted_keys=keys), device="cpu", trusted_keys=[other_key.public_key()])
    with pytest.raises(SignatureError, match="not signed"):
        aotc.load(read_artifact(DATA), device="cpu", trusted_keys=keys)
    assert aotc.load(read_artifact(signed), device="cpu")


def test_signature_error_is_exported() -> None:
    assert aotc.SignatureError is SignatureError and issubclass(SignatureError, aotc.ArtifactError)


# -- keys and signing ------------------------------------------------------------------------------------------------


def test_generate_key_writes_a_pair(tmp_path: Path) -> None:
    private, public, fp = generate_key(tmp_path / "k")
    assert private.stat().st_mode & 0o777 == 0o600 and public == tmp_path / "k.pub"
    assert fingerprint(public_key_bytes(public)) == fp
    data = sign_bytes(DATA, private)
    assert read_artifact(data, trusted_keys=[public]).signed_by == fp
    with pytest.raises(KeyFileError, match="exists"):
        generate_key(tmp_path / "k")


def test_openssh_private_keys_sign(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "id").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    assert read_artifact(sign_bytes(DATA, tmp_path / "id"), trusted_keys=[key.public_key()]).signature_verified


@pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs ssh-keygen")
def test_ssh_keygen_keys(tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id")], check=True)
    data = sign_bytes(DATA, tmp_path / "id")
    art = read_artifact(data, trusted_keys=[tmp_path / "id.pub"])
    listed = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "id.pub")], capture_output=True, text=True, check=True)
    assert art.signed_by == listed.stdout.split()[1]


@pytest.mark.skipif(not shutil.which("openssl"), reason="needs openssl")
def test_openssl_keys(tmp_path: Path) -> None:
    key, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    assert read_artifact(sign_bytes(DATA, key), trusted_keys=[pub]).signature_verified


def test_bad_keys_are_named(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    (tmp_path / "priv").write_bytes(_private_pem(key))
    (tmp_path / "pub").write_bytes(_public_pem(key))
    (tmp_path / "junk").write_bytes(b"hello")
    (tmp_path / "enc").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")
        )
    )
    from cryptography.hazmat.primitives.asymmetric import ec

    (tmp_path / "ec").write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cases = [
        (lambda: sign_bytes(DATA, tmp_path / "pub"), "is a public key"),
        (lambda: sign_bytes(DATA, tmp_path / "junk"), "not a PEM or OpenSSH private key"),
        (lambda: sign_bytes(DATA, tmp_path / "enc"), "is encrypted"),
        (lambda: sign_bytes(DATA, tmp_path / "ec"), "aotc signs with Ed25519 keys"),
        (lambda: sign_bytes(DATA, tmp_path / "missing"), "cannot read key file"),
        (lambda: read_artifact(DATA, trusted_keys=[tmp_path / "priv"]), "is a private key"),
        (lambda: read_artifact(DATA, trusted_keys=[tmp_path / "junk"]), "not a PEM or OpenSSH public key"),
        (lambda: read_artifact(DATA, trusted_keys=[key]), "must be a public key"),
        (lambda: read_artifact(DATA, trusted_keys=[42]), "must be a path, bytes or an Ed25519 key"),
    ]
    for call, match in cases:
        with pytest.raises(KeyFileError, match=match):
            call()


def test_signing_refuses_an_invalid_file(key: ed25519.Ed25519PrivateKey) -> None:
    bad = bytearray(DATA)
    bad[-1] ^= 1
    with pytest.raises(ArtifactError, match="corrupted"):
        sign_bytes(bytes(bad), key)


def test_sign_file_in_place_and_to_another_path(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    src = tmp_path / "m.aotc"
    src.write_bytes(DATA)
    fp = sign_file(src, key, tmp_path / "out.aotc")
    assert src.read_bytes() == DATA  # -o leaves the input alone
    assert (tmp_path / "out.aotc").read_bytes() == sign_bytes(DATA, key)  # Ed25519 is deterministic
    assert sign_file(src, key) == fp
    assert src.read_bytes() == (tmp_path / "out.aotc").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.aotc", "out.aotc"]  # no temporary left behind


def test_the_artifact_modules_import_one_way() -> None:
    """No cycle among aotc.artifact's modules, counting imports inside functions: the reader needs keys.py to
    verify, signing.py needs the reader to sign, and neither of the first two imports signing.py."""
    import ast
    import graphlib

    import aotc.artifact

    root = Path(aotc.artifact.__file__).parent
    graph = {}
    for path in root.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aotc.artifact."):
                imported.add(node.module.split(".")[2])
        graph[path.stem] = imported - {path.stem}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError
    assert "signing" not in graph["reader"] | graph["keys"] and "reader" in graph["signing"]
