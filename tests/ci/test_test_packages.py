"""A test package must not take the name of an installed module.

pytest puts tests/ on sys.path and imports tests/NAME/ (a folder with an __init__.py) as the top-level package NAME,
so a library that later imports its own NAME gets ours instead. transformers 5.25 began importing the `kernels`
distribution it now requires, and found tests/kernels/ (since renamed tests/kernel_layer/): every Hugging Face test
failed with "cannot import name 'CUDAProperties' from 'kernels'".
"""

import importlib.metadata
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_package_shadows_an_installed_top_level_module() -> None:
    installed = importlib.metadata.packages_distributions()
    packages = sorted(p.parent.name for p in TESTS.glob("*/__init__.py"))
    assert packages, f"no test packages found under {TESTS}"
    shadowing = {name: installed[name] for name in packages if name in installed}
    assert not shadowing, f"tests/ folders that shadow installed modules (rename them): {shadowing}"
