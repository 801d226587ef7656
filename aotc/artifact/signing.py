"""Signing artifacts and verifying their signatures: Ed25519 keys over BLAKE3 chunk digests (sigblock.py).

Why these libraries: Ed25519 from ``cryptography`` (pyca) is one well-kept, widely deployed wheel with no
network, no service and no trust root to set up, so a server verifies offline; its keys are the standard
PKCS#8/SubjectPublicKeyInfo PEM files of ``openssl genpkey -algorithm ed25519`` and the OpenSSH files of
``ssh-keygen -t ed25519``; a signature costs ~70 µs to check. The OpenSSF ``model-signing`` package would
bring sigstore, in-toto, protobuf and pydantic into a server's runtime, keyless signing needs the network
(Fulcio, Rekor), and it hashes files on its own (a second full read of the weights that cannot overlap the
reader's decoding) into a sidecar bundle, while an aotc artifact is one file. The signature covers every
byte of the file before the block (sigblock.py): the FlatBuffer and the weights. The digests are BLAKE3
(the ``blake3`` package, the BLAKE3 team's bindings): ~8 GB/s per core and GIL-free, against ~2 GB/s for
SHA-256, so hashing ~500 MB on threads while the reader decodes keeps a verified signed load near an
unsigned one even on a two-core machine; in place of (not in addition to) the XXH3 segment checksums,
which are not collision-resistant and so cannot be what a signature vouches for.

Keys and what a load requires of a signature (``SignaturePolicy``) live in keys.py, which the reader imports when
it is given trusted keys; this module makes signatures and imports the reader (a file is verified before it is
signed), so imports point one way. It re-exports the key API. Nothing here is imported by a plain load;
``cryptography`` and ``blake3`` load on first use (the ``sign`` extra: ``pip install 'aotc[sign]'``).
"""

from __future__ import annotations

import mmap
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from aotc.artifact.keys import (  # noqa: F401 (re-exported: the signing API in one place)
    KeyFileError,
    KeySource,
    SignaturePolicy,
    crypto_modules,
    load_private_key,
    public_key_bytes,
)
from aotc.artifact.layout import PREAMBLE_SIZE, SIGNED_FORMAT_VERSION, unpack_preamble
from aotc.artifact.reader import read_artifact
from aotc.artifact.sigblock import CHUNK_SIZE, ChunkHasher, SignatureBlock, fingerprint
from aotc.errors import ArtifactError

# -- making keys ---------------------------------------------------------------------------------------


def generate_key(path: str | os.PathLike[str]) -> tuple[Path, Path, str]:
    """A new Ed25519 key: the private key to ``path`` (PKCS#8 PEM, mode 0600) and the public key to
    ``path.pub`` (SubjectPublicKeyInfo PEM). Refuses to overwrite. Returns both paths and the fingerprint."""
    serialization, ed25519 = crypto_modules()
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    priv_path, pub_path = Path(path), Path(f"{os.fspath(path)}.pub")
    for p in (priv_path, pub_path):
        if p.exists():
            raise KeyFileError(f"{p} exists; choose another path (keygen never overwrites a key)")
    _write_new(priv_path, private, 0o600)
    _write_new(pub_path, public, 0o644)
    return priv_path, pub_path, fingerprint(key.public_key().public_bytes_raw())


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as e:
        raise KeyFileError(f"cannot write {path}: {e.strerror or e}") from e
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# -- signing ---------------------------------------------------------------------------------------------


def sign_bytes(data: bytes | memoryview, key: KeySource) -> bytes:
    """The artifact ``data`` signed with ``key`` (a private key, see load_private_key); a signed artifact is
    signed afresh. ``data`` is verified in full first: a signature vouches only for a valid file."""
    private = load_private_key(key)
    read_artifact(bytes(data))
    view = memoryview(data)
    head, length, block = _sign_view(view, private)
    return head + bytes(view[PREAMBLE_SIZE:length]) + block


def sign_file(path: str | os.PathLike[str], key: KeySource, out: str | os.PathLike[str] | None = None) -> str:
    """Sign the artifact at ``path`` with ``key`` into ``out`` (default: ``path`` itself), without
    recompiling: the file is verified in full, its preamble marked signed (format version 2) and the
    signature block appended, replacing any earlier one. ``out`` appears atomically. Returns the fingerprint."""
    private = load_private_key(key)
    read_artifact(path)
    out = os.fspath(out if out is not None else path)
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                head, length, block = _sign_view(view, private)
                with open(tmp, "wb") as w:
                    w.write(head)
                    w.write(view[PREAMBLE_SIZE:length])
                    w.write(block)
            finally:
                view.release()
        shutil.copymode(path, tmp)
        os.replace(tmp, out)
    except OSError as e:
        raise ArtifactError(f"cannot write signed artifact {out}: {e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return fingerprint(private.public_key().public_bytes_raw())


def _sign_view(view: memoryview, private: Any) -> tuple[bytes, int, bytes]:
    """(the format-2 preamble, the signed length, the signature block) for the verified artifact in ``view``."""
    pre = unpack_preamble(view)
    head = replace(pre, format_version=SIGNED_FORMAT_VERSION).pack()
    digests = ChunkHasher(view, pre.file_length, CHUNK_SIZE, head=head).join()
    block = SignatureBlock(CHUNK_SIZE, pre.file_length, private.public_key().public_bytes_raw(), tuple(digests))
    return head, pre.file_length, replace(block, signature=private.sign(block.message())).pack()
