"""Ed25519 keys, and what a load requires of a file's signature (``SignaturePolicy``): what the reader needs to
verify a signed file. signing.py (making signatures) builds on this module and on the reader; the reader imports
this module only when a load is given trusted keys, so imports point one way: signing -> reader -> keys ->
sigblock. ``cryptography`` and ``blake3`` load on first use (the ``sign`` extra: ``pip install 'aotc[sign]'``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aotc.artifact.layout import SIGNED_FORMAT_VERSION, unpack_preamble
from aotc.artifact.sigblock import DigestCheck, SignatureBlock, SignatureError, fingerprint, load_blake3, read_block
from aotc.errors import AotcError, ArtifactError, UnsupportedError

KeySource = str | os.PathLike[str] | bytes | Any  # a path, key bytes, or an Ed25519 key object


class KeyFileError(AotcError):
    """A key file (or key given in memory) is unreadable, encrypted, or not an Ed25519 key of the right kind."""


def crypto_modules() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise UnsupportedError(
            "signed artifacts need the cryptography and blake3 packages: pip install 'aotc[sign]'"
        ) from None
    return serialization, ed25519


def load_private_key(key: KeySource) -> Any:
    """An Ed25519 private key from a PEM (PKCS#8 or traditional) or OpenSSH file, its bytes, or a key object."""
    serialization, ed25519 = crypto_modules()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    data, what = _key_bytes(key, "private")
    try:
        if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
            loaded = serialization.load_ssh_private_key(data, password=None)
        elif b"PRIVATE KEY-----" in data:
            loaded = serialization.load_pem_private_key(data, password=None)
        elif b"PUBLIC KEY-----" in data or data.startswith(b"ssh-"):
            raise KeyFileError(f"{what} is a public key; signing needs the private key")
        else:
            raise KeyFileError(f"{what} is not a PEM or OpenSSH private key")
    except KeyFileError:
        raise
    except TypeError:  # cryptography's word for "needs a password"
        raise KeyFileError(f"{what} is encrypted; aotc signs with an unencrypted key file") from None
    except Exception as e:
        raise KeyFileError(f"{what} is not a readable private key ({type(e).__name__}: {e})") from None
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise KeyFileError(f"{what} is {_kind(loaded)}; aotc signs with Ed25519 keys (aotc keygen)")
    return loaded


def public_key_bytes(key: KeySource) -> bytes:
    """The raw 32 bytes of an Ed25519 public key given as a path to a PEM or OpenSSH ``.pub`` file, its
    bytes (PEM, an ``ssh-ed25519 ...`` line, or the 32 raw bytes), or an ``Ed25519PublicKey``."""
    serialization, ed25519 = crypto_modules()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key.public_bytes_raw()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raise KeyFileError("a trusted key must be a public key; pass key.public_key()")
    if isinstance(key, (bytes, bytearray, memoryview)) and len(key) == 32:
        return bytes(key)
    data, what = _key_bytes(key, "public")
    try:
        if data.lstrip().startswith(b"ssh-"):
            loaded = serialization.load_ssh_public_key(data.strip())
        elif b"-----BEGIN PUBLIC KEY-----" in data:
            loaded = serialization.load_pem_public_key(data)
        elif b"PRIVATE KEY-----" in data:
            raise KeyFileError(f"{what} is a private key; give its public key (KEY.pub) to verify with")
        else:
            raise KeyFileError(f"{what} is not a PEM or OpenSSH public key")
    except KeyFileError:
        raise
    except Exception as e:
        raise KeyFileError(f"{what} is not a readable public key ({type(e).__name__}: {e})") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise KeyFileError(f"{what} is {_kind(loaded)}; aotc signatures are Ed25519")
    return loaded.public_bytes_raw()


def _key_bytes(key: KeySource, kind: str) -> tuple[bytes, str]:
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key), f"the {kind} key given as bytes"
    if isinstance(key, (str, os.PathLike)):
        try:
            return Path(key).read_bytes(), f"key file {os.fspath(key)}"
        except OSError as e:
            raise KeyFileError(f"cannot read key file {os.fspath(key)}: {e.strerror or e}") from e
    raise KeyFileError(f"a {kind} key must be a path, bytes or an Ed25519 key object, got {type(key).__name__}")


