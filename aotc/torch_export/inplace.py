"""Which in-place ATen ops of an exported graph the Translator runs itself, so that torch's decomposition pass (its
functionalization, the slowest step of an import: minutes for a Qwen3.5 whose gated-delta-rule loop writes a
chunk of a tensor 63 times a layer) is skipped.

Two kinds, besides the writes into states (state_writes.py):
- *twins*: an in-place op on a fresh value that nothing else sees (``x = relu_(conv(x))``) runs as its functional
  twin (``relu``);
- *local writes*: a fresh tensor (``zeros``, ``clone``, any computed value) written in place, directly or through
  slices, selects and aliases of it (``out[:, :, i] = v``, ``a[..., i, :i] = row``), with later reads of it or of a
  view taken before the write seeing the write, as in torch. The Translator keeps the tensor's latest value and
  writes back through the views as torch's functionalization does (local_writes.py).

Anything else (a write through a reshape or a permute, into a tensor an op outside the table made, an in-place op
with no functional twin in the table) leaves the graph to torch's decomposition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aotc.torch_export.state_writes import IDENTITY_ALIASES, VIEWS, copies_itself, same_alias, writes_first
from aotc.torch_export.table import ATEN, target_name

NO_WRITE_AT_INFERENCE = frozenset(
    {"aten.dropout_.default", "aten.feature_dropout_.default", "aten.alpha_dropout_.default"}
)


@dataclass(frozen=True)
class InplacePlan:
    twins: frozenset[str]  # in-place nodes run as their functional twins
    local_roots: frozenset[str]  # fresh nodes written in place, directly or through views (local_writes.py)


def inplace_plan(graph: Any, states: set[str] | frozenset[str] = frozenset()) -> InplacePlan | None:
    """How the Translator runs the graph's in-place ops; None when torch must decompose it (an op outside the table,
    or an in-place write the Translator cannot follow). Writes into ``states`` (the placeholders that become states)
    and their views are the Translator's state writes, in neither set."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    fresh: set[Any] = set()  # nodes holding a value no view or later reader shares
    twins: set[str] = set()
    parent: dict[Any, Any] = {}  # an aliasing node (a view, an in-place op's result) -> the node it aliases
    local: set[Any] = set()  # fresh roots some in-place op writes where a twin would not do
    on_state: set[Any] = {n for n in graph.nodes if n.op == "placeholder" and n.name in states}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = target_name(node.target)
        base = node.args[0] if node.args else None
        if hasattr(base, "op") and (aliases(node) or writes_first(node)):
            parent[node] = base
        if base in on_state and (name in IDENTITY_ALIASES | VIEWS or writes_first(node)):
            on_state.add(node)
            if name not in ATEN or writes_first(node):
                continue
        if name in ATEN:
            if not aliases(node):
                fresh.add(node)
            continue
        twin = functional_twin(name)
        if twin is None:
            return None
        if (name in NO_WRITE_AT_INFERENCE and len(node.args) > 2 and node.args[2] is False) or copies_itself(node):
            twins.add(node.name)  # dropout_(x, p, train=False) and a copy of a tensor into itself write nothing
            continue
        seen = base not in fresh or any(
            user is not node and (order[user] > order[node] or aliases(user)) for user in base.users
        )
        if seen:  # another node sees the write: a local write, if the tensor written is one the Translator follows
            root = _root(node, parent)
            if root not in fresh:
                return None
            local.add(root)
            continue
        twins.add(node.name)
        fresh.add(node)
    last = {}  # a followed tensor -> its last write
    for node in parent:
        root = _root(node, parent)
        if root in local and writes_first(node):
            last[root] = max(last.get(root, -1), order[node])
    for node, up in parent.items():
        # a followed tensor's aliases are views the write-back goes through, or taken after its last write (the
        # transpose or reshape of a buffer filled in a loop), which no write changes
        root = _root(up, parent)
        if root in local and not _followed(node) and order[node] < last[root]:
            return None
    twins -= {n.name for n in parent if n.name in twins and _root(n, parent) in local}
    return InplacePlan(frozenset(twins), frozenset(n.name for n in local))


def functional_inplace(graph: Any, states: set[str] | frozenset[str] = frozenset()) -> set[str] | None:
    """The in-place nodes that run as their functional twins, or None where the graph has writes other nodes see
    (local writes, or ones torch must decompose)."""
    plan = inplace_plan(graph, states)
    return None if plan is None or plan.local_roots else set(plan.twins)


def functional_twin(name: str) -> str | None:
    """``aten.add.Tensor`` for ``aten.add_.Tensor`` when the table has it."""
    parts = name.split(".")
    if len(parts) != 3 or not parts[1].endswith("_") or parts[1].startswith("_"):
        return None
    twin = f"{parts[0]}.{parts[1][:-1]}.{parts[2]}"
    return twin if twin in ATEN else None


def aliases(node: Any) -> bool:
    """Whether the node's result may share memory with one of its inputs (a view, or a getitem of one)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return target_name(node.target) == "operator.getitem"
    return any(r.alias_info is not None for r in schema.returns)


def link(node: Any) -> str | None:
    """How a view of a followed tensor reads it: "view" (a slice or a select), "same" (an alias that keeps the
    dtype), or None (the node is not such a view)."""
    name = target_name(node.target)
    if name in VIEWS:
        return "view"
    return "same" if same_alias(node) else None


def _followed(node: Any) -> bool:
    if writes_first(node):
        return functional_twin(target_name(node.target)) is not None
    return link(node) is not None


def _root(node: Any, parent: dict[Any, Any]) -> Any:
    while node in parent:
        node = parent[node]
    return node
