"""``aotc sign`` and ``aotc keygen``: Ed25519 signatures over an artifact, so a server can refuse a file it
cannot vouch for (aotc/artifact/signing.py). Both need the ``sign`` extra: ``pip install 'aotc[sign]'``."""

from __future__ import annotations

import click

from aotc_cli.errors import debug_option
from aotc_cli.paths import check_output_path, require_file
from aotc_cli.text import format_size

KEYGEN_HELP = """Write a new Ed25519 key pair: the private key to KEY (PKCS#8 PEM, readable
by you only) and the public key to KEY.pub (PEM). Sign with KEY; give KEY.pub
to servers (`aotc run --trusted-key KEY.pub`, `aotc.load(..., trusted_keys=[...])`).

Keys from `openssl genpkey -algorithm ed25519 -out KEY` (public half:
`openssl pkey -in KEY -pubout -out KEY.pub`) or `ssh-keygen -t ed25519 -N '' -f KEY`
work the same. Encrypted private keys are not supported.
"""

SIGN_HELP = """Sign ARTIFACT with the Ed25519 private key KEY, without recompiling.

The file is verified in full first; the signature covers every byte of it (the
graphs, launch plans, kernels and weights) and is appended, replacing any
earlier signature. The signed file goes to -o, or replaces ARTIFACT.
Older aotc versions refuse signed files (format version 2).
"""


@click.command("keygen", help=KEYGEN_HELP)
@click.argument("key", metavar="KEY")
@debug_option
def keygen_command(key: str) -> None:
    from aotc.artifact.signing import generate_key

    private, public, fp = generate_key(check_output_path(key, "KEY"))
    click.echo(f"wrote {private} (private: keep it secret) and {public} (public)")
    click.echo(f"key {fp}")


@click.command("sign", help=SIGN_HELP)
@click.argument("artifact", metavar="ARTIFACT")
@click.option("--key", "key", required=True, metavar="KEY", help="Ed25519 private key (PEM or OpenSSH file).")
@click.option("-o", "--output", metavar="OUT", help="Signed artifact path.  [default: ARTIFACT, replaced]")
@debug_option
def sign_command(artifact: str, key: str, output: str | None) -> None:
    from aotc.artifact.signing import load_private_key, sign_file

    path = require_file(artifact)
    private = load_private_key(require_file(key, "--key"))
    out = check_output_path(output) if output else path
    fp = sign_file(path, private, out)
    click.echo(f"signed {out} ({format_size(out.stat().st_size)}) with key {fp}")
