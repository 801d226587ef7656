"""Launch a schedule's Triton kernels with Triton's interpreter on numpy memory, with no torch.

The interpreter wants torch-like tensors; ``HostTensor`` is the small part of that interface it
uses, over a numpy array. Kernels read and write the arrays' memory in place. Triton is imported
on the first launch, never when this module loads, so ``import aotc.runtime`` stays slim.

The interpreter keeps the current program id in module-global state, so launches are serialized
with one lock. A kernel's source is checked (``aotc.ir.kernel_source``: only what aotc's codegen writes)
before it is compiled, and its functions are cached, the ``MAX_FUNCTIONS`` most recently used only.

Every load, store and atomic a launch makes passes its address fence first (``address_fence``): an address
outside the launch's own argument arrays (or a write into one it only reads) is refused before any of it
happens. ``FENCE`` turns it off for measuring that cost.

Triton decides at import time whether its own library functions (``tl.sum``, ``tl.cdiv``, ...) are
interpreted, from ``TRITON_INTERPRET``. The compiler in the same process needs them compiled, so
the environment is left alone: while a launch runs, ``_interpreting`` turns the interpret knob on
and lets a compiled-mode ``@triton.jit`` function called from interpreted code run interpreted
(that call otherwise only raises "outside of the scope of a kernel").
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import hashlib
import importlib
import linecache
import math
import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from aotc.errors import AotcError, ExecError
from aotc.ir.kernel_source import BUILTINS, check_kernel_source, imported_modules
from aotc.ir.schedule import ArgKind, Kernel
from aotc.ir.triton_knobs import knob
from aotc.runtime.backends.address_fence import AddressFenceError, Fence

# Triton pointer types by numpy dtype name (bfloat16 is ml_dtypes' name; bool is one byte).
POINTER_TYPE_OF = {
    "float32": "*fp32",
    "float16": "*fp16",
    "bfloat16": "*bf16",
    "int32": "*i32",
    "int64": "*i64",
    "bool": "*i1",
    "int8": "*i8",
    "uint8": "*u8",
}
_SCALAR_NP = {"i32": np.int32, "i64": np.int64, "fp32": np.float32}
_LOCK = threading.RLock()
# Loaded kernel modules by (name, source), least recently used first. A server that loads and drops many
# artifacts keeps the newest MAX_FUNCTIONS; one model's distinct kernels number far fewer.
MAX_FUNCTIONS = 256
_FUNCTIONS: OrderedDict[tuple[str, str], _Loaded] = OrderedDict()
# Whether launches run behind the address fence (measurements of its cost turn it off).
FENCE = True
# Whether the fence narrows each pointer to the offsets its kernel's Extents claim (tests turn it on: every
# kernel they run then proves the compile-time derivation of its extents sound on what it really touches).
CHECK_EXTENTS = False


class HostTensor:
    """The torch-tensor surface Triton's interpreter touches, over a C-contiguous numpy array.

    The interpreter "copies to host" by rebinding a fresh tensor to the argument's storage, then
    copies back; here storage, host copy and device tensor are all this one object over the same
    memory, so both steps are no-ops and the kernel writes straight into the array.
    """

    def __init__(self, array: np.ndarray, dtype: Any) -> None:
        self.array = array
        self.dtype = dtype  # a triton.language dtype

    def data_ptr(self) -> int:
        return int(self.array.__array_interface__["data"][0])

    def untyped_storage(self) -> HostTensor:
        return self

    def cpu(self) -> HostTensor:
        return self

    def new_empty(self, *_args: Any, **_kwargs: Any) -> HostTensor:
        return self

    def set_(self, *_args: Any) -> HostTensor:
        return self

    def copy_(self, _other: Any) -> HostTensor:
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.array.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // max(self.array.itemsize, 1) for s in self.array.strides)

    @property
    def device(self) -> str:
        return "cpu"


class _Loaded:
    """A kernel's source loaded as a module: the function asked for, and what to forget when it is dropped."""

    def __init__(self, fn: Any, filename: str, namespace: dict[str, Any]) -> None:
        self.fn, self.filename, self.namespace = fn, filename, namespace

    def forget(self) -> None:
        """Drop what linecache and Triton hold for this module's functions: Triton's interpreter keeps each
        rewritten function in a class-level dict, and each JITFunction it builds to find a function's first
        line registers itself by module and name in a module-level dict; neither ever shrinks."""
        linecache.cache.pop(self.filename, None)
        t = _triton()
        rewritten = getattr(t.interpreter.InterpretedFunction, "rewritten_fn", None)
        registry = getattr(t.jit, "_triton_jit_function_registry", None)
        for value in list(self.namespace.values()):
            raw = getattr(value, "fn", None)
            if raw is None or getattr(raw, "__globals__", None) is not self.namespace:
                continue
            if isinstance(rewritten, dict):
                rewritten.pop(raw, None)
            if isinstance(registry, dict):
                registry.pop(f"{self.namespace['__name__']}:{raw.__qualname__}", None)


