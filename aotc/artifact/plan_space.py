"""What every launch-plan check stands on: a variant's symbols (``Space``), the plan being checked (``Plan``)
and the facts a check proves, refuses or leaves to the runtime (``Fact``, ``PlanFacts``).

Every expression parses as the graph's (no index variables), names only the variant's symbols and has
sound bounds (``ir.symbolic.bounds``: a divisor that may be <= 0 is refused).

Facts about sizes (buffer sizes and offsets, grids, views) are proved over the symbols' whole ranges
(``ir.symbolic.prove_nonneg``), not only at their ends. A fact the symbolic layer cannot prove is
evaluated at two bindings, every symbol at its maximum and every symbol at its minimum (each rounded to its
``multiple_of``), and refused if it fails there; otherwise it is returned as a ``Fact`` that the runtime
checks once per shape, on every backend (aotc/runtime/plan_bounds.py). Guards may narrow the symbols
further; the ranges hold every binding a call can have.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aotc.artifact.code_checks import fail
from aotc.errors import ArtifactError, ShapeError
from aotc.ir.digest import DigestCache
from aotc.ir.graph import Graph
from aotc.ir.ops import Op
from aotc.ir.schedule import ALIGN, Buffer, Schedule, Size
from aotc.ir.state import state_chains
from aotc.ir.symbolic import SymExpr, add, mul, to_infix
from aotc.ir.symbolic_values import bounds, divisor, evaluate, prove_nonneg
from aotc.ir.types import TensorType, Value


def refuse(what: str, check: str, msg: str) -> ArtifactError:
    """A plan check that failed: ``what`` names the variant and the launch (index and kernel) or buffer."""
    return ArtifactError(f"{what}: {check} check failed: {msg}")


@dataclass(frozen=True, slots=True)
class Fact:
    """``expr >= 0`` must hold at every binding a call runs at. The symbolic layer could not prove it over the
    symbols' whole ranges (it holds at the two bindings checked at load), so the runtime checks it once per
    shape (aotc/runtime/plan_bounds.py)."""

    what: str  # the variant and the launch or buffer, as in a refusal
    check: str  # the check's name
    claim: str  # what must hold, for the message
    expr: Size
    launch: int = -1  # a grid fact: the launch, and the kernel code (the launch's own or an
    code: str = ""  # arch launch's) whose grid it bounds; "" for a fact of every plan

    def refusal(self, env: Mapping[str, int], value: int) -> ArtifactError:
        return refuse(self.what, self.check, f"{self.claim} is false at {dict(env)} ({to_infix(self.expr)} = {value})")


@dataclass(frozen=True, slots=True)
class PlanFacts:
    """What a verified plan leaves to check per shape."""

    what: str = ""
    facts: tuple[Fact, ...] = ()
    # the arena's buffers when no two live at once were proved apart: swept per shape (``check_disjoint``)
    live: tuple[Buffer, ...] = ()


Claim = str | Callable[[], str]  # what a fact says, for messages; a callable is formatted only when needed


def _text(claim: Claim) -> str:
    return claim if isinstance(claim, str) else claim()


class _Memo:
    """Results per expression, found by identity: a decoded file parses each distinct text to one object (and
    its graphs share interned types), so repeated layers hit without hashing expression trees. Each entry
    keeps its key alive, so an id is never reused while it is cached."""

    def __init__(self, compute: Callable[[Size], object]) -> None:
        self.compute = compute
        self.table: dict[int, tuple[object, object]] = {}

    def __call__(self, e: Size) -> object:
        hit = self.table.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        v = self.compute(e)
        self.table[id(e)] = (e, v)
        return v


class Space:
    """A variant's symbols: their ranges, multiples and the two bindings the memory plan is checked at.
    Bounds, proofs and values at the two bindings are computed once per expression."""

    def __init__(self, graph: Graph) -> None:
        self.ranges = {s.name: (s.min, s.max) for s in graph.symbols}
        self.multiples = {s.name: s.multiple_of for s in graph.symbols}
        m = self.multiples
        self.at_max = {s.name: s.max // m[s.name] * m[s.name] for s in graph.symbols}
        self.at_min = {s.name: -(-s.min // m[s.name]) * m[s.name] for s in graph.symbols}
        self._bounds = _Memo(lambda e: bounds(e, self.ranges, self.multiples))
        self._at = _Memo(lambda e: (evaluate(e, self.at_max), evaluate(e, self.at_min)))
        self._proved = _Memo(self._prove)
        self._divisor = _Memo(lambda e: divisor(e, self.multiples))
        self._le: dict[tuple[int, int], tuple[Size, Size]] = {}

    def check(self, e: Size, what: str, nonneg: bool = False) -> tuple[int, int]:
        """``e``'s bounds; refuses unknown symbols, divisors that may be <= 0, and (``nonneg``) an expression
        whose lower bound is negative and which is negative at the symbols' max or min."""
        hit = self._bounds.table.get(id(e))
        if hit is not None and hit[0] is e:  # checked before
            lohi: tuple[int, int] = hit[1]  # type: ignore[assignment]
        elif isinstance(e, bool) or not isinstance(e, (int, SymExpr)):
            raise fail(what, f"expected an integer expression, got {type(e).__name__}")
        elif isinstance(e, int):
            lohi = (e, e)
        else:
            unknown = sorted(e.free_symbols() - self.ranges.keys())
            if unknown:
                raise fail(what, f"expression {e} uses symbols {unknown} the variant does not declare")
            try:
                lohi = self._bounds(e)  # type: ignore[assignment]
            except ShapeError as err:
                raise fail(what, f"expression {e}: {err}") from None
        if nonneg and lohi[0] < 0:
            # interval bounds are loose for some sound expressions (cdiv(b*(s+127)*8, 1024) - b): check the two
            # bindings the memory plan is checked at
            for env, v in zip(self.bindings(), self.at(e)):
                if v < 0:
                    raise fail(what, f"expression {e} is negative ({v}) at {dict(env)}")
        return lohi

    def bindings(self) -> tuple[Mapping[str, int], Mapping[str, int]]:
        return self.at_max, self.at_min

    def at(self, e: Size) -> tuple[int, int]:
        """``e`` at the symbols' max and at their min."""
        return (e, e) if isinstance(e, int) else self._at(e)  # type: ignore[return-value]

    def aligned(self, e: Size) -> bool:
        """Whether ``e`` is a multiple of ALIGN for every binding."""
        return (e if isinstance(e, int) else self._divisor(e)) % ALIGN == 0  # type: ignore[operator]

    def _prove(self, e: Size) -> bool:
        try:
            return prove_nonneg(e, self.ranges, self.multiples)
        except ShapeError:
            return False

    def proved(self, e: Size) -> bool:
        """Whether ``e >= 0`` for every binding in the ranges (False: not proved)."""
        return e >= 0 if isinstance(e, int) else self._proved(e)  # type: ignore[return-value]

    def require(
        self, e: Size, facts: list[Fact], what: str, check: str, claim: Claim, per_shape: bool = False, **where: object
    ) -> None:
        """``e >= 0`` for every binding: proved, else refused where it fails at the two bindings, else a Fact.
        ``per_shape``: a fact that may fail where the ranges are wide and hold at the shapes calls have (a grid
        within CUDA's limits) is left to the call without trying the two bindings."""
        if self.proved(e):
            return
        for env, v in zip(self.bindings(), self.at(e) if not per_shape else ()):
            if v < 0:
                raise refuse(what, check, f"{_text(claim)} is false: {to_infix(e)} is negative ({v}) at {dict(env)}")
        facts.append(Fact(what, check, _text(claim), e, **where))  # type: ignore[arg-type]

    def at_most(
        self, a: Size, b: Size, facts: list[Fact], what: str, check: str, claim: Claim, **where: object
    ) -> None:
        """``a <= b`` for every binding (see ``require``)."""
        if a is b:
            return
        key = (id(a), id(b))
        hit = self._le.get(key)
        if hit is not None and hit[0] is a and hit[1] is b:
            return
        if a != b:
            diff = add(b, mul(a, -1))
            self.require(diff, facts, what, check, claim, **where)
            if not self.proved(diff):
                return
        self._le[key] = (a, b)  # equal or proved: keeps both alive, so the ids stay theirs


