"""Streams, events and CUDA graphs of the fake driver (tests/runtime/fake_cuda.py), with real asynchrony.

Work queued on a stream does not run when it is queued: it runs when someone synchronizes, and then in an
ADVERSARIAL order: among all streams whose next item may run (an event wait is satisfied once the event's
record ran), the most recently created stream goes first. So a launch that the caller forgot to order
after another (a missing event) runs too early and computes garbage, as it might on a GPU.

Capture follows CUDA: a stream that waits for an event recorded in a capturing stream joins the capture;
captured work keeps its stream identity, and a graph launch re-queues it on the launch stream plus one
private stream per other captured stream, with the same record/wait structure.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fake_cuda_types import CUresult

OK = CUresult.CUDA_SUCCESS


@dataclass(eq=False)
class FakeStream:
    order: int  # creation order: later streams run first when both can
    queue: deque = field(default_factory=deque)
    capturing: Capture | None = None
    handle: int = 0  # what int(stream) gives, as for a real CUstream: callers may name a stream by it
    last_node: int = -1  # while capturing: the position in the capture of the last op this stream added

    def __int__(self) -> int:
        return self.handle


@dataclass(frozen=True)
class FakeNode:
    """A captured graph node: its position in the capture's ops (the same in the graph and its executables)."""

    position: int


@dataclass(eq=False)
class FakeEvent:
    recorded: int = 0  # records queued so far
    done: int = 0  # records that ran
    capture: Capture | None = None


@dataclass(eq=False)
class Capture:
    origin: FakeStream
    ops: list[tuple[int, tuple[Any, ...]]] = field(default_factory=list)  # (stream index in the capture, op)
    members: dict[int, int] = field(default_factory=dict)  # id(stream) -> its index


@dataclass(eq=False)
class FakeGraph:
    ops: list[tuple[int, tuple[Any, ...]]]
    private: dict[int, FakeStream] = field(default_factory=dict)  # per captured stream index > 0


