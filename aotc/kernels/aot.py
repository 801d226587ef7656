"""Ahead-of-time compile: each kernel of a ``Schedule`` to a cubin per GPU architecture, on a machine
with no GPU, plus the sm_80 PTX every newer GPU can JIT.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", cap, 32), options)`` does the work
(see shared/KERNELS.md). Compiles run in parallel worker processes (kernels/compile_workers.py), behind the on-disk ``KernelCache``; a full cache hit imports no Triton at all. Every output records the launch facts
(``LaunchMeta``) the runtime needs, checked against the PTX entry's parameter list so a Triton
release that changes the launch ABI fails here instead of at launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import linecache
import os
import re
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from aotc.errors import AotcError, UnsupportedError
from aotc.ir.launch import (
    DEFAULT_DRIVER_FLOOR,
    SCRATCH_PARAMS,
    Cubin,
    KernelBinary,
    LaunchMeta,
    capability,
    check_driver_floor,
    check_targets,
)
from aotc.ir.schedule import Kernel
from aotc.ir.triton_knobs import knob
from aotc.kernels.cache import Compiled, KernelCache, cache_key, to_json
from aotc.kernels.compile_workers import run_jobs as _run_jobs
from aotc.kernels.compile_workers import warm_up
from aotc.kernels.toolchain import PTXAS_VARIABLES, Toolchain, choose_toolchain

# The name the tests and callers know; the one check lives beside the launch data.
parse_targets = check_targets

DEFAULT_TARGETS = ("sm_80", "sm_90")
# PTX for sm_80 is what later GPUs (sm_100, sm_120, ...) can JIT; sm_90a PTX runs on Hopper only.
PORTABLE_ARCH = "sm_80"
# The oldest Triton whose ahead-of-time API and launch ABI (two trailing scratch pointers) aotc knows.
MIN_TRITON = (3, 6)
# PTX parameter width by Triton type: the launch ABI the runtime packs arguments with.
_PTX_PARAM = {"i32": ".u32", "i64": ".u64", "fp32": ".f32"}


class KernelCompileError(AotcError):
    """Triton could not compile a generated kernel (a compiler bug: the message names the kernel)."""


@dataclass(frozen=True)
class AotOptions:
    """What the ahead-of-time compile produces (the fields in ``key()``) and how it runs (the rest)."""

    # Fused multiply-add contraction changes results in the last bits; pinned and recorded, since
    # Triton's default flips in 3.10.
    enable_fp_fusion: bool = True
    # Line tables triple a cubin's size and only help profilers.
    line_info: bool = False
    # The oldest CUDA driver the binaries must load on: it picks each target's ptxas and PTX version
    # (kernels/toolchain.py).
    cuda_driver_floor: str = DEFAULT_DRIVER_FLOOR
    # Force the emitted PTX ISA version (e.g. 84); None: the newest the driver floor allows.
    ptx_version: int | None = None
    jobs: int | None = None  # worker processes; None: os.cpu_count()
    cache: bool = True
    cache_dir: str | None = None  # None: KernelCache's default (AOTC_CACHE_DIR)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cuda_driver_floor", check_driver_floor(self.cuda_driver_floor))

    def key(self) -> dict[str, Any]:
        # The floor is not here: what it changes (ptxas, PTX version) is in each job's toolchain.
        return {"enable_fp_fusion": self.enable_fp_fusion, "line_info": self.line_info}

    def toolchain(self, arch: str) -> Toolchain:
        chain = choose_toolchain(arch, self.cuda_driver_floor)
        return chain if self.ptx_version is None else Toolchain(chain.ptxas, self.ptx_version)


def triton_version() -> str:
    """The installed Triton's version, read without importing it (a cache hit must stay cheap)."""
    try:
        version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        version = None
    found = re.match(r"(\d+)\.(\d+)", version or "")
    if found is None or (int(found.group(1)), int(found.group(2))) < MIN_TRITON:
        have = f"triton {version} is installed" if version else "triton is not installed"
        raise UnsupportedError(
            f"compiling kernels ahead of time needs triton >= {'.'.join(map(str, MIN_TRITON))}, but {have}; "
            "install it with pip install 'aotc[compiler]'"
        )
    return version


