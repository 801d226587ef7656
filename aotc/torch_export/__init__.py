"""PyTorch programs -> Graph (imported by the compiler; imports aotc.ir, aotc.frontend, torch lazily).

PyTorch models in, unchanged: a ``torch.nn.Module`` or a ``torch.export.ExportedProgram`` -> aotc Graph.

``import_torch(model, inputs)`` is the entry point ``aotc.compile`` dispatches to. torch is imported lazily, when a
torch model is compiled; ``is_torch_model`` tells one apart without importing torch. Layers (DESIGN §2): this
package imports ir and frontend only.

* ``table``: the one table of ATen translations, and the decomposition table derived from it;
* ``translate``: the walk over an exported graph; ``symbols``: torch's sizes and guards as aotc expressions;
* ``module``: a torch.nn.Module traced through torch.export; ``importer``: an ExportedProgram's own symbols.
"""

from __future__ import annotations

from typing import Any

from aotc.torch_export._torch import is_exported_program, is_torch_module


def is_torch_model(obj: Any) -> bool:
    """A torch.nn.Module or a torch.export.ExportedProgram (checked without importing torch)."""
    return is_torch_module(obj) or is_exported_program(obj)


def __getattr__(name: str) -> Any:
    if name in ("import_torch", "import_exported_program"):
        from aotc.torch_export import importer

        return getattr(importer, name)
    raise AttributeError(f"module 'aotc.torch_export' has no attribute {name!r}")


__all__ = ["import_exported_program", "import_torch", "is_torch_model"]
