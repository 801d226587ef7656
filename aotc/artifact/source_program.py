"""A kernel's stored Triton source read as index math, for ``source_bounds``: every load, store and atomic with
its pointer and mask, and every name the addresses read, each resolved to the one assignment it comes from.

The reader does not take a file's word for what its kernels touch (``Extents`` is metadata the file also
stores): it reads the source as stored, with ``ast`` (nothing runs), and bounds each address from it. Only what
aotc's codegen writes is understood, and anything else that could reach memory is refused here, naming the
line: statements are assignments, augmented assignments, expression statements, ``for`` loops over
``range``/``tl.range``/``tl.static_range`` and ``while`` loops (a compare-and-swap's); calls are the language's value functions (``PURE``), its
loads, stores and atomics (``ACCESSES``), ``min``/``max``/``float``/``int``, the ``.to`` cast, and in-kernel tensor
descriptors: ``tl.make_tensor_descriptor`` (a value) and its ``.load``/``.store`` (accesses, bounded from the
descriptor's shape and strides by ``source_descriptors``). Block pointers, host-made descriptors (the
``tl.load_tensor_descriptor`` family, a descriptor parameter), inline assembly and any other call are refused: the
reader cannot bound what they touch.

Names are resolved as single assignments: a name read inside a loop before the loop body assigns it, or read
after a loop that assigns it, holds a value carried across iterations (a ``phi``), which ``source_bounds``
treats as unknown: an address that reads one cannot be bounded and is refused.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache

from aotc.errors import ArtifactError
from aotc.ir.kernel_source import check_kernel_source

# Loads, stores and atomics: the function, the position of its mask among the positional args (None: none).
ACCESSES = {
    "load": 1,
    "store": 2,
    "atomic_add": 2,
    "atomic_and": 2,
    "atomic_max": 2,
    "atomic_min": 2,
    "atomic_or": 2,
    "atomic_xchg": 2,
    "atomic_xor": 2,
    "atomic_cas": None,
}
# Language functions that compute values and touch no memory.
PURE = frozenset(
    {
        "abs", "arange", "argmax", "argmin", "broadcast_to", "cast", "cdiv", "ceil", "cos", "cumsum", "div_rn",
        "dot", "erf", "exp", "exp2", "expand_dims", "fdiv", "floor", "fma", "full", "log", "log2", "max",
        "maximum", "min", "minimum", "num_programs", "program_id", "reshape", "rsqrt", "sigmoid", "sin", "split",
        "sqrt", "sqrt_rn", "sum", "trans", "where", "zeros", "zeros_like", "join", "permute", "clamp", "umulhi",
        "xor_sum", "reduce_or", "interleave", "cumprod", "flip", "sort", "softmax", "ravel", "view", "squeeze",
        "unsqueeze", "static_assert", "multiple_of", "max_contiguous", "max_constancy", "pointer_type",
    }
)  # fmt: skip
BUILTIN_CALLS = frozenset({"min", "max", "float", "int"})
# A descriptor's methods that move its boxes: what they touch is the region its shape and strides span.
DESCRIPTOR_ACCESSES = {".load": "load", ".store": "store"}
LOOPS = frozenset({"range", "tl.range", "tl.static_range"})


@dataclass(frozen=True)
class Def:
    """Where a name's value comes from: ``expr`` (an assignment's value), ``loop`` (a loop counter: ``args``
    are the range's start, stop and step nodes), ``param`` (a kernel parameter), ``data`` (one of a tuple's
    values: unknown) or ``phi`` (carried across a loop's iterations: unknown)."""

    kind: str
    name: str
    node: ast.expr | None = None
    args: tuple[ast.expr, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class Access:
    """One load, store or atomic: its call's function, pointer and mask nodes and its line. Through a tensor
    descriptor (``descriptor``), ``pointer`` is the descriptor the method is called on and there is no mask."""

    op: str
    pointer: ast.expr
    mask: ast.expr | None
    line: int
    text: str
    descriptor: bool = False


@dataclass
class SourceProgram:
    """A kernel's source as the index math ``source_bounds`` evaluates."""

    kernel: str
    params: tuple[str, ...]
    defs: list[Def] = field(default_factory=list)
    refs: dict[int, int] = field(default_factory=dict)  # id(Name node) -> index into defs
    accesses: list[Access] = field(default_factory=list)
    tree: ast.Module | None = None  # kept alive: refs are keyed by its nodes' ids

    def deref(self, node: ast.expr) -> ast.expr:
        """``node`` without broadcasts (``x[:, None]``) and with names followed to the expression they hold."""
        seen = 0
        while seen < 10_000:
            seen += 1
            if isinstance(node, ast.Subscript) and is_broadcast(node.slice):
                node = node.value
            elif isinstance(node, ast.Name) and id(node) in self.refs:
                d = self.defs[self.refs[id(node)]]
                if d.kind != "expr" or d.node is None:
                    return node
                node = d.node
            else:
                return node
        return node

    def def_of(self, node: ast.expr) -> Def | None:
        while isinstance(node, ast.Subscript) and is_broadcast(node.slice):
            node = node.value
        if isinstance(node, ast.Name) and id(node) in self.refs:
            return self.defs[self.refs[id(node)]]
        return None


def is_broadcast(s: ast.expr) -> bool:
    parts = s.elts if isinstance(s, ast.Tuple) else [s]
    return all(
        (isinstance(p, ast.Constant) and p.value is None)
        or (isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None)
        for p in parts
    )


def call_name(node: ast.Call) -> str:
    """``tl.load``, ``min``, ``.to`` (a method), or '' for anything else."""
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        if isinstance(f.value, ast.Name) and f.value.id == "tl":
            return f"tl.{f.attr}"
        if isinstance(f.value, ast.Name) and f.value.id == "triton" and f.attr == "cdiv":
            return "tl.cdiv"
        return f".{f.attr}"
    return ""


@lru_cache(maxsize=1024)
def parse_program(source: str, kernel: str) -> SourceProgram:
    """The program of the ``@triton.jit`` function ``kernel`` in ``source``; ArtifactError naming the line of
    the first construct the reader cannot bound."""
    tree = check_kernel_source(source, kernel)  # first what any kernel source may hold (ir/kernel_source.py)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel]
    if len(fns) != 1:
        raise ArtifactError(f"kernel {kernel!r}: its source defines it {len(fns)} times, not once")
    fn = fns[0]
    params = tuple(a.arg for a in fn.args.args)
    prog = SourceProgram(kernel, params, tree=tree)
    scope: dict[str, int] = {}
    for p in params:
        scope[p] = _new(prog, Def("param", p, line=fn.lineno))
    _Reader(prog, source).block(fn.body, scope)
    return prog


def _assigned(loop: ast.For | ast.While) -> set[str]:
    """The names a loop's body assigns."""
    out = {t.id for n in loop.body for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    return out | {
        n.target.id for n in ast.walk(loop) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)
    }


def _new(prog: SourceProgram, d: Def) -> int:
    prog.defs.append(d)
    return len(prog.defs) - 1


class _Reader:
    def __init__(self, prog: SourceProgram, source: str) -> None:
        self.prog, self.lines = prog, source.split("\n")

    def refuse(self, node: ast.AST, what: str) -> ArtifactError:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return ArtifactError(
            f"kernel {self.prog.kernel!r} line {line} ({text[:80]!r}): {what}; the reader cannot bound what it "
            "touches, so the kernel is refused"
        )

    def block(self, body: list[ast.stmt], scope: dict[str, int]) -> None:
        for stmt in body:
            self.stmt(stmt, scope)

    def stmt(self, s: ast.stmt, scope: dict[str, int]) -> None:
        if isinstance(s, ast.Assign):
            self.expr(s.value, scope)
            target = s.targets[0] if len(s.targets) == 1 else None
            if isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts):
                for t in target.elts:  # ``lo, hi = tl.split(x)``: values, not index math
                    scope[t.id] = _new(self.prog, Def("data", t.id, line=s.lineno))  # type: ignore[attr-defined]
                return
            if not isinstance(target, ast.Name):
                raise self.refuse(s, "an assignment to something other than one name or a tuple of names")
            name = target.id
            scope[name] = _new(self.prog, Def("expr", name, s.value, line=s.lineno))
        elif isinstance(s, ast.AugAssign):
            if not isinstance(s.target, ast.Name):
                raise self.refuse(s, "an augmented assignment to something other than a name")
            value = ast.BinOp(left=ast.Name(id=s.target.id, ctx=ast.Load()), op=s.op, right=s.value)
            ast.copy_location(value, s)
            ast.copy_location(value.left, s)
            self.expr(value, scope)
            scope[s.target.id] = _new(self.prog, Def("expr", s.target.id, value, line=s.lineno))
        elif isinstance(s, ast.Expr):
            if not isinstance(s.value, ast.Call):
                if isinstance(s.value, ast.Constant):
                    return  # a docstring
                raise self.refuse(s, "an expression statement that is not a call")
            self.expr(s.value, scope)
        elif isinstance(s, ast.For):
            self.loop(s, scope)
        elif isinstance(s, ast.While):
            self.repeat(s, scope)
        elif isinstance(s, ast.Pass):
            return
        else:
            raise self.refuse(s, f"a {type(s).__name__.lower()} statement, which codegen never writes")

    def loop(self, s: ast.For, scope: dict[str, int]) -> None:
        if s.orelse or not isinstance(s.target, ast.Name) or not isinstance(s.iter, ast.Call):
            raise self.refuse(s, "a loop other than `for name in range(...)`")
        if call_name(s.iter) not in LOOPS or s.iter.keywords or not 1 <= len(s.iter.args) <= 3:
            raise self.refuse(s, "a loop other than `for name in range(start, stop, step)`")
        for a in s.iter.args:
            self.expr(a, scope)
        args = list(s.iter.args)
        if len(args) == 1:
            args.insert(0, ast.Constant(0))
        if len(args) == 2:
            args.append(ast.Constant(1))
        assigned = _assigned(s)
        inner = dict(scope)
        for name in assigned:  # what the body reads of these before assigning them: the last iteration's
            inner[name] = _new(self.prog, Def("phi", name, line=s.lineno))
        inner[s.target.id] = _new(self.prog, Def("loop", s.target.id, args=tuple(args), line=s.lineno))
        self.block(s.body, inner)
        for name in assigned | {s.target.id}:  # after the loop: whichever iteration ran last, or none
            scope[name] = _new(self.prog, Def("phi", name, line=s.lineno))

    def repeat(self, s: ast.While, scope: dict[str, int]) -> None:
        """``while cond:`` (a compare-and-swap loop): no counter; what the body assigns is carried."""
        if s.orelse:
            raise self.refuse(s, "a while loop with an else")
        assigned = _assigned(s)
        inner = dict(scope)
        for name in assigned:
            inner[name] = _new(self.prog, Def("phi", name, line=s.lineno))
        self.expr(s.test, inner)
        self.block(s.body, inner)
        for name in assigned:
            scope[name] = _new(self.prog, Def("phi", name, line=s.lineno))

    def expr(self, e: ast.expr, scope: dict[str, int]) -> None:
        for n in ast.walk(e):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                if n.id in scope:
                    self.prog.refs[id(n)] = scope[n.id]
            elif isinstance(n, ast.Call):
                self.call(n)
            elif isinstance(n, (ast.Lambda, ast.NamedExpr, ast.ListComp, ast.GeneratorExp, ast.Await)):
                raise self.refuse(n, f"a {type(n).__name__}")

    def call(self, c: ast.Call) -> None:
        name = call_name(c)
        if name.startswith("tl.") and name[3:] in ACCESSES:
            op = name[3:]
            if not c.args:
                raise self.refuse(c, f"tl.{op} with no pointer")
            mask = next((k.value for k in c.keywords if k.arg == "mask"), None)
            pos = ACCESSES[op]
            if mask is None and pos is not None and len(c.args) > pos:
                mask = c.args[pos]
            line = getattr(c, "lineno", 0)
            text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
            self.prog.accesses.append(Access(op, c.args[0], mask, line, text))
            return
        if (name.startswith("tl.") and name[3:] in PURE) or name == "tl.make_tensor_descriptor":
            return
        if name in DESCRIPTOR_ACCESSES and isinstance(c.func, ast.Attribute):
            line = getattr(c, "lineno", 0)
            text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
            self.prog.accesses.append(Access(DESCRIPTOR_ACCESSES[name], c.func.value, None, line, text, True))
            return
        if name in BUILTIN_CALLS or name in (".to",):
            return
        raise self.refuse(c, f"a call of {name or ast.unparse(c.func)!r}, which is no value function of the language")
