"""State that lives across calls: the chain of in-place writes that carries each state from its input to its output.

A graph's states (aotc.ir.graph.State) are plain values to every pass: state ``i`` is read as a trailing input and
left as a trailing output. What makes one buffer per state enough is the chain between them, which ``state_chains``
finds and ``state_problem`` holds every stateful graph to (the verifier calls it, so the tracer, every lowering
stage, the importers and the artifact reader all meet the same rule):

- the output is the input, or the output of a SCATTER whose data is the previous value of the chain, back to the
  input (a *write*; its updates land in the state's own buffer, nothing is copied);
- the value a write overwrites is read by nothing after that write, in node order, neither itself nor through a
  view of it (reshape, permute, slice, ...: a reference backend's view shares the buffer), so running the nodes in
  order and writing in place computes what the graph says;
- a write's positions and updates are not views of the value it overwrites (an in-place kernel would read what it
  writes);
- no value of a chain is one of the caller's outputs (they would alias the session's buffer), and no value is in
  two chains;
- the state's initial value is a constant of its dtype that broadcasts to its shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from aotc.ir.graph import Graph, State
from aotc.ir.ops import OPS, Op, OpKind


@dataclass(frozen=True, slots=True)
class StateChain:
    """One state's values through a call: ``versions[0]`` is its input, ``versions[k]`` the value write ``k`` leaves
    (``writers[k - 1]``, a node index), ``versions[-1]`` its output."""

    state: State
    versions: tuple[int, ...]
    writers: tuple[int, ...]


class StateProblem(Exception):
    """Why a graph's states break the rules above (state_problem turns it into text)."""


def state_chains(graph: Graph) -> tuple[StateChain, ...]:
    """Each state's chain of writes; StateProblem when the graph breaks a rule of this module."""
    if not graph.states:
        return ()
    k = len(graph.states)
    if k > len(graph.inputs) or k > len(graph.outputs):
        raise StateProblem(f"{k} states, but the graph has {len(graph.inputs)} inputs and {len(graph.outputs)} outputs")
    producer: dict[int, int] = {}
    users: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            users.setdefault(v.id, []).append(i)
        for o in node.outputs:
            producer[o.id] = i
    results = {o.id for o in graph.outputs[: graph.num_results]}
    names = set()
    chained: set[int] = set()
    chains = []
    for st, vin, vout, name in zip(
        graph.states, graph.state_inputs, graph.state_outputs, graph.input_names[graph.num_feeds :]
    ):
        what = f"state {st.name!r}"
        if st.name != name or st.name in names:
            raise StateProblem(f"{what} must be named once, as its input (the input is named {name!r})")
        names.add(st.name)
        if vin.type != vout.type:
            raise StateProblem(f"{what} is read as {vin.type} but left as {vout.type}")
        _check_init(graph, st, vin, what)
        versions, writers = [vout.id], []
        v = vout.id
        while v != vin.id:
            p = producer.get(v)
            if p is None:
                raise StateProblem(f"{what}: its value after the call (%{v}) is not written from its input")
            node = graph.nodes[p]
            if node.op is not Op.SCATTER:
                raise StateProblem(
                    f"{what}: its value after the call comes from a {node.op.value} at node {p}"
                    f"{_at(node.loc)}, not from writes into the state"
                )
            v = node.inputs[0].id
            versions.append(v)
            writers.append(p)
        versions.reverse()
        writers.reverse()
        for vid in versions:
            if vid in chained:
                raise StateProblem(f"{what}: value %{vid} belongs to two states' writes")
            if vid in results:
                raise StateProblem(
                    f"{what}: value %{vid} is the state's own buffer and also an output of the call; "
                    "return a computed value of it instead"
                )
            chained.add(vid)
        for k_, w in enumerate(writers):
            _check_write(graph, what, versions[k_], w, users)
        chains.append(StateChain(st, tuple(versions), tuple(writers)))
    return tuple(chains)


def state_problem(graph: Graph) -> str:
    """Why the graph's states break the rules of this module ('' when they don't, or there are none)."""
    try:
        state_chains(graph)
    except StateProblem as e:
        return str(e)
    return ""


def state_writers(graph: Graph) -> frozenset[int]:
    """The node indices of every state write (run in place on the state's buffer)."""
    return frozenset(w for c in state_chains(graph) for w in c.writers)


def _check_init(graph: Graph, st: State, vin: object, what: str) -> None:
    t = vin.type  # type: ignore[attr-defined]
    arr = graph.constants.get(st.init)
    if arr is None:
        raise StateProblem(f"{what}: its initial value, constant {st.init!r}, is missing")
    if arr.dtype != t.dtype.np or arr.ndim > t.rank:
        raise StateProblem(f"{what}: its initial value is {arr.dtype}{list(arr.shape)}, which is not a {t}")
    for a, d in zip(reversed(arr.shape), reversed(t.shape)):
        if a != 1 and a != d:
            raise StateProblem(f"{what}: its initial value {list(arr.shape)} does not broadcast to {t}")


def _check_write(graph: Graph, what: str, old: int, writer: int, users: dict[int, list[int]]) -> None:
    """Nothing reads ``old`` (or a view of it) after ``writer`` overwrites it, and the write reads no view of it."""
    node = graph.nodes[writer]
    aliases = {old}
    stack = [old]
    while stack:
        v = stack.pop()
        for i in users.get(v, ()):
            reader = graph.nodes[i]
            if i == writer:
                if any(x.id in aliases for x in reader.inputs[1:]):
                    raise StateProblem(
                        f"{what}: the write at node {writer}{_at(node.loc)} takes its positions or updates from "
                        "the state it overwrites; compute them from another value"
                    )
                continue
            if i > writer:
                raise StateProblem(
                    f"{what}: node {i} ({reader.op.value}{_at(reader.loc)}) reads the state as it was before the "
                    f"write at node {writer}{_at(node.loc)}; read the state after the write"
                )
            if OPS[reader.op].kind is OpKind.VIEW:
                for o in reader.outputs:
                    if o.id not in aliases:
                        aliases.add(o.id)
                        stack.append(o.id)


def _at(loc: str) -> str:
    return f", {loc}" if loc else ""
