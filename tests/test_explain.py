"""--explain names where each kernel's nodes come from: the model's source line and the submodule path, for aotc.nn
models and torch modules alike (issue 19 item 5)."""

from __future__ import annotations

import re

import pytest

import aotc
from aotc import Dim, TensorSpec, nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.proj(x).relu())  # the block's line


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


ROWS = {"x": TensorSpec((Dim("rows", 1, 16), 8))}


def _from_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("from ")]


def test_explain_names_the_submodule_and_source_line_of_each_kernel() -> None:
    text = aotc.compile(Stack(), ROWS).explain()
    lines = _from_lines(text)
    line = re.escape(f"test_explain.py:{_line_of('# the block')}")
    assert any(re.search(rf"{line} \(blocks\.0\.proj\)", x) for x in lines), text
    assert any(re.search(rf"{line} \(blocks\.1\.norm\)", x) for x in lines), text
    # the nodes a module records name it in messages too: the graph's nodes carry it
    graph = aotc.compile(Stack(), ROWS).graph
    assert any(n.loc.endswith("(blocks.1.proj)") for n in graph.nodes)


def test_explain_names_torch_submodules() -> None:
    torch = pytest.importorskip("torch")

    class TorchStack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)])

        def forward(self, x):
            return self.layers[1](torch.relu(self.layers[0](x)))

    text = aotc.compile(TorchStack(), ROWS).explain()
    assert any("(layers.1)" in x for x in _from_lines(text)), text


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, start=1) if marker in line and "_line_of(" not in line)
