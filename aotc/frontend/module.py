"""``nn.Module``, ``Parameter`` and buffers: the module tree, PyTorch-named state dicts and loading them."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from aotc.errors import AotcError
from aotc.frontend.context import Tracer, active_tracer, current_tracer
from aotc.frontend.symint import Size
from aotc.frontend.tensor import Tensor
from aotc.ir.dtypes import DType, dtype_of
from aotc.ir.types import Value


class ModuleError(AotcError):
    """A module tree or a state dict is used wrongly (missing keys, shape mismatch, bad assignment)."""


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])

# Default initialization draws from one generator, like torch's global RNG; manual_seed resets it.
_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset the generator that initializes new parameters, for reproducible models."""
    global _rng
    _rng = np.random.default_rng(seed)


def init_uniform(shape: tuple[int, ...], bound: float) -> np.ndarray:
    return _rng.uniform(-bound, bound, shape).astype(np.float32)


def init_normal(shape: tuple[int, ...], std: float = 1.0) -> np.ndarray:
    return _rng.normal(0.0, std, shape).astype(np.float32)


def to_array(value: Any, what: str) -> np.ndarray:
    """A numpy array from numpy, torch tensors (any device, bfloat16 too), safetensors or array-likes."""
    if isinstance(value, StoredTensor):
        return value.data
    if isinstance(value, Tensor):
        raise ModuleError(f"{what}: a traced tensor has no values; pass an array")
    if not isinstance(value, np.ndarray):
        for step in ("detach", "cpu"):
            if callable(getattr(value, step, None)):
                value = getattr(value, step)()
        if callable(getattr(value, "numpy", None)):
            try:
                value = value.numpy()
            except TypeError:  # torch refuses .numpy() for bfloat16; go through float32
                value = value.float().numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise ModuleError(f"{what}: cannot convert {type(value).__name__} to an array ({e})") from None
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)  # float64 is not supported; float32 is torch's default
    elif arr.dtype.kind in "iu" and arr.dtype not in (np.int32, np.int64):
        arr = arr.astype(np.int64)
    try:
        dtype_of(arr.dtype)
    except AotcError:
        raise ModuleError(f"{what}: arrays of dtype {arr.dtype} are not supported") from None
    return arr


