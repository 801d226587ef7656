"""No import cycles in aotc/: read from the source with ``ast``, nothing is imported. Every import counts, those
under ``if TYPE_CHECKING:`` and those inside functions too; ``importlib.import_module`` calls are not read.

An import names one module of this tree: ``from aotc.ir.ops import Op`` names aotc/ir/ops/__init__.py,
``from aotc.kernels import emit`` names aotc/kernels/emit.py. The packages an import passes through on the way are
not counted (``import aotc.ir.graph`` runs aotc/ir/__init__.py too, but that is a package handing names on, not a
dependency of the importer)."""

from __future__ import annotations

import ast
from pathlib import Path

import aotc

ROOT = Path(aotc.__file__).parent
PACKAGE = ROOT.name


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, dict[str, set[str]]]:
    """Module -> {module it imports: the names it takes (the module's own name for ``import x``)}."""
    paths = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    graph: dict[str, dict[str, set[str]]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph[name] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in paths:
                        edges.setdefault(alias.name, set()).add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                    if target in paths:
                        edges.setdefault(target, set()).add(alias.name)
        edges.pop(name, None)
    return graph


def _cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, targets = work[-1]
            w = next(targets, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        component.append(x)
                        if x == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(graph[w])))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return out


def test_the_import_graph_is_read_whole() -> None:
    graph = _import_graph()
    assert {"aotc", "aotc.ir", "aotc.ir.templates", "aotc.runtime.backends.cuda.driver"} <= set(graph)
    assert {"aotc.ir.symbolic", "aotc.ir.schedule"} <= set(graph["aotc.ir.templates"])  # from aotc.ir.x import y
    assert "aotc.ir.graph" in graph["aotc.ir.templates"]  # under TYPE_CHECKING
    assert "aotc.kernels.emit" in graph["aotc.kernels.pointwise"]
    assert "aotc.artifact.generated.Cubin" in graph["aotc.artifact.generated.KernelCode"]  # inside a method


def test_cycle_detection_names_the_loop_and_not_what_hangs_off_it() -> None:
    graph = {"a": {"b": {"f"}}, "b": {"c": {"g"}}, "c": {"a": {"h"}}, "d": {"a": {"i"}}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": {"f"}}, "b": {}}) == []


def test_aotc_has_no_import_cycles() -> None:
    graph = _import_graph()
    cycles = _cycles(graph)
    lines = []
    for component in cycles:
        members = set(component)
        lines.append("cycle: " + ", ".join(component))
        lines += [
            f"  {a} -> {b}: {', '.join(sorted(graph[a][b]))}"
            for a in component
            for b in sorted(graph[a])
            if b in members
        ]
    assert not cycles, "\n".join(lines)