def load_function(name: str, source: str) -> Any:
    """The interpreted ``@triton.jit`` function ``name`` defined in module text ``source`` (cached).

    Raises ArtifactError, before anything in it runs, for a source that holds more than aotc's codegen
    writes (``aotc.ir.kernel_source``). The text is registered with ``linecache`` under a name derived from
    its hash, because Triton reads a kernel's source back through ``inspect``; helper ``@triton.jit``
    functions in the same text are interpreted too.
    """
    key = (name, source)
    with _LOCK:
        loaded = _FUNCTIONS.get(key)
        if loaded is not None:
            _FUNCTIONS.move_to_end(key)
            return loaded.fn
        loaded = _FUNCTIONS[key] = _exec_kernel_module(name, source)
        while len(_FUNCTIONS) > MAX_FUNCTIONS:
            _FUNCTIONS.popitem(last=False)[1].forget()
        return loaded.fn


def cached_functions() -> int:
    """How many kernel modules the cache holds."""
    with _LOCK:
        return len(_FUNCTIONS)


@functools.cache
def _triton() -> types.SimpleNamespace:
    """Triton's modules, imported on the first launch and nowhere else in the runtime, so
    ``import aotc.runtime`` (and loading this backend) stays free of Triton."""
    load = importlib.import_module
    return types.SimpleNamespace(
        triton=load("triton"),
        tl=load("triton.language"),
        interpreter=load("triton.runtime.interpreter"),
        jit=load("triton.runtime.jit"),
        JITFunction=load("triton.runtime.jit").JITFunction,
    )


def _exec_kernel_module(name: str, source: str) -> _Loaded:
    """Check ``source``, then run only its ``@triton.jit`` definitions: the imports it names are bound by
    this function (never executed), and the functions see only the builtins Triton accepts."""
    tree = check_kernel_source(source, name)
    t = _triton()
    modules = {"triton": t.triton, "triton.language": t.tl, "math": math}
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<aotc-kernel {name} {digest}>"
    namespace: dict[str, Any] = {
        "__name__": f"aotc_kernel_{name}_{digest}",
        "__file__": filename,
        "__builtins__": {b: getattr(builtins, b) for b in BUILTINS},
    }
    namespace.update((bound, modules[module]) for bound, module in imported_modules(tree).items())
    definitions = ast.Module(body=[s for s in tree.body if not isinstance(s, ast.Import)], type_ignores=[])
    # mtime None keeps the entry through linecache.checkcache().
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    # The knob decides whether @triton.jit builds interpreted functions.
    with knob(t.triton.knobs.runtime, "interpret", True):
        try:
            exec(compile(definitions, filename, "exec"), namespace)
        except Exception as e:
            linecache.cache.pop(filename, None)
            raise AotcError(f"kernel {name}: its source does not load: {type(e).__name__}: {e}") from e
    fn = namespace.get(name)
    if fn is None or not hasattr(fn, "fn"):
        linecache.cache.pop(filename, None)
        raise AotcError(f"kernel {name}: its source defines no @triton.jit function named {name!r}")
    return _Loaded(fn, filename, namespace)


