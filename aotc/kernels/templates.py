"""The compiler's side of the template table (aotc/ir/templates.py): each row's emitter, fusion check and node
groups, which the row names as ``"module:function"`` under ``aotc.kernels``, resolved when used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from aotc.ir.templates import ROOTED_AT, TEMPLATES, Template, template
from aotc.ir.types import Node

__all__ = ["TEMPLATES", "Template", "check", "hook", "rooted_at", "template"]


def hook(ref: str) -> Callable[..., Any]:
    """The function a row names: ``"matmul:emit_plan"`` is ``aotc.kernels.matmul.emit_plan``."""
    module, _, name = ref.partition(":")
    fn = getattr(importlib.import_module(f"aotc.kernels.{module}"), name, None)
    if not callable(fn):
        raise AttributeError(f"template table: aotc.kernels.{module} has no function {name!r}")
    return fn


def rooted_at(node: Node) -> Template | None:
    """The template whose launches are rooted at ``node``'s op, if any."""
    return ROOTED_AT.get(node.op)


def check(node: Node) -> str | None:
    """Why the template rooted at ``node``'s op cannot emit it (None: it can)."""
    row = ROOTED_AT[node.op]
    return hook(row.check)(node) if row.check else None