def _kind(key: Any) -> str:
    return "an " + type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "") + " key"


# -- policy: what a load requires -----------------------------------------------------------------------


@dataclass(frozen=True)
class SignaturePolicy:
    """What ``read_artifact``/``aotc.load`` require of a file's signature, from their ``trusted_keys`` and
    ``require_signature``: a file signed by another key, or one whose bytes differ from what was signed, is
    always refused; an unsigned file is refused when ``required``."""

    keys: tuple[bytes, ...]
    required: bool

    @classmethod
    def of(
        cls, trusted_keys: KeySource | Iterable[KeySource] | None, require_signature: bool | None
    ) -> SignaturePolicy:
        """Given keys require a signature unless ``require_signature=False`` (then a signed file must still
        verify against them, and an unsigned one loads). ``trusted_keys=[]`` with nothing else said requires a
        signature no key can satisfy: an empty key list on a server fails closed."""
        load_blake3()  # a missing package is said now, not as a damaged file later
        if trusted_keys is None:
            keys: tuple[bytes, ...] = ()
        elif isinstance(trusted_keys, (str, os.PathLike, bytes, bytearray, memoryview)) or not isinstance(
            trusted_keys, Iterable
        ):
            keys = (public_key_bytes(trusted_keys),)
        else:
            keys = tuple(dict.fromkeys(public_key_bytes(k) for k in trusted_keys))
        required = trusted_keys is not None if require_signature is None else bool(require_signature)
        if required and not keys:
            raise AotcError("a signature is required but no trusted keys were given (trusted_keys)")
        return cls(keys, required)

    def start(self, view: memoryview) -> DigestCheck | None:
        """Check the block, the key and the signature now; return the digest check, hashing on threads
        (``join()`` it), or None for an unsigned file this policy accepts. Raises SignatureError."""
        block = read_block(view)
        if block is None:
            if self.required:
                raise SignatureError(_unsigned(view))
            return None
        self.verify(block)
        return DigestCheck(view, block)

    def verify(self, block: SignatureBlock) -> None:
        """The block's key is trusted and its signature is that key's: raises SignatureError otherwise."""
        if block.public_key not in self.keys:
            raise SignatureError(f"signed by key {block.fingerprint}, which is not a trusted key")
        _, ed25519 = crypto_modules()
        from cryptography.exceptions import InvalidSignature

        try:
            ed25519.Ed25519PublicKey.from_public_bytes(block.public_key).verify(block.signature, block.message())
        except (InvalidSignature, ValueError):  # ValueError: 32 bytes that are no Ed25519 point
            raise SignatureError(
                f"the signature by key {block.fingerprint} does not verify (the signature block was altered)"
            ) from None

    def check_artifact(self, signed_by: str | None, verified: bool) -> None:
        """For an Artifact already read: raises SignatureError unless it meets this policy."""
        if signed_by is None:
            if self.required:
                raise SignatureError("artifact is not signed, and a signature is required")
            return
        if not verified or signed_by not in {fingerprint(k) for k in self.keys}:
            raise SignatureError(
                f"this Artifact (signed by {signed_by}) was not verified against these keys when it was read; "
                "load it by path with trusted_keys"
            )


def _unsigned(view: memoryview) -> str:
    try:
        fmt = unpack_preamble(view).format_version
    except ArtifactError:
        fmt = None
    if fmt == SIGNED_FORMAT_VERSION:
        return "the file was signed but its signature block is missing or truncated"
    return "artifact is not signed, and a signature is required"