def launch(kernel: Kernel, grid: Sequence[int], args: Sequence[Any], *, extents: bool = False) -> None:
    """Run ``kernel`` over ``grid`` (up to three ints) with ``args`` in ``kernel.args`` order.

    ``extents``: fence each pointer to the offsets its kernel's ``Extents`` claim (which the reader proved inside
    the pointer's value), not to its array: for a caller whose arrays run past their values, as the fake CUDA
    driver's run from a pointer to its allocation's end.

    Pointer args are C-contiguous numpy arrays whose dtype matches the arg's Triton type (written
    in place); size args are ints, passed with exactly the arg's integer type so int32 and int64
    arithmetic behaves as in the compiled kernel. Raises AotcError for a mismatched argument and
    ExecError when the interpreter fails while running.
    """
    if len(args) != len(kernel.args):
        raise AotcError(f"kernel {kernel.name} takes {len(kernel.args)} arguments, got {len(args)}")
    dims = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    if len(dims) != 3 or any(g < 0 for g in dims):
        raise AotcError(f"kernel {kernel.name}: grid must be up to three ints >= 0, got {tuple(grid)}")
    if 0 in dims:
        return
    with _LOCK:
        values = [_convert(kernel, spec, value, _triton().tl) for spec, value in zip(kernel.args, args)]
        fn = load_function(kernel.name, kernel.source)
        expected = [a.name for a in kernel.args] + [c for c, _ in kernel.constexprs]
        if list(fn.arg_names) != expected:
            raise AotcError(
                f"kernel {kernel.name}: its source takes ({', '.join(fn.arg_names)}) but the schedule passes "
                f"({', '.join(expected)})"
            )
        fence = _fence_of(kernel, values, dims, extents or CHECK_EXTENTS) if FENCE else None
        try:
            # Masked-off lanes compute on padding (0/0, log(0)) as the GPU does; their results are never
            # stored, so numpy's floating-point warnings about them say nothing about the outputs.
            with _interpreting(fence), np.errstate(all="ignore"):
                fn[dims](*values, **dict(kernel.constexprs))
        except Exception as e:
            cause = e.__cause__ if e.__cause__ is not None else e
            if isinstance(cause, AddressFenceError):
                raise cause from None
            raise ExecError(
                f"kernel {kernel.name} failed under the Triton interpreter: {type(cause).__name__}: {cause}"
            ) from e


@contextlib.contextmanager
def _interpreting(fence: Fence | None = None) -> Iterator[None]:
    """Triton switched to interpreting for one launch, with the interpreter's gaps (below) mended and its memory
    accesses behind ``fence``."""
    t = _triton()
    builder = t.interpreter.InterpreterBuilder
    with contextlib.ExitStack() as fenced:
        for owner, name, wrap in fence.patches(t.interpreter) if fence is not None else ():
            fenced.enter_context(_patched(owner, name, wrap))
        with _mended(t, builder):
            yield


@contextlib.contextmanager
def _mended(t: types.SimpleNamespace, builder: Any) -> Iterator[None]:
    """The interpreter's gaps (below) mended for a block."""
    with (
        _patched(t.JITFunction, "__call__", _call_interpreted),
        knob(t.triton.knobs.runtime, "interpret", True),
        _patched(builder, "create_dot", _bf16_dot_widened),
        _patched(builder, "cast_impl", _bf16_rounded_to_nearest),
        _patched(builder, "binary_op", _comparisons_typed_int1),
        # _patch_lang_tensor is private to the interpreter: a release that drops it is left unpatched.
        _patched(t.interpreter, "_patch_lang_tensor", _scalar_index_squeezed)
        if "_patch_lang_tensor" in vars(t.interpreter)
        else contextlib.nullcontext(),
    ):
        yield