def compile_kernels(
    kernels: Sequence[Kernel],
    targets: Sequence[str] = DEFAULT_TARGETS,
    options: AotOptions | None = None,
    on_done: Callable[[int, int], None] | None = None,
) -> dict[str, KernelBinary]:
    """Compile every kernel for every target (and sm_80 for the portable PTX), by kernel name.
    ``on_done(done, total)`` is called with the count of (kernel, target) compiles finished (cache hits first,
    then each as its worker answers), from the calling thread or a worker's reader thread.

    A kernel's ``arch_launches`` (ArchLaunch) are compiled too, each for its own target only (its PTX is
    that target's: a GPU only ever picks an arch launch it has the cubin for).
    """
    options = options or AotOptions()
    archs = check_targets(targets)
    plan: dict[str, tuple[Kernel, list[str], str]] = {}  # name -> (kernel, cubin archs, PTX arch)
    # A newer target every launch of a kernel has an arch launch for never runs the kernel's own code: no
    # cubin for it (the oldest target's is always built, and the PTX serves GPUs no cubin fits).
    covered: dict[str, set[str]] = {}  # kernel name -> the targets every launch of it has an arch launch for
    for k in kernels:
        mine = {v.arch for v in k.arch_launches}
        covered[k.name] = covered[k.name] & mine if k.name in covered else mine
    for k in kernels:
        own = [archs[0], *(a for a in archs[1:] if a not in covered[k.name])]
        plan.setdefault(k.name, (k, own, PORTABLE_ARCH))
        for v in k.arch_launches:
            if v.arch not in archs:
                raise AotcError(f"kernel {k.name} has an arch launch for {v.arch}, which is not a target {list(archs)}")
            entry = plan.setdefault(v.kernel.name, (v.kernel, [], v.arch))
            if v.arch not in entry[1]:
                entry[1].append(v.arch)
    # Launches of one kernel share a name and differ only in what they are passed (buffers, sizes,
    # grids); two kernels may share a name only if everything that reaches the binary is equal.
    version = triton_version()
    chains: dict[str, Toolchain] = {}
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for k in [*kernels, *(v.kernel for owner in kernels for v in owner.arch_launches)]:
        _, cubin_archs, ptx_arch = plan[k.name]
        for arch in dict.fromkeys([*cubin_archs, ptx_arch]):
            if arch not in chains:
                chains[arch] = options.toolchain(arch)
            spec = job_spec(k, arch, options, chains[arch])
            if jobs.setdefault((k.name, arch), spec) != spec:
                raise AotcError(f"two different kernels are named {k.name!r}")
    cache = KernelCache(options.cache_dir) if options.cache else None
    keys = {jk: spec_key(spec, version) for jk, spec in jobs.items()}
    done: dict[tuple[str, str], Compiled] = {}
    for jk, key in keys.items():
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            done[jk] = hit
    misses = [jk for jk in jobs if jk not in done]
    counted = None
    if on_done is not None:
        hits, total = len(done), len(jobs)
        on_done(hits, total)
        counted = lambda n: on_done(hits + n, total)  # noqa: E731  (n of the misses compiled)
    errors: list[str] = []
    for jk, result in zip(misses, _run_jobs([jobs[jk] for jk in misses], options.jobs, counted)):
        if isinstance(result, str):
            errors.append(result)
            continue
        done[jk] = result
        if cache is not None:
            cache.put(keys[jk], result)
    if errors:
        more = f" (and {len(errors) - 1} more failures)" if len(errors) > 1 else ""
        raise KernelCompileError(errors[0] + more)

    def meta(name: str, arch: str) -> LaunchMeta:
        # the constexprs it was compiled with (part of its cache key), which the binary bakes in
        return dataclasses.replace(done[name, arch].meta, constexprs=tuple(plan[name][0].constexprs))

    return {
        name: KernelBinary(
            name=name,
            cubins=tuple(Cubin(arch, done[name, arch].cubin, meta(name, arch)) for arch in cubin_archs),
            ptx=done[name, ptx_arch].ptx,
            ptx_meta=meta(name, ptx_arch),
        )
        for name, (_, cubin_archs, ptx_arch) in plan.items()
    }


