"""Parsing of ``--dim`` and ``--input`` option values (bad syntax is a usage error, exit 2)."""

from __future__ import annotations

from collections.abc import Sequence

import click

# Dims are int64 in the artifact and the kernels; a bound of 2**62 keeps simple expressions of them (2 * seq,
# seq + 1) in range too.
MAX_DIM = 1 << 62


def _pairs(items: Sequence[str], option: str, form: str) -> list[tuple[str, str, str]]:
    """(name, value, original item) per ``NAME=VALUE`` item; each name at most once."""
    out, seen = [], set()
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise click.BadParameter(f"{item!r} is not of the form {form}", param_hint=option)
        if name in seen:
            raise click.BadParameter(f"{name!r} given twice", param_hint=option)
        seen.add(name)
        out.append((name, value, item))
    return out


def _int(text: str, item: str, option: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"{item!r}: {text!r} is not an integer", param_hint=option) from None


def parse_dim_values(items: Sequence[str]) -> dict[str, int]:
    """``--dim seq=7`` -> {"seq": 7}."""
    return {name: _int(value, item, "--dim") for name, value, item in _pairs(items, "--dim", "NAME=VALUE")}


def parse_dim_ranges(items: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``--dim batch=1:64`` -> {"batch": (1, 64)}; a single value ``batch=8`` fixes the dim."""
    out = {}
    for name, value, item in _pairs(items, "--dim", "NAME=MIN:MAX"):
        lo_text, sep, hi_text = value.partition(":")
        lo = _int(lo_text, item, "--dim")
        hi = _int(hi_text, item, "--dim") if sep else lo
        if lo < 0 or hi < lo:
            raise click.BadParameter(f"{item!r}: need 0 <= MIN <= MAX", param_hint="--dim")
        if hi > MAX_DIM:
            raise click.BadParameter(f"{item!r}: MAX must be at most {MAX_DIM} (2**62)", param_hint="--dim")
        out[name] = (lo, hi)
    return out


def parse_input_files(items: Sequence[str]) -> dict[str, str]:
    """``--input x=x.npy`` -> {"x": "x.npy"}."""
    return {name: value for name, value, _ in _pairs(items, "--input", "NAME=FILE.npy")}


def parse_dim_names(items: Sequence[str]) -> dict[str, dict[int, str]]:
    """``--dim-name x:0=batch`` -> {"x": {0: "batch"}} (the program checks inputs, axes and names)."""
    out: dict[str, dict[int, str]] = {}
    for item in items:
        where, sep, name = item.partition("=")
        input_name, colon, axis = where.strip().rpartition(":")
        if not sep or not colon or not input_name or not name.strip():
            raise click.BadParameter(f"{item!r} is not of the form INPUT:AXIS=NAME", param_hint="--dim-name")
        axes = out.setdefault(input_name, {})
        k = _int(axis, item, "--dim-name")
        if k in axes:
            raise click.BadParameter(f"{input_name}:{k} given twice", param_hint="--dim-name")
        axes[k] = name.strip()
    return out
