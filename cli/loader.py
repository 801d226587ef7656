"""Load a model file: a Python file that says which model to compile and with which inputs.

The convention (also in README and ``aotc compile --help``):

* By default the file defines a function ``build()`` that takes no required
  arguments and returns ``(model, inputs)``; if there is no ``build``, the file
  defines module-level ``model`` and ``inputs`` instead.
* ``--model NAME`` picks another pair: the attributes ``NAME`` (the model) and
  ``NAME_inputs`` if the file defines ``NAME_inputs``; otherwise ``NAME`` must be
  a function like ``build`` returning ``(model, inputs)``.

``model`` is an ``aotc.nn.Module``, a plain function of tensors or a ``torch.nn.Module``
(captured with torch.export when traced); ``inputs`` maps each forward argument name to an
``aotc.TensorSpec``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import aotc
from aotc.errors import AotcError
from aotc_cli.paths import require_file
from aotc_cli.user_error import UserError

_AOTC_DIR = Path(aotc.__file__).resolve().parent


def _user_frame(exc: BaseException, path: Path) -> str:
    """``file:line`` of the innermost frame of the traceback that lies in the user's file."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(frame.filename).resolve() == path:
            return f"{frame.filename}:{frame.lineno}"
    return str(path)


def _raised_inside_aotc(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(_AOTC_DIR)


def call_user_code(path: Path, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``, which runs code of the user's file at ``path`` (importing it, ``build()``, tracing
    its forward): an exception raised outside aotc's own code is the user's, and becomes a UserError
    naming the innermost file:line in ``path``; one raised inside aotc stays an internal error."""
    try:
        return fn(*args, **kwargs)
    except (AotcError, UserError):
        raise
    except SyntaxError as exc:
        raise UserError(f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}") from exc
    except SystemExit as exc:
        # The command's own exit code must say how compiling went, not what the model file chose.
        raise UserError(
            f"{what} called sys.exit({exc.code!r}) (at {_user_frame(exc, path)}); a model file must define "
            "the model, not exit"
        ) from None
    except Exception as exc:
        if _raised_inside_aotc(exc):
            raise  # a bug in aotc, reported as an internal error
        raise UserError(f"{what} raised {type(exc).__name__}: {exc} (at {_user_frame(exc, path)})") from exc


def import_file(path: str | Path) -> ModuleType:
    """Import a Python file by path under a private module name; its folder is importable meanwhile."""
    path = require_file(path).resolve()
    if path.suffix != ".py":
        raise UserError(f"{path} is not a Python file (.py)")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    module_name = f"_aotc_model_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    sys.path.insert(0, str(path.parent))
    try:
        call_user_code(path, f"importing {path.name}", spec.loader.exec_module, module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module


def _call_builder(path: Path, module: ModuleType, name: str) -> tuple[Any, Any]:
    fn = getattr(module, name)
    if isinstance(fn, aotc.nn.Module):
        raise UserError(f"{path.name}: `{name}` is a model; also define `{name}_inputs` (its input specs)")
    if not callable(fn):
        raise UserError(f"{path.name}: `{name}` is not a function")
    required = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if required:
        raise UserError(
            f"{path.name}: `{name}()` must take no required arguments (it needs {', '.join(required)}); "
            f"to compile `{name}` itself, also define `{name}_inputs`"
        )
    result = call_user_code(path, f"{name}()", fn)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UserError(f"{path.name}: `{name}()` must return (model, inputs), got {type(result).__name__}")
    return result


def _check_inputs(path: Path, what: str, inputs: Any) -> dict[str, Any]:
    spec_type = aotc.TensorSpec
    if not isinstance(inputs, Mapping) or not inputs:
        raise UserError(f"{path.name}: {what} must be a non-empty dict of name -> aotc.TensorSpec")
    for key, spec in inputs.items():
        if not isinstance(key, str) or not isinstance(spec, spec_type):
            raise UserError(f"{path.name}: {what}[{key!r}] must be an aotc.TensorSpec keyed by str, got {spec!r}")
    return dict(inputs)


def load_model(path: str | Path, name: str | None = None) -> tuple[Any, dict[str, Any]]:
    """(model, inputs) from a model file, following the convention in this module's docstring."""
    path = Path(path).resolve()
    module = import_file(path)
    defines = set(vars(module))
    if name is None:
        if "build" in defines:
            model, inputs = _call_builder(path, module, "build")
            what = "build()[1]"
        elif {"model", "inputs"} <= defines:
            model, inputs, what = module.model, module.inputs, "`inputs`"
        else:
            missing = "`inputs`" if "model" in defines else "`model`" if "inputs" in defines else None
            hint = f" (it has one of the pair but no {missing})" if missing else ""
            raise UserError(f"{path.name} defines neither build() nor `model` and `inputs`{hint}")
    else:
        if name not in defines:
            raise UserError(f"{path.name} has no attribute `{name}` (from --model {name})")
        if f"{name}_inputs" in defines:
            model, inputs, what = getattr(module, name), getattr(module, f"{name}_inputs"), f"`{name}_inputs`"
        else:
            model, inputs = _call_builder(path, module, name)
            what = f"{name}()[1]"
    from aotc.torch_export import is_torch_model

    if is_torch_model(model):
        return _torch_model(path, model, what, inputs)
    if not callable(model):
        raise UserError(
            f"{path.name}: the model must be an aotc.nn.Module, a function or a torch.nn.Module, "
            f"got {type(model).__name__}"
        )
    return model, _check_inputs(path, what, inputs)


def _torch_model(path: Path, model: Any, what: str, inputs: Any) -> tuple[Any, dict[str, Any]]:
    """A torch.nn.Module as the function of tensors that tracing it runs through torch.export, with its inputs'
    dims given the example sizes torch traces at."""
    from aotc.torch_export._torch import is_exported_program
    from aotc.torch_export.module import TorchModel, example_dims

    if is_exported_program(model):
        raise UserError(
            f"{path.name}: the model is a torch.export.ExportedProgram; return the torch.nn.Module with aotc input "
            "specs from build(), or compile the program in Python with aotc.compile(exported_program)"
        )
    return TorchModel(model), example_dims(_check_inputs(path, what, inputs))
