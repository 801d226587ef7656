"""Launch plans and kernel code (schema >= 3) back into ``aotc.ir.schedule`` / ``aotc.ir.launch`` objects.

Structure is checked here (indices, enum codes, column lengths, canonical s-expressions, the kernel
table's first-use order, the features lists); what the plan means is checked by plan_checks.py, the
same checks the writer runs, so the reader accepts exactly the plans the writer writes. Every vector length
goes through ``count`` (bounded by the FlatBuffer's size) before anything is built from it; string vectors
are read in bulk from the verified buffer, and each distinct expression text is parsed once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aotc.artifact.code_checks import (
    ARG_KIND_CODES,
    LEGACY_KIND_CODES,
    check_arch_binaries,
    check_code,
    derive_driver_floor,
)
from aotc.artifact.pacing import pace
from aotc.artifact.plan_checks import (
    ARCH_VARIANTS,
    GRAPH_FEATURES,
    KERNEL_FEATURES,
    KNOWN_KERNEL_FEATURES,
    STATE_FEATURE,
    check_schedule,
)
from aotc.artifact.tables import Counter, column, expr, text
from aotc.errors import ArtifactError
from aotc.ir.graph import Graph
from aotc.ir.launch import Cubin, KernelBinary, LaunchMeta
from aotc.ir.schedule import ArchLaunch, Arg, ArgKind, Buffer, Extents, IndexCheck, Kernel, Schedule, Size, View
from aotc.ir.templates import BY_KIND, KernelKind

# The first schema with states (Graph.states, the "state" feature).
STATE_VERSION = 10

_LEGACY_KINDS = {c: k for k, c in LEGACY_KIND_CODES.items()}
_U32 = struct.Struct("<I").unpack_from
# vtable slots of the string vectors read with PlanDecoder._column (schema.fbs field order)
_LAUNCH_ARG_SIZES, _LAUNCH_GRID, _LAUNCH_FUSED, _LAUNCH_EXTENTS = 16, 18, 22, 28
_ARCH_GRID, _ARCH_EXTENTS = 8, 12
_CODE_CONSTEXPR_NAMES, _CODE_ARG_NAMES, _CODE_ARG_TYPES = 10, 20, 22
_META_PARAMS, _META_CONSTEXPR_NAMES = 22, 32
_SCHEDULE_DECLINED = 16
_EXTENTS_LOWS, _EXTENTS_HIGHS, _EXTENTS_NAMES, _EXTENTS_REQUIRES = 4, 6, 8, 14
BOUND_VERSION = 6  # launches carry digests and extents, binaries their constexprs
NAMED_KIND_VERSION = 8  # a kernel's kind is its template's name (KernelCode.kind_name)
_ARG_KINDS = {c: k for k, c in ARG_KIND_CODES.items()}


@dataclass
class PlanDecoder:
    """Decodes the kernel table once, then each variant's schedule in file order."""

    root: Any
    count: Counter
    version: int
    features: tuple[str, ...] = ()
    kernel_features: tuple[str, ...] = ()
    unusable: tuple[str, ...] = ()  # kernel features this reader does not know: kernels are ignored
    driver_floor: str = ""  # schema >= 5, with binaries: the oldest CUDA driver every binary loads on
    codes: list[tuple[Kernel, KernelBinary | None]] = field(default_factory=list)
    _next: int = 0
    _schedules: int = 0
    _decoded: list[Schedule] = field(default_factory=list)
    _exprs: dict[str, Size] = field(default_factory=dict)

    def __post_init__(self) -> None:
        r = self.root
        if self.version < 3:
            if not (r.FeaturesIsNone() and r.KernelFeaturesIsNone() and r.KernelsIsNone()):
                raise ArtifactError(f"a schema version {self.version} file holds schema 3 kernel tables")
            self.features = GRAPH_FEATURES
            return
        if r.FeaturesIsNone() or r.KernelFeaturesIsNone() or r.KernelsIsNone():
            raise ArtifactError("the features, kernel_features and kernels lists are required from schema 3")
        self.features = self._strings(r.FeaturesLength(), r.Features, "features")
        self.kernel_features = self._strings(r.KernelFeaturesLength(), r.KernelFeatures, "kernel features")
        known = (*GRAPH_FEATURES, STATE_FEATURE)
        needs = [f for f in self.features if f not in known]
        if needs:
            raise ArtifactError(
                f"this file needs feature {needs[0]!r}, which this aotc release cannot use (it knows "
                f"{list(known)}); upgrade aotc to read it"
            )
        stateful = (*GRAPH_FEATURES, STATE_FEATURE)
        if self.features != GRAPH_FEATURES and (self.features != stateful or self.version < STATE_VERSION):
            raise ArtifactError(f"features {list(self.features)} are not {list(GRAPH_FEATURES)} (or {list(stateful)})")
        self.unusable = tuple(f for f in self.kernel_features if f not in KNOWN_KERNEL_FEATURES)
        if self.unusable:
            return  # the graphs still load (cpu); the kernel tables are left unread
        n = self.count(r.KernelsLength(), "kernels")
        self.codes = [self._code(r.Kernels(i), f"kernel {i}") for i in range(n)]
        with_binary = sum(b is not None for _, b in self.codes)
        if with_binary not in (0, n):
            raise ArtifactError(f"{with_binary} of {n} kernels have binaries (every kernel has one, or none)")
        floor = r.CudaDriverFloor() if self.version >= 5 else None
        if with_binary and self.version >= 5:
            if floor is None:
                raise ArtifactError("a file with kernel binaries must name its CUDA driver floor (schema 5)")
            self.driver_floor = text(floor, "CUDA driver floor")
            need = derive_driver_floor(self.binaries.values())
            if self.driver_floor != need:
                raise ArtifactError(
                    f"the file names CUDA driver floor {self.driver_floor[:20]!r}, but its kernel binaries need {need}"
                )
        elif floor is not None:
            raise ArtifactError("a file without kernel binaries names a CUDA driver floor")
        elif with_binary:  # older files did not say: the oldest driver their binaries load on, as the writer derives it
            self.driver_floor = derive_driver_floor(self.binaries.values())

    @property
    def binaries(self) -> dict[str, KernelBinary]:
        return {k.name: b for k, b in self.codes if b is not None}

    def schedule(self, s: Any | None, graph: Graph, what: str) -> Schedule | None:
        """The plan a variant's Schedule table ``s`` (None: it has none) holds for its decoded ``graph``."""
        if s is None or self.unusable:
            return None
        self._schedules += 1
        bound = self.version >= BOUND_VERSION
        extents: list[Extents] = []
        if bound:
            if s.ExtentsIsNone():
                raise ArtifactError(f"{what} has no extents table (required from schema {BOUND_VERSION})")
            n_ext = self.count(s.ExtentsLength(), f"{what} extents")
            extents = [self._extents(s.Extents(i), f"{what} extents {i}") for i in range(n_ext)]
        elif not s.ExtentsIsNone():
            raise ArtifactError(f"{what}: a schema version {self.version} file holds schema {BOUND_VERSION} extents")
        used: list[int] = []
        n = self.count(s.LaunchesLength(), f"{what} launches")
        launches = tuple(self._launch(s.Launches(i), f"{what} launch {i}", extents, used) for i in range(n))
        if bound:
            _check_interned(extents, used, what)
        n_buffers = self.count(s.BuffersLength(), f"{what} buffers")
        buffers = tuple(self._buffer(s.Buffers(i), f"{what} buffer {i}") for i in range(n_buffers))
        values = column(s.ViewValuesAsNumpy(), np.int64).tolist()
        bases = column(s.ViewBasesAsNumpy(), np.int64).tolist()
        if len(values) != len(bases):
            raise ArtifactError(f"{what} has {len(values)} view values but {len(bases)} view bases")
        schedule = Schedule(
            kernels=launches,
            buffers=buffers,
            arena_bytes=self._expr(text(s.ArenaBytes(), f"{what} arena"), f"{what} arena"),
            views=tuple(View(v, b) for v, b in zip(values, bases)),
            flags=int(s.Flags()),
            declined=self._column(s, _SCHEDULE_DECLINED, f"{what} declined"),
        )
        check_schedule(graph, schedule, what, bound=bound)
        self._decoded.append(schedule)
        return schedule

    def finish(self) -> None:
        """After every variant's schedule: each kernel launched, and the kernel features what the writer writes."""
        if self._next != len(self.codes):
            raise ArtifactError(f"kernel {self._next} is not launched by any variant")
        if self.unusable:
            return
        want = () if not self._schedules else KERNEL_FEATURES if self.binaries else KERNEL_FEATURES[:1]
        if any(k.arch_launches for s in self._decoded for k in s.kernels):
            want += (ARCH_VARIANTS,)
        check_arch_binaries(self._decoded, self.binaries)
        if self.kernel_features != want:
            raise ArtifactError(f"kernel features {list(self.kernel_features)} do not match its kernels ({list(want)})")

    # -- tables --------------------------------------------------------------------------------
    def _code(self, c: Any, what: str) -> tuple[Kernel, KernelBinary | None]:
        name = text(c.Name(), f"{what} name")
        what = f"{what} ({name})"
        kind = self._kind(c, what)
        cnames = self._column(c, _CODE_CONSTEXPR_NAMES, f"{what} constexpr names")
        cvalues = column(c.ConstexprValuesAsNumpy(), np.int64).tolist()
        names = self._column(c, _CODE_ARG_NAMES, f"{what} arg names")
        types = self._column(c, _CODE_ARG_TYPES, f"{what} arg types")
        if len(cnames) != len(cvalues) or len(names) != len(types):
            raise ArtifactError(f"{what}: its name and value/type columns have different lengths")
        kernel = Kernel(
            name=name,
            kind=kind,
            nodes=(),
            inputs=(),
            outputs=(),
            args=tuple(Arg(n, t, ArgKind.SIZE) for n, t in zip(names, types)),
            grid=(1, 1, 1),
            source=text(c.Source(), f"{what} source"),
            constexprs=tuple(zip(cnames, cvalues)),
            num_warps=int(c.NumWarps()),
            num_stages=int(c.NumStages()),
            divisible=tuple(column(c.DivisibleAsNumpy(), np.uint32).tolist()),
        )
        binary = None
        ptx, ptx_meta = c.Ptx(), c.PtxMeta()
        if (ptx is None) != (ptx_meta is None):
            raise ArtifactError(f"{what} has PTX without its launch metadata, or the other way round")
        n_cubins = self.count(c.CubinsLength(), f"{what} cubins")
        if ptx is None and n_cubins:
            raise ArtifactError(f"{what} has cubins but no PTX")
        if ptx is not None:
            cubins = tuple(self._cubin(c.Cubins(i), f"{what} cubin {i}") for i in range(n_cubins))
            binary = KernelBinary(name, cubins, text(ptx, f"{what} PTX"), self._meta(ptx_meta, f"{what} PTX"))
        check_code(kernel, binary, what, bound=self.version >= BOUND_VERSION, whole_source=False)
        return kernel, binary

    def _kind(self, c: Any, what: str) -> KernelKind:
        """The kernel's template: its kind_name (schema >= 8), or the template its enum code names (3-7)."""
        code, name = int(c.Kind()), c.KindName()
        if self.version < NAMED_KIND_VERSION:
            if name is not None:
                raise ArtifactError(f"{what}: a schema version {self.version} file holds a schema 8 kind name")
            kind = _LEGACY_KINDS.get(code)
            if kind is None:
                raise ArtifactError(f"{what} has unknown kernel kind {code}")
            return kind
        if name is None:
            raise ArtifactError(f"{what} has no kind name (required from schema {NAMED_KIND_VERSION})")
        if code != 0:
            raise ArtifactError(f"{what}: kind code {code} beside its kind name (0 from schema {NAMED_KIND_VERSION})")
        text_name = text(name, f"{what} kind name")
        row = BY_KIND.get(text_name)
        if row is None:
            raise ArtifactError(
                f"{what} has kernel kind {text_name[:60]!r}, which is not a template of this aotc release (it knows "
                f"{sorted(BY_KIND)}); upgrade aotc to read it"
            )
        return row.kind

    def _cubin(self, c: Any, what: str) -> Cubin:
        data = column(c.DataAsNumpy(), np.uint8).tobytes()
        return Cubin(text(c.Arch(), f"{what} arch"), data, self._meta(c.Meta(), f"{what} meta"))

    def _meta(self, m: Any, what: str) -> LaunchMeta:
        fp = int(m.EnableFpFusion())
        if fp not in (0, 1):
            raise ArtifactError(f"{what}: enable_fp_fusion is {fp}, not 0 or 1")
        constexprs: tuple[tuple[str, int], ...] = ()
        if self.version >= BOUND_VERSION:
            if m.ConstexprNamesIsNone() or m.ConstexprValuesIsNone():
                raise ArtifactError(
                    f"{what}: launch metadata lacks its constexprs (required from schema {BOUND_VERSION})"
                )
            names = self._column(m, _META_CONSTEXPR_NAMES, f"{what} constexpr names")
            values = column(m.ConstexprValuesAsNumpy(), np.int64).tolist()
            if len(names) != len(values):
                raise ArtifactError(f"{what}: {len(names)} constexpr names but {len(values)} values")
            constexprs = tuple(zip(names, values))
        elif not (m.ConstexprNamesIsNone() and m.ConstexprValuesIsNone()):
            raise ArtifactError(f"{what}: a schema version {self.version} file holds schema {BOUND_VERSION} constexprs")
        return LaunchMeta(
            name=text(m.Name(), f"{what} name"),
            arch=text(m.Arch(), f"{what} arch"),
            num_warps=int(m.NumWarps()),
            num_ctas=int(m.NumCtas()),
            shared=int(m.Shared()),
            global_scratch_size=int(m.GlobalScratchSize()),
            global_scratch_align=int(m.GlobalScratchAlign()),
            profile_scratch_size=int(m.ProfileScratchSize()),
            profile_scratch_align=int(m.ProfileScratchAlign()),
            params=self._column(m, _META_PARAMS, f"{what} params"),
            triton_version=text(m.TritonVersion(), f"{what} triton version"),
            ptx_version=text(m.PtxVersion(), f"{what} PTX version"),
            enable_fp_fusion=fp == 1,
            ptxas_version=text(m.PtxasVersion(), f"{what} ptxas version") if self.version >= 5 else "",
            constexprs=constexprs,
        )

    def _code_at(self, index: int, what: str) -> Kernel:
        """Kernel ``index`` of the file, launched here; kernels are first launched in file order."""
        if index >= len(self.codes):
            raise ArtifactError(f"{what} launches kernel {index}, but the file has {len(self.codes)}")
        if index > self._next:
            raise ArtifactError(f"{what} is the first launch of kernel {index}, but kernel {self._next} comes first")
        self._next += index == self._next
        return self.codes[index][0]

    def _launch(self, fl: Any, what: str, extents: list[Extents], used: list[int]) -> Kernel:
        pace()  # see aotc/artifact/pacing.py
        code = self._code_at(int(fl.Code()), what)
        what = f"{what} ({code.name})"
        kinds = column(fl.ArgKindsAsNumpy(), np.uint8).tolist()
        values = column(fl.ArgValuesAsNumpy(), np.int64).tolist()
        sizes = self._column(fl, _LAUNCH_ARG_SIZES, f"{what} arg sizes")
        if not len(kinds) == len(values) == len(sizes) == len(code.args):
            raise ArtifactError(f"{what}: its arg columns do not all have the kernel's {len(code.args)} args")
        args = []
        for a, k, v, s in zip(code.args, kinds, values, sizes):
            kind = _ARG_KINDS.get(k)
            if kind is None:
                raise ArtifactError(f"{what} arg {a.name} has unknown kind {k}")
            args.append(Arg(a.name, a.type, kind, v, self._expr(s, f"{what} arg {a.name} size")))
        grid = self._column(fl, _LAUNCH_GRID, f"{what} grid")
        if len(grid) != 3:
            raise ArtifactError(f"{what} grid has {len(grid)} dims, expected 3")
        n_checks = self.count(fl.ChecksLength(), f"{what} checks")
        launch = code.replace(
            nodes=tuple(column(fl.NodesAsNumpy(), np.uint32).tolist()),
            inputs=tuple(column(fl.InputsAsNumpy(), np.int64).tolist()),
            outputs=tuple(column(fl.OutputsAsNumpy(), np.int64).tolist()),
            args=tuple(args),
            grid=tuple(self._expr(g, f"{what} grid") for g in grid),
            checks=tuple(self._check(fl.Checks(i), f"{what} check {i}") for i in range(n_checks)),
            fused=self._column(fl, _LAUNCH_FUSED, f"{what} fused"),
        )
        launch = self._bound(fl, launch, _LAUNCH_EXTENTS, extents, used, what)
        if fl.ArchLaunchesIsNone():
            return launch
        if self.version < 4:
            raise ArtifactError(f"{what}: a schema version {self.version} file holds schema 4 arch launches")
        n = self.count(fl.ArchLaunchesLength(), f"{what} arch launches")
        if n == 0:
            raise ArtifactError(f"{what}: an empty arch launches list (the writer leaves it out)")
        return launch.replace(
            arch_launches=tuple(
                self._arch_launch(fl.ArchLaunches(i), launch, f"{what} arch launch {i}", extents, used)
                for i in range(n)
            )
        )

    def _bound(self, t: Any, k: Kernel, slot: int, extents: list[Extents], used: list[int], what: str) -> Kernel:
        """``k`` with the digest and extents of launch (or arch launch) table ``t`` (schema >= 6)."""
        if self.version < BOUND_VERSION:
            if t.Digest() is not None or t._tab.Offset(slot):
                raise ArtifactError(f"{what}: a schema version {self.version} file holds schema {BOUND_VERSION} fields")
            return k
        digest = t.Digest()
        if digest is None or not t._tab.Offset(slot):
            raise ArtifactError(f"{what} has no digest or extents (required from schema {BOUND_VERSION})")
        index = int(t.Extents())
        if index >= len(extents):
            raise ArtifactError(f"{what} has extents {index}, but its schedule has {len(extents)}")
        used.append(index)
        return k.replace(digest=text(digest, f"{what} digest"), extents=extents[index])

    def _extents(self, x: Any, what: str) -> Extents:
        lows = self._column(x, _EXTENTS_LOWS, f"{what} lows")
        highs = self._column(x, _EXTENTS_HIGHS, f"{what} highs")
        names = self._column(x, _EXTENTS_NAMES, f"{what} range names")
        los = column(x.RangeLowsAsNumpy(), np.int64).tolist()
        his = column(x.RangeHighsAsNumpy(), np.int64).tolist()
        requires = self._column(x, _EXTENTS_REQUIRES, f"{what} requires")
        if len(lows) != len(highs) or not len(names) == len(los) == len(his):
            raise ArtifactError(f"{what}: its columns have different lengths")
        return Extents(
            lows=tuple(self._expr(e, f"{what} low") for e in lows),
            highs=tuple(self._expr(e, f"{what} high") for e in highs),
            ranges=tuple(zip(names, los, his)),
            requires=tuple(self._expr(e, f"{what} requirement") for e in requires),
        )

    def _arch_launch(self, v: Any, launch: Kernel, what: str, extents: list[Extents], used: list[int]) -> ArchLaunch:
        code = self._code_at(int(v.Code()), what)
        if [(a.name, a.type) for a in code.args] != [(a.name, a.type) for a in launch.args]:
            raise ArtifactError(f"{what}: kernel {code.name} does not take the launch's args")
        grid = self._column(v, _ARCH_GRID, f"{what} grid")
        if len(grid) != 3:
            raise ArtifactError(f"{what} grid has {len(grid)} dims, expected 3")
        kernel = launch.replace(
            name=code.name,
            source=code.source,
            constexprs=code.constexprs,
            num_warps=code.num_warps,
            num_stages=code.num_stages,
            divisible=code.divisible,
            kind=code.kind,
            grid=tuple(self._expr(g, f"{what} grid") for g in grid),
        )
        kernel = self._bound(v, kernel, _ARCH_EXTENTS, extents, used, what)
        return ArchLaunch(text(v.Arch(), f"{what} arch"), kernel)

    def _check(self, c: Any, what: str) -> IndexCheck:
        return IndexCheck(
            slot=int(c.Slot()),
            input=text(c.Input(), f"{what} input"),
            op=text(c.Op(), f"{what} op"),
            low=self._expr(text(c.Low(), what), f"{what} low"),
            high=self._expr(text(c.High(), what), f"{what} high"),
        )

    def _buffer(self, b: Any, what: str) -> Buffer:
        return Buffer(
            value=int(b.Value()),
            nbytes=self._expr(text(b.Nbytes(), what), f"{what} nbytes"),
            offset=self._expr(text(b.Offset(), what), f"{what} offset"),
            first=int(b.First()),
            last=int(b.Last()),
        )

    def _column(self, table: Any, slot: int, what: str) -> tuple[str, ...]:
        """The string vector in vtable ``slot`` of ``table``, read straight from the buffer: one vtable lookup
        for the vector rather than one per element (the generated accessors'). verify_flatbuffer has already
        checked every vector and string in the buffer; the slots are schema.fbs's (test_plan_decode_columns.py
        compares them with the generated accessors)."""
        tab = table._tab
        o = tab.Offset(slot)
        if not o:
            return ()
        buf, vec = tab.Bytes, tab.Vector(o)
        n = self.count(_U32(buf, vec - 4)[0], what)
        out = []
        for i, at in enumerate(range(vec, vec + 4 * n, 4)):
            s = at + _U32(buf, at)[0]
            try:
                out.append(str(buf[s + 4 : s + 4 + _U32(buf, s)[0]], "utf-8"))
            except UnicodeDecodeError:
                raise ArtifactError(f"{what} {i} is not valid UTF-8") from None
        return tuple(out)

    def _expr(self, s: str, what: str) -> Size:
        """``tables.expr`` (the writer's text of an expression, parsed), once per distinct text: launches repeat the
        same sizes, grids and extents."""
        e = self._exprs.get(s)
        if e is None:
            e = self._exprs[s] = expr(s, what)
        return e

    def _strings(self, n: int, get: Any, what: str) -> tuple[str, ...]:
        return tuple(text(get(i), f"{what} {i}") for i in range(self.count(n, what)))


def _check_interned(extents: list[Extents], used: list[int], what: str) -> None:
    """The writer stores each distinct Extents once, in the order its launches (then their arch launches) first use
    them, and no other: the reader holds a file to that."""
    first = list(dict.fromkeys(used))
    if first != list(range(len(extents))):
        raise ArtifactError(f"{what}: its extents are not each used, in first-use order (first uses {first[:8]})")
    if len(set(extents)) != len(extents):
        raise ArtifactError(f"{what}: its extents table holds an entry twice")