def compile_cubins(
    kernels: Sequence[Kernel], arch: str, options: AotOptions | None = None
) -> dict[str, Compiled | str]:
    """Each kernel's cubin for ``arch`` alone (no portable PTX: the tuning bundle's candidates), through the
    cache; a kernel that does not compile maps to its error message instead of failing the rest."""
    options = options or AotOptions()
    (arch,) = check_targets((arch,))
    version, chain = triton_version(), options.toolchain(arch)
    specs = {k.name: job_spec(k, arch, options, chain) for k in kernels}
    cache = KernelCache(options.cache_dir) if options.cache else None
    out: dict[str, Compiled | str] = {}
    for name, spec in specs.items():
        hit = cache.get(spec_key(spec, version)) if cache is not None else None
        if hit is not None:
            out[name] = hit
    misses = [name for name in specs if name not in out]
    for name, result in zip(misses, _run_jobs([specs[n] for n in misses], options.jobs)):
        out[name] = result
        if cache is not None and not isinstance(result, str):
            cache.put(spec_key(specs[name], version), result)
    return out


def job_spec(kernel: Kernel, arch: str, options: AotOptions, toolchain: Toolchain) -> dict[str, Any]:
    """Everything one compile depends on, JSON-able: the worker's input, and (all but the ptxas path) the
    cache key's parts."""
    return {
        "name": kernel.name,
        "source": kernel.source,
        "signature": [[a.name, a.type] for a in kernel.args],
        "constexprs": [[n, v] for n, v in kernel.constexprs],
        "divisible": sorted(set(kernel.divisible)),
        "arch": arch,
        "num_warps": kernel.num_warps,
        "num_stages": kernel.num_stages,
        "options": options.key(),
        "toolchain": toolchain.key(),
        "ptxas_path": toolchain.ptxas.path,
    }


def spec_key(spec: Mapping[str, Any], triton: str) -> str:
    """The cache key of a job: the ptxas by its version, not its path, so that a cache built on one machine
    is hit on another with the same Triton (the GPU check carries one)."""
    return cache_key({**{k: v for k, v in spec.items() if k != "ptxas_path"}, "triton": triton})


def worker_main() -> None:
    """A compile worker's body (kernels/compile_workers.py starts it): warm up, then compile each JSON job spec
    read from stdin (one a line), answering one JSON line each as it ends."""
    warm_up()
    for line in sys.stdin.buffer:
        r = compile_one(json.loads(line))
        sys.stdout.write(json.dumps({"error": r} if isinstance(r, str) else {"ok": to_json(r)}) + "\n")
        sys.stdout.flush()


def compile_one(spec: Mapping[str, Any]) -> Compiled | str:
    """One kernel for one target (a worker's task); a failure comes back as its message."""
    name, arch = spec["name"], spec["arch"]
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        return f"kernel {name}: triton is not importable ({e}); install it with pip install 'aotc[compiler]'"
    try:
        fn = _jit_function(name, spec["source"])
        signature = dict(spec["signature"])
        constexprs = dict(spec["constexprs"])
        src = ASTSource(
            fn=fn,
            signature={**signature, **dict.fromkeys(constexprs, "constexpr")},
            constexprs=constexprs,
            attrs={(i,): [["tt.divisibility", 16]] for i in spec["divisible"]},
        )
        opts, chain = spec["options"], spec["toolchain"]
        compile_options: dict[str, Any] = {
            "num_warps": spec["num_warps"],
            "num_stages": spec["num_stages"],
            "enable_fp_fusion": opts["enable_fp_fusion"],
            "ptx_version": chain["ptx_version"],
        }
        cap = capability(arch)
        with _line_info(triton, opts["line_info"]), _ptxas(spec["ptxas_path"]):
            k = triton.compile(src, target=GPUTarget("cuda", cap, 32), options=compile_options)
        ptx = k.asm["ptx"]
        meta = _launch_meta(k.metadata, ptx, [t for _, t in spec["signature"]], opts["enable_fp_fusion"])
        ptxas = re.match(r"\d+\.\d+", chain["ptxas"])
        return Compiled(bytes(k.asm["cubin"]), ptx, dataclasses.replace(meta, ptxas_version=ptxas.group(0)))
    except Exception as e:
        text = str(e).strip() or type(e).__name__
        return f"kernel {name} does not compile for {arch}: {type(e).__name__}: {text}"


