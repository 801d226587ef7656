"""docs/ARCHITECTURE.md stays true: every path it names exists, every package under aotc/ is in its layer table,
and every import in aotc/ is one that table allows (nothing imports upward). The import graph is read from the
source with ``ast``, as tests/test_import_cycles.py reads it."""

from __future__ import annotations

import ast
import re

import pytest
from test_import_cycles import ROOT, _import_graph

REPO = ROOT.parent
PAGE = REPO / "docs" / "ARCHITECTURE.md"
ANYONE = "aotc.errors"


def _layer_table() -> dict[str, set[str]]:
    """The page's layer table: package -> the packages it may import."""
    text = PAGE.read_text()
    block = text.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in block.strip().splitlines()[2:]:  # past the header and its rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        package = cells[0].strip("`")
        rows[package] = set(re.findall(r"`([\w.]+)`", cells[2]))
    return rows


def _layer_of(module: str, layers: set[str]) -> str:
    """The innermost row of the table that ``module`` is in or under (``aotc`` itself only for its __init__)."""
    best = ""
    for layer in layers:
        if (module == layer or module.startswith(layer + ".")) and layer != "aotc" and len(layer) > len(best):
            best = layer
    return best or ("aotc" if module == "aotc" else "")


def _rooms() -> set[str]:
    """The packages and top-level modules directly under aotc/."""
    out = set()
    for path in ROOT.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            out.add(f"aotc.{path.name}")
        elif path.suffix == ".py" and path.name != "__init__.py":
            out.add(f"aotc.{path.stem}")
    return out


def test_every_package_under_aotc_is_in_the_layer_table() -> None:
    table = _layer_table()
    missing = sorted(_rooms() - set(table))
    assert not missing, f"docs/ARCHITECTURE.md's layer table has no row for {missing}: add one"
    gone = sorted(set(table) - _rooms() - {"aotc"})
    assert not gone, f"docs/ARCHITECTURE.md's layer table names packages that no longer exist: {gone}"


def test_every_import_is_one_the_layer_table_allows() -> None:
    table = _layer_table()
    bad = []
    for module, targets in sorted(_import_graph().items()):
        here = _layer_of(module, set(table))
        for target in sorted(targets):
            there = _layer_of(target, set(table))
            if there in (here, ANYONE):
                continue
            if there not in table[here]:
                bad.append(f"{module} ({here}) imports {target} ({there}): {', '.join(sorted(targets[target]))}")
    assert not bad, "imports docs/ARCHITECTURE.md's layer table does not allow:\n" + "\n".join(bad)


def test_the_layer_check_catches_an_upward_import() -> None:
    table = {"aotc.ir": set(), "aotc.frontend": {"aotc.ir"}}
    assert _layer_of("aotc.ir.ops.base", set(table)) == "aotc.ir"
    assert "aotc.frontend" not in table[_layer_of("aotc.ir.graph", set(table))]


def test_every_path_the_page_names_exists() -> None:
    text = PAGE.read_text()
    paths = set(re.findall(r"`((?:aotc|tests|cli|models|benchmarks|scripts|docs)/[\w./<>-]*)`", text))
    missing = []
    for raw in sorted(paths):
        if "<" in raw:  # a pattern such as aotc/kernels/<name>.py
            continue
        if not (REPO / raw.rstrip("/")).exists():
            missing.append(raw)
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"
    assert len(paths) > 40  # the page names the rooms; a parse that finds none would pass vacuously


def test_the_names_the_recipes_give_are_defined_where_they_say() -> None:
    """The tables and functions a recipe sends the reader to."""
    defined = {
        "aotc/ir/templates.py": ["TEMPLATES"],
        "aotc/ir/ops/base.py": ["Op", "OpDef"],
        "aotc/ir/onnx_form/emitters.py": ["EMITTERS", "_UNARY", "_BINARY"],
        "aotc/runtime/backends/__init__.py": ["KNOWN_DEVICES", "get_backend"],
        "aotc/runtime/backends/base.py": ["Program", "Backend"],
        "aotc/torch_export/table.py": ["ATEN"],
        "aotc/onnx/convert.py": ["CONVERTERS"],
        "aotc/lowering/pipeline.py": ["stages", "lower"],
        "aotc/kernels/scheduler.py": ["schedule_graph"],
        "aotc/artifact/reader.py": ["Artifact", "read_artifact"],
        "aotc/runtime/executable.py": ["load", "Executable"],
        "aotc/compiler.py": ["compile", "compile_graph"],
    }
    for path, names in defined.items():
        tree = ast.parse((REPO / path).read_text())
        top = {getattr(n, "name", None) for n in tree.body} | {
            t.id for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign) for t in _targets(n)
        }
        for name in names:
            assert name in top, f"{path} defines no {name} (docs/ARCHITECTURE.md sends readers there)"


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.Name]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t for t in targets if isinstance(t, ast.Name)]


@pytest.mark.parametrize("package", sorted(str(p.parent.relative_to(REPO)) for p in ROOT.rglob("*/__init__.py")))
def test_each_package_says_what_it_holds_and_who_may_import_it(package: str) -> None:
    init = REPO / package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc, f"{init} has no docstring"
    first = doc.splitlines()[0]
    assert "import" in first.lower(), f"{init}: the docstring's first line should say who may import it: {first!r}"