class StreamsMixin:
    """Needs ``self._lock`` (an RLock), ``self._handle(obj)``, ``self._objects`` and ``self._execute(op)``."""

    _lock: Any
    _objects: dict[int, Any]

    def _init_streams(self) -> None:
        self.streams: set[int] = set()
        self.events: set[int] = set()
        self.graphs: set[int] = set()
        self.execs: set[int] = set()
        self._order = 0
        self._by_int: dict[int, FakeStream] = {}
        self._legacy = self._new_stream()  # handle 0 / 1: the legacy default stream
        self._legacy.handle = 0
        self._all: list[FakeStream] = [self._legacy]
        self.executed: list[tuple[int, str, str]] = []  # (stream handle, kind, what): the order work really ran

    def _new_stream(self) -> FakeStream:
        self._order += 1
        s = FakeStream(self._order, handle=0x5000 + 16 * self._order)
        self._by_int[s.handle] = s
        return s

    def _stream(self, handle: Any) -> FakeStream | None:
        if isinstance(handle, int):
            if handle in (0, 1, 2):
                return self._legacy
            s = self._by_int.get(handle)
            return s if s is not None and id(s) in self.streams else None
        s = self._objects.get(id(handle))
        return s if isinstance(s, FakeStream) and id(s) in self.streams else None

    def _capturing(self, handle: Any) -> bool:
        s = self._stream(handle)
        return s is not None and s.capturing is not None

    def _enqueue(self, handle: Any, op: tuple[Any, ...]) -> tuple[CUresult]:
        s = self._stream(handle)
        if s is None:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        if s.capturing is not None:
            s.last_node = len(s.capturing.ops)
            s.capturing.ops.append((s.capturing.members[id(s)], op))
            return (OK,)
        if op[0] == "wait":
            op = ("wait", op[1], op[1].recorded)  # waits for the records queued so far, as CUDA does
        elif op[0] == "record":
            op[1].recorded += 1
            op = ("record", op[1], op[1].recorded)
        s.queue.append(op)
        return (OK,)

    def _drain(self, target: FakeStream | None) -> tuple[CUresult]:
        """Run queued work (adversarially ordered) until ``target``'s queue is empty (None: every queue)."""
        result: tuple[CUresult] = (OK,)
        while target.queue if target is not None else any(s.queue for s in self._all):
            for s in sorted(self._all, key=lambda s: -s.order):
                if not s.queue:
                    continue
                op = s.queue[0]
                if op[0] == "wait" and op[1].done < op[2]:
                    continue
                s.queue.popleft()
                if op[0] == "record":
                    op[1].done = max(op[1].done, op[2])
                elif op[0] != "wait":
                    self.executed.append((s.handle, op[0], op[1].name if op[0] == "launch" else ""))
                    res = self._execute(op)  # type: ignore[attr-defined]
                    if res[0] != OK:
                        result = res
                break
            else:
                raise AssertionError("fake CUDA: the queued work waits for events nothing will record (deadlock)")
        return result

    # -- streams and events -------------------------------------------------------------------------
    def cuStreamCreate(self, flags: int) -> tuple[CUresult, Any]:
        with self._lock:
            s = self._handle(self._new_stream())  # type: ignore[attr-defined]
            self.streams.add(id(s))
            self._all.append(s)
            return OK, s

    def cuStreamDestroy(self, handle: Any) -> tuple[CUresult]:
        with self._lock:
            s = self._stream(handle)
            if s is None or s is self._legacy:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            self._drain(s)  # queued work still runs, as CUDA does
            self.streams.discard(id(s))
            self._all.remove(s)
            self._by_int.pop(s.handle, None)
            return (OK,)

    def cuStreamSynchronize(self, handle: Any) -> tuple[CUresult]:
        with self._lock:
            s = self._stream(handle)
            if s is None:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            if s.capturing is not None:
                return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
            return self._drain(s)

    def cuEventCreate(self, flags: int) -> tuple[CUresult, Any]:
        with self._lock:
            e = self._handle(FakeEvent())  # type: ignore[attr-defined]
            self.events.add(id(e))
            return OK, e

    def cuEventRecord(self, event: Any, handle: Any) -> tuple[CUresult]:
        with self._lock:
            if id(event) not in self.events:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            s = self._stream(handle)
            if s is not None and s.capturing is not None:
                event.capture = s.capturing
            else:
                event.capture = None
            return self._enqueue(handle, ("record", event))

    def cuStreamWaitEvent(self, handle: Any, event: Any, flags: int) -> tuple[CUresult]:
        with self._lock:
            if id(event) not in self.events:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            s = self._stream(handle)
            if s is None:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            cap = event.capture
            if cap is not None and s.capturing is None:  # joins the capture (CUDA's fork pattern)
                s.capturing = cap
                cap.members[id(s)] = len(cap.members)
            return self._enqueue(handle, ("wait", event))

    def cuEventSynchronize(self, event: Any) -> tuple[CUresult]:
        with self._lock:
            return self._drain(None) if id(event) in self.events else (CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def cuEventElapsedTime(self, start: Any, end: Any) -> tuple[CUresult, float]:
        """A fixed time: the fake has no clock worth reading."""
        ok = start.done and end.done
        return (OK, 0.25) if ok else (CUresult.CUDA_ERROR_INVALID_HANDLE, 0.0)

    def cuEventDestroy(self, event: Any) -> tuple[CUresult]:
        with self._lock:
            self.events.discard(id(event))
        return (OK,)

    # -- graphs -------------------------------------------------------------------------------------
    def cuStreamBeginCapture(self, handle: Any, mode: Any) -> tuple[CUresult]:
        with self._lock:
            s = self._stream(handle)
            if s is None or s is self._legacy or s.capturing is not None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            s.capturing = Capture(s, members={id(s): 0})
            return (OK,)

    def cuStreamEndCapture(self, handle: Any) -> tuple[CUresult, Any]:
        with self._lock:
            s = self._stream(handle)
            if s is None or s.capturing is None or s.capturing.origin is not s:
                return CUresult.CUDA_ERROR_INVALID_VALUE, None
            cap = s.capturing
            for other in self._all:
                if other.capturing is cap:
                    other.capturing = None
            g = self._handle(FakeGraph(list(cap.ops)))  # type: ignore[attr-defined]
            self.graphs.add(id(g))
            return OK, g

    def cuGraphInstantiate(self, graph: Any, flags: int) -> tuple[CUresult, Any]:
        with self._lock:
            e = self._handle(FakeGraph(list(graph.ops)))  # type: ignore[attr-defined]
            self.execs.add(id(e))
            return OK, e

    def cuGraphLaunch(self, exec_: Any, handle: Any) -> tuple[CUresult]:
        with self._lock:
            s = self._stream(handle)
            if id(exec_) not in self.execs or s is None:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            for index, op in exec_.ops:
                target = s
                if index:
                    target = exec_.private.get(index)
                    if target is None:
                        target = exec_.private[index] = self._new_stream()
                        self._all.append(target)
                if op[0] == "wait":
                    op = ("wait", op[1], op[1].recorded)
                elif op[0] == "record":
                    op[1].recorded += 1
                    op = ("record", op[1], op[1].recorded)
                target.queue.append(op)
            return (OK,)

    def cuStreamGetCaptureInfo(self, handle: Any) -> tuple[Any, ...]:
        """cuda-bindings 13's form: (result, status, id, graph, dependencies, edge data, count); the dependencies
        are the node the stream's last captured op made (what the next op would follow)."""
        with self._lock:
            s = self._stream(handle)
            if s is None:
                return CUresult.CUDA_ERROR_INVALID_HANDLE, 0, 0, None, [], [], 0
            if s.capturing is None:
                return OK, 0, 0, None, [], [], 0
            nodes = [FakeNode(s.last_node)] if s.last_node >= 0 else []
            return OK, 1, id(s.capturing), None, nodes, [], len(nodes)

    def cuGraphExecKernelNodeSetParams(self, exec_: Any, node: Any, params: Any) -> tuple[CUresult]:
        """The kernel node's parameters (read from ``params.kernelParams`` now, as CUDA does) in that executable."""
        with self._lock:
            if id(exec_) not in self.execs or not isinstance(node, FakeNode) or node.position >= len(exec_.ops):
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            index, op = exec_.ops[node.position]
            grid = (params.gridDimX, params.gridDimY, params.gridDimZ)
            if op[0] != "launch" or params.func is not op[1] or grid != op[2]:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)  # not this kernel node, or a change we do not model
            values = self._read_params(op[1], params.kernelParams)  # type: ignore[attr-defined]
            exec_.ops[node.position] = (index, ("launch", op[1], grid, op[3], values))
            return (OK,)

    def cuGraphExecDestroy(self, exec_: Any) -> tuple[CUresult]:
        with self._lock:
            self.execs.discard(id(exec_))
            for private in exec_.private.values():
                self._drain(private)
                self._all.remove(private)
            exec_.private.clear()
        return (OK,)

    def cuGraphDestroy(self, graph: Any) -> tuple[CUresult]:
        with self._lock:
            self.graphs.discard(id(graph))
        return (OK,)