def _launch_meta(md: Any, ptx: str, arg_types: list[str], fp_fusion: bool) -> LaunchMeta:
    version = re.search(r"^\.version\s+(\S+)", ptx, re.M)
    target = re.search(r"^\.target\s+(\w+)", ptx, re.M)
    if version is None or target is None:
        raise AotcError("the PTX has no .version/.target line")
    params = (*arg_types, *SCRATCH_PARAMS)
    _check_abi(md.name, ptx, params)
    return LaunchMeta(
        name=md.name,
        arch=target.group(1),
        num_warps=int(md.num_warps),
        num_ctas=int(md.num_ctas),
        shared=int(md.shared),
        global_scratch_size=int(md.global_scratch_size),
        global_scratch_align=int(md.global_scratch_align),
        profile_scratch_size=int(getattr(md, "profile_scratch_size", 0)),
        profile_scratch_align=int(getattr(md, "profile_scratch_align", 1)),
        params=params,
        triton_version=str(md.triton_version),
        ptx_version=version.group(1),
        enable_fp_fusion=bool(md.enable_fp_fusion) if hasattr(md, "enable_fp_fusion") else fp_fusion,
    )


def _check_abi(name: str, ptx: str, params: tuple[str, ...]) -> None:
    """The entry's PTX parameters must be exactly ``params`` (pointers 64-bit, then by type)."""
    entry = re.search(rf"\.entry\s+{re.escape(name)}\s*\((.*?)\)", ptx, re.S)
    if entry is None:
        raise AotcError(f"the PTX has no entry named {name!r}")
    found = [line.split()[1] for line in entry.group(1).split(",") if ".param" in line]
    want = [".u64" if t.startswith("*") else _PTX_PARAM.get(t, "?") for t in params]
    if found != want:
        raise AotcError(
            f"the compiled entry takes parameters {found}, but aotc's launch ABI expects {want} "
            "(the Triton release may have changed its launch ABI)"
        )


def _jit_function(name: str, source: str) -> Any:
    """The compiled-mode ``@triton.jit`` function ``name`` from module text ``source``. Registered with
    linecache because Triton reads a kernel's source back through ``inspect``."""
    import triton

    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<aotc-kernel {name} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"aotc_kernel_{name}_{digest}")
    module.__file__ = filename
    with knob(triton.knobs.runtime, "interpret", False):
        exec(compile(source, filename, "exec"), module.__dict__)
    fn = module.__dict__.get(name)
    if fn is None or not hasattr(fn, "fn"):
        raise AotcError(f"its source defines no @triton.jit function named {name!r}")
    return fn


@contextlib.contextmanager
def _line_info(triton: Any, keep: bool) -> Iterator[None]:
    # Set through the environment as well: Triton's own compile cache keys on the variable.
    with knob(triton.knobs.compilation, "disable_line_info", not keep, "TRITON_DISABLE_LINE_INFO"):
        yield


@contextlib.contextmanager
def _ptxas(path: str) -> Iterator[None]:
    """Triton assembles every target with ``path``: its variables name the ptxas for below and from sm_90 (or
    sm_100) on, so both are set; its cache of the ptxas version is keyed by arch only, so it is cleared."""
    saved = {var: os.environ.get(var) for var in PTXAS_VARIABLES}
    os.environ.update(dict.fromkeys(PTXAS_VARIABLES, path))
    _clear_ptxas_caches()
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        _clear_ptxas_caches()


def _clear_ptxas_caches() -> None:
    from triton.backends.nvidia import compiler

    for name in ("get_ptxas_version", "get_ptxas"):
        clear = getattr(getattr(compiler, name, None), "cache_clear", None)
        if clear is not None:
            clear()


__all__ = [
    "DEFAULT_TARGETS",
    "PORTABLE_ARCH",
    "AotOptions",
    "KernelCompileError",
    "compile_cubins",
    "compile_kernels",
    "parse_targets",
    "triton_version",
]