@contextlib.contextmanager
def _patched(owner: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.name`` replaced by ``wrap(original)`` for a block."""
    orig = owner.__dict__[name]
    setattr(owner, name, wrap(orig))
    try:
        yield
    finally:
        setattr(owner, name, orig)


def _fence_of(kernel: Kernel, values: Sequence[Any], grid: Sequence[int] = (1, 1, 1), narrow: bool = False) -> Fence:
    """The fence of ``kernel`` launched over ``grid`` with ``values`` (converted args). A kernel of a plan
    writes only the values it lists among its outputs and its error flags; a hand-written one (no outputs
    listed) any of its arrays. With ``narrow``, each pointer is narrowed to its extents' offsets."""
    writes = set(kernel.outputs)
    reach = _extent_spans(kernel, values, grid) if narrow and kernel.extents is not None else None
    regions, sources = [], []
    for j, (spec, value) in enumerate(zip(kernel.args, values)):
        if isinstance(value, HostTensor):
            sources.append(value)
            start, end = value.data_ptr(), value.data_ptr() + value.array.nbytes
            if reach is not None:
                item = value.array.itemsize
                start, end = start + reach[j][0] * item, min(end, start + (reach[j][1] + 1) * item)
            writable = not writes or spec.kind is ArgKind.FLAG or spec.value in writes
            regions.append((start, max(start, end), spec.name, writable))
    return Fence(kernel.name, regions, sources)


def _extent_spans(kernel: Kernel, values: Sequence[Any], grid: Sequence[int]) -> list[tuple[int, int]]:
    """Per arg, the element offsets ``[lo, hi]`` its extents claim for this launch."""
    from aotc.ir.schedule import GRID_NAMES
    from aotc.ir.symbolic_values import evaluate

    env: dict[str, int] = dict(kernel.constexprs)
    env.update(zip(GRID_NAMES, (int(g) for g in grid)))
    for spec, value in zip(kernel.args, values):
        if spec.kind is ArgKind.SIZE:
            env[spec.name] = int(value.handle.data.reshape(-1)[0])
    x = kernel.extents
    assert x is not None
    return [(max(0, evaluate(lo, env)), evaluate(hi, env)) for lo, hi in zip(x.lows, x.highs)]


def _call_interpreted(_orig: Any) -> Any:
    """JITFunction.__call__ that runs the function's interpreted twin (made once per function)."""
    interpreter = _triton().interpreter

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = self.__dict__.get("_aotc_interpreted")
        if fn is None:
            fn = self.__dict__["_aotc_interpreted"] = interpreter.InterpretedFunction(self.fn)
        return fn(*args, **kwargs)

    return call


def _bf16_dot_widened(orig: Any) -> Any:
    """The interpreter (3.6 and 3.9) multiplies bf16 ``tl.dot`` operands as their raw uint16 bits;
    widen them to float32 first, which is exact, so a bf16 dot computes what the GPU's does."""
    tl, interpreter = _triton().tl, _triton().interpreter

    def widen(h: Any) -> Any:
        if h.dtype.scalar != tl.bfloat16:
            return h
        return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

    def create_dot(self: Any, a: Any, b: Any, *rest: Any) -> Any:
        return orig(self, widen(a), widen(b), *rest)

    return create_dot


def _bf16_rounded_to_nearest(orig: Any) -> Any:
    """The interpreter (3.9) converts float32 to bf16 by dropping the low 16 bits (toward zero); the GPU, like
    the cpu backend, rounds to nearest even. The bias adds up over a chain of bf16 ops (attention ends up at
    0.98 of the ONNX node tests' two-ulp tolerance where the GPU's rounding gives 0.7), so round as the GPU does."""
    tl, interpreter = _triton().tl, _triton().interpreter

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_bf16_bits(src.data), tl.bfloat16)
        return orig(self, src, dst_type)

    return cast_impl


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bf16 bit patterns (uint16), rounded to nearest even; NaN stays a (quiet) NaN."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)


def _comparisons_typed_int1(orig: Any) -> Any:
    """The 3.9 interpreter types a comparison's result as its operands' dtype (bool data in an int32 handle).
    A block never notices, but a scalar one is splat by its handle's dtype: ``mask & (k >= 0)`` with a scalar
    ``k`` (a ``static_range`` tap) then makes an int32 mask, and the load fails with "mask has unsupported
    dtype", where the compiled kernel splats an i1. Retype bool results as int1, as the compiler types them."""
    tl, interpreter = _triton().tl, _triton().interpreter

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        out = orig(self, lhs, rhs, op)
        if out.data.dtype == np.bool_ and out.dtype != tl.int1:
            return interpreter.TensorHandle(out.data, tl.int1)
        return out

    return binary_op