class Plan:
    """One variant's plan being checked: the graph's values, storage roots and the memo tables the checks of
    launch_checks.py and binding_checks.py share across launches (repeated layers hit them)."""

    def __init__(self, graph: Graph, s: Schedule, what: str) -> None:
        self.graph, self.s, self.what = graph, s, what
        self.space = Space(graph)
        self.values: dict[int, Value] = {v.id: v for v in graph.inputs}
        self.consts: set[int] = set()
        for n in graph.nodes:
            for o in n.outputs:
                self.values[o.id] = o
            if n.op is Op.CONSTANT:
                self.consts.update(o.id for o in n.outputs)
        self.dtypes = {vid: v.type.dtype for vid, v in self.values.items()}
        self.inputs = {v.id for v in graph.inputs}
        self.outputs = {v.id for v in graph.outputs}
        # States (aotc/ir/state.py, verified with the graph): each chain value -> (its state, its version), and the
        # links a plan must join by a View (a write's output -> the value it overwrites), the only views into a state
        self.chain: dict[int, tuple[int, int]] = {}
        self.links: dict[int, int] = {}
        for i, c in enumerate(state_chains(graph)):
            for k, vid in enumerate(c.versions):
                self.chain[vid] = (i, k)
            self.links.update(zip(c.versions[1:], c.versions[:-1]))
        self.state_roots = {v.id for v in graph.state_inputs}
        self.facts: list[Fact] = []
        self.roots: dict[int, int] = {}  # a view's value -> the value whose storage it shares
        self._bytes: dict[int, tuple[TensorType, Size]] = {}
        self.grid_needs: dict[tuple, tuple[str, tuple, tuple[Size, Size, Size]]] = {}
        self.size_args: dict[tuple, tuple[Size, bool]] = {}
        self.proved_grids: dict[tuple, tuple[tuple, tuple]] = {}
        self.digests = DigestCache()
        # launches whose extents were proved, by identity of what they hold
        self.proved_extents: dict[tuple, tuple] = {}
        self.substituted: dict[tuple, tuple] = {}
        self._numel: dict[int, tuple[TensorType, Size]] = {}

    def root(self, vid: int) -> int:
        return self.roots.get(vid, vid)

    def nbytes(self, vid: int) -> Size:
        t = self.values[vid].type
        hit = self._bytes.get(id(t))  # types are interned: by identity (the graph keeps them alive)
        if hit is not None and hit[0] is t:
            return hit[1]
        n: Size = t.dtype.itemsize
        for d in t.shape:
            n = mul(n, d)
        self._bytes[id(t)] = (t, n)
        return n

    def numel(self, vid: int) -> Size:
        t = self.values[vid].type
        hit = self._numel.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        n: Size = 1
        for d in t.shape:
            n = mul(n, d)
        self._numel[id(t)] = (t, n)
        return n
