"""Checks on the files a command reads and writes, made before any slow work so a typo costs nothing."""

from __future__ import annotations

import os
from pathlib import Path

from aotc_cli.user_error import UserError


def require_file(path: str | Path, what: str = "") -> Path:
    """``path`` as a Path when it is a readable file; else a UserError saying what it is instead.

    ``what`` prefixes the message (e.g. ``--input x``) so the user knows which argument to fix.
    """
    p = Path(path)
    prefix = f"{what}: " if what else ""
    if p.is_dir():
        raise UserError(f"{prefix}{path} is a directory, expected a file")
    if not p.exists():
        raise UserError(f"{prefix}no such file: {path}")
    if not p.is_file():
        raise UserError(f"{prefix}{path} is not a regular file")
    if not os.access(p, os.R_OK):
        raise UserError(f"{prefix}{path} is not readable (permission denied)")
    return p


def check_output_path(path: str | Path, option: str = "-o") -> Path:
    """``path`` as a Path when a file can be written there; else a UserError naming ``option``.

    Checked before the model is compiled or run, so a bad path does not waste that work. Nothing is created.
    """
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {path} is a directory, expected a file path")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise UserError(f"{option} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise UserError(f"{option} {path}: {parent} is not a folder")
    if p.exists() and not os.access(p, os.W_OK):
        raise UserError(f"{option} {path} is not writable (permission denied)")
    if not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: folder {parent} is not writable (permission denied)")
    return p