def _scalar_index_squeezed(orig: Any) -> Any:
    """The 3.6 interpreter takes a scalar's ``__index__`` (``range(tl.cdiv(n, BLOCK))``, a loop bound) as
    ``int(data)`` of the scalar's one-element array, which numpy >= 2.4 refuses ("only 0-dimensional arrays can
    be converted to Python scalars"): every kernel with such a loop, attention's included, fails. Take it from
    the squeezed array, as 3.9 does. The interpreter sets the tensor's dunders anew for each launch (and restores
    them after, in reverse order), so the fix goes into that step, after the interpreter's own."""

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", _squeezed_index)

    return patch_lang_tensor


def _squeezed_index(self: Any) -> int:
    return int(self.handle.data.squeeze())


def _convert(kernel: Kernel, spec: Any, value: Any, tl: Any) -> Any:
    if spec.type.startswith("*"):
        if not isinstance(value, np.ndarray):
            raise AotcError(
                f"kernel {kernel.name}: argument {spec.name} needs a numpy array, got {type(value).__name__}"
            )
        have = POINTER_TYPE_OF.get(value.dtype.name)
        if have != spec.type:
            raise AotcError(
                f"kernel {kernel.name}: argument {spec.name} is {spec.type}, got an array of dtype {value.dtype.name}"
            )
        if not value.flags.c_contiguous:
            raise AotcError(f"kernel {kernel.name}: argument {spec.name} must be a C-contiguous array")
        return HostTensor(value, _tl_dtype(tl, spec.type[1:]))
    np_type = _SCALAR_NP.get(spec.type)
    if np_type is None:
        raise AotcError(f"kernel {kernel.name}: argument {spec.name} has unsupported type {spec.type!r}")
    if spec.type == "fp32":
        data = np.array([value], dtype=np.float32)
    else:
        info = np.iinfo(np_type)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise AotcError(f"kernel {kernel.name}: argument {spec.name} ({spec.type}) needs an int, got {value!r}")
        if not info.min <= int(value) <= info.max:
            raise AotcError(f"kernel {kernel.name}: argument {spec.name} = {int(value)} does not fit {spec.type}")
        data = np.array([int(value)], dtype=np_type)
    ty = _tl_dtype(tl, spec.type)
    return tl.tensor(_triton().interpreter.TensorHandle(data, ty), ty)


def _tl_dtype(tl: Any, name: str) -> Any:
    return {
        "fp32": tl.float32,
        "fp16": tl.float16,
        "bf16": tl.bfloat16,
        "i32": tl.int32,
        "i64": tl.int64,
        "i1": tl.int1,
        "i8": tl.int8,
        "u8": tl.uint8,
    }[name]


def launch_source(
    source: str,
    name: str,
    grid: Sequence[int],
    args: Sequence[Any],
    types_: Sequence[str],
    constexprs: Mapping[str, int] | None = None,
) -> None:
    """Launch ``name`` from ``source`` without building a ``Kernel``: ``types_`` gives each
    argument's Triton type ("*fp32", "i32", ...) in order. For tests of hand-written kernels."""
    from aotc.ir.schedule import Arg, ArgKind
    from aotc.ir.templates import KernelKind

    names = load_function(name, source).arg_names
    kernel_args = tuple(Arg(n, t, ArgKind.BUFFER if t.startswith("*") else ArgKind.SIZE) for n, t in zip(names, types_))
    kernel = Kernel(
        name=name,
        kind=KernelKind.POINTWISE,
        nodes=(),
        inputs=(),
        outputs=(),
        args=kernel_args,
        grid=(1, 1, 1),
        source=source,
        constexprs=tuple((constexprs or {}).items()),
    )
    launch(kernel, grid, args)