class StoredTensor(Tensor):
    """A tensor whose value lives in the module (a parameter or buffer): a numpy array outside a
    trace, a constant node inside one (named by its state_dict key)."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = to_array(data, type(self).__name__)

    def _t(self) -> Tracer:
        return active_tracer(f"using a {type(self).__name__.lower()}")

    def _v(self) -> Value:
        return self._t().constant(self, self.data)

    @property
    def shape(self) -> Size:
        return Size(self.data.shape)

    @property
    def dtype(self) -> DType:
        return dtype_of(self.data.dtype)

    # values are known, so these work (a parameter is a constant, not an input)
    def numpy(self) -> np.ndarray:
        return self.data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    def item(self) -> Any:
        return self.data.item()

    def tolist(self) -> Any:
        return self.data.tolist()

    def __bool__(self) -> bool:
        return bool(self.data)

    def __float__(self) -> float:
        return float(self.data)

    def __int__(self) -> int:
        return int(self.data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={tuple(self.data.shape)}, dtype={self.dtype.value})"


class Parameter(StoredTensor):
    """A learnable weight; ``requires_grad`` is kept for API compatibility only."""

    __slots__ = ("requires_grad",)

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        super().__init__(data)
        self.requires_grad = requires_grad


class Buffer(StoredTensor):
    """Module state that is not a parameter (e.g. BatchNorm's running statistics)."""

    __slots__ = ()


class Module:
    """Base of every model: parameters, buffers and submodules registered by attribute assignment."""

    training = False  # aotc compiles inference graphs: train() and eval() leave this False

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_states", OrderedDict())

    # -- registration ----------------------------------------------------------------------------------
    def _dicts(self) -> tuple[dict, dict, dict]:
        try:
            return self.__dict__["_parameters"], self.__dict__["_buffers"], self.__dict__["_modules"]
        except KeyError:
            raise ModuleError(f"{type(self).__name__}: call super().__init__() before assigning attributes") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            isinstance(value, (Parameter, Module))
            or name in self.__dict__.get("_parameters", ())
            or name in self.__dict__.get("_buffers", ())
            or name in self.__dict__.get("_modules", ())
        ):
            params, buffers, modules = self._dicts()
            if isinstance(value, Parameter):
                self._forget(name)
                params[name] = value
            elif isinstance(value, Module):
                self._forget(name)
                modules[name] = value
            elif name in params:
                if value is not None:
                    raise ModuleError(
                        f"cannot assign {type(value).__name__} as parameter {name!r} (Parameter or None expected)"
                    )
                params[name] = None
            elif name in buffers:
                buffers[name] = None if value is None else value if isinstance(value, Buffer) else Buffer(value)
            elif value is None:
                modules[name] = None
            else:
                raise ModuleError(
                    f"cannot assign {type(value).__name__} as child module {name!r} (Module or None expected)"
                )
            return
        object.__setattr__(self, name, value)

    def _forget(self, name: str) -> None:
        for d in self._dicts():
            d.pop(name, None)
        self.__dict__.get("_states", {}).pop(name, None)
        self.__dict__.pop(name, None)
        self.__dict__["_non_persistent"].discard(name)

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: look in the registries
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules", "_states"):
            if key in d and name in d[key]:
                return d[key][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if any(name in d for d in self._dicts()) or name in self.__dict__.get("_states", {}):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        _check_name(name)
        if param is not None and not isinstance(param, Parameter):
            raise ModuleError(f"register_parameter({name!r}): expected a Parameter or None, got {type(param).__name__}")
        self._forget(name)
        self._dicts()[0][name] = param

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        _check_name(name)
        self._forget(name)
        self._dicts()[1][name] = None if tensor is None else tensor if isinstance(tensor, Buffer) else Buffer(tensor)
        if not persistent:
            self.__dict__["_non_persistent"].add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        _check_name(name)
        if module is not None and not isinstance(module, Module):
            raise ModuleError(f"add_module({name!r}): expected a Module, got {type(module).__name__}")
        self._forget(name)
        self._dicts()[2][name] = module

    register_module = add_module

    def state(self, name: str, shape: Any, dtype: Any = "float32", init: Any = None) -> Any:
        """Declare state that lives across calls (a KV cache) and return it: inside ``forward`` it reads as a tensor
        (``self.<name>``) and updates in place with ``index_copy_`` or item assignment (aotc/frontend/state.py).

        ``shape`` holds ints and Dims of the model's inputs (a Dim's size is bound by the first call of a session);
        ``init`` is its initial value, an array that broadcasts to ``shape`` (None: zeros). A runtime Session holds
        one copy per session (``exe.session()``); ``state_dict`` does not include it.
        """
        from aotc.frontend.state import StateTensor

        _check_name(name)
        self._forget(name)
        st = StateTensor(shape, dtype, init)
        self.__dict__["_states"][name] = st
        return st

    def named_states(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """Every state of the module tree under its dotted path (``h.0.attn.k_cache``)."""
        for mprefix, m in self.named_modules(prefix=prefix):
            for name, st in m.__dict__.get("_states", {}).items():
                yield (f"{mprefix}.{name}" if mprefix else name), st

    # -- traversal ----------------------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, m in self._dicts()[2].items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self.named_children():
            yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def _named_members(self, key: int, prefix: str, recurse: bool, remove_duplicate: bool) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, v in m._dicts()[key].items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield (f"{mprefix}.{name}" if mprefix else name), v

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        return self._named_members(0, prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Buffer]]:
        return self._named_members(1, prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Buffer]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> Module:
        m: Module = self
        for part in target.split(".") if target else ():
            child = m._dicts()[2].get(part)
            if child is None:
                raise ModuleError(f"{type(m).__name__} has no submodule {part!r} (looking up {target!r})")
            m = child
        return m

    # -- state dicts ----------------------------------------------------------------------------------
    def _state_items(self, prefix: str = "") -> Iterator[tuple[str, StoredTensor]]:
        """Every persistent parameter and buffer under its PyTorch key, shared ones under each key."""
        params, buffers, modules = self._dicts()
        for name, p in params.items():
            if p is not None:
                yield prefix + name, p
        for name, b in buffers.items():
            if b is not None and name not in self.__dict__["_non_persistent"]:
                yield prefix + name, b
        for name, m in modules.items():
            if m is not None:
                yield from m._state_items(f"{prefix}{name}.")

    def state_dict(self, *, prefix: str = "", keep_vars: bool = False) -> OrderedDict[str, Any]:
        """Key -> numpy array (the module's own arrays, not copies), keys as PyTorch names them."""
        return OrderedDict((k, v if keep_vars else v.data) for k, v in self._state_items(prefix))

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy arrays into the parameters and buffers (cast to their dtypes). Validates everything
        first: on any error nothing is loaded."""
        if not isinstance(state_dict, Mapping):
            raise ModuleError(f"load_state_dict expects a mapping of names to arrays, got {type(state_dict).__name__}")
        own = OrderedDict(self._state_items())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors, loaded = [], {}
        for key, target in own.items():
            if key not in state_dict:
                continue
            arr = to_array(state_dict[key], f"state_dict[{key!r}]")
            if arr.shape != target.data.shape:
                errors.append(
                    f"size mismatch for {key}: copying a param with shape {arr.shape} from checkpoint, "
                    f"the shape in current model is {target.data.shape}"
                )
            loaded[key] = arr
        if strict and unexpected:
            errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected))
        if strict and missing:
            errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing))
        if errors:
            raise ModuleError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        for key, arr in loaded.items():
            target = own[key]
            target.data = np.array(arr, dtype=target.data.dtype, copy=True)
        return IncompatibleKeys(missing, unexpected)

    # -- conveniences -----------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tracer = current_tracer()
        if tracer is None:
            return self.forward(*args, **kwargs)
        with tracer.in_module(self):
            return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise ModuleError(f"{type(self).__name__} does not define forward()")

    def eval(self) -> Module:
        return self

    def train(self, mode: bool = True) -> Module:
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        return self

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """``to(dtype)`` casts floating-point parameters and buffers; devices are ignored."""
        dtype = kwargs.get("dtype")
        for a in args:
            if isinstance(a, (DType, np.dtype)) or (isinstance(a, str) and a in {d.value for d in DType}):
                dtype = a
        if dtype is not None:
            dt = dtype_of(dtype)
            for _, t in self._state_items():
                if t.dtype.is_float:
                    t.data = t.data.astype(dt.np)
        return self

    def float(self) -> Module:
        return self.to(DType.float32)

    def half(self) -> Module:
        return self.to(DType.float16)

    def bfloat16(self) -> Module:
        return self.to(DType.bfloat16)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "." in name:
        raise ModuleError(f"attribute name must be a non-empty string without '.', got {name!r}")
