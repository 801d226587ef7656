"""How many rows a batch takes: the size that has served rows fastest so far, learnt per request shape.

On a GPU a call of 64 rows costs little more than a call of one, and the largest batch serves rows fastest. On a
CPU it need not: a batch whose activations leave the cache costs more per row than a smaller one (the example BERT
at seq 128 on onnxruntime: 0.32 ms a row in calls of 8 rows, 1.5 ms in calls of 64), and batching up to the batch
dim's maximum served fewer requests than no batching at all. Triton Inference Server leaves this to its users
(``preferred_batch_size``, measured offline by its Model Analyzer); aotc's batcher measures while it serves.

For each key (the non-batch dims and dtypes a batch shares, see ``BatchAxes.key``) a ``BatchSizer`` keeps the
seconds per row of the latest calls made under each cap (``max_batch`` and the powers of two below it; the last
``window`` calls of the cap in use, the last probe's call of the others). A cap's figure is its fastest recent
call, since other work on the machine only ever adds time. The cap is the one with the lowest figure, the largest
among those within ``tolerance`` of it, so a device on which size costs nothing keeps the largest batch, and a
smaller cap must be clearly faster to take over. A new key starts at ``max_batch``, as fixed batching does. A cap
next to the best with no figure yet is tried at the next call, so the cap halves its way down to the fastest size
in a few calls, and the best cap's neighbours are tried again every ``probe_every`` calls, so the cap follows the
load. A batch is smaller than its cap when fewer rows wait; its seconds per row still count for the cap, since
what a cap is worth is the rows it serves at the load there is.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class _Shape:
    best: int
    samples: dict[int, deque[float]] = field(default_factory=dict)  # cap -> seconds per row of its latest calls
    calls: int = 0
    probe: int | None = None  # the size the next batch tries
    probed_up: bool = False  # which neighbour the last scheduled probe tried


class BatchSizer:
    """Learns, per key, the batch size up to ``max_batch`` that serves rows fastest (see the module's text)."""

    def __init__(
        self,
        max_batch: int,
        *,
        probe_every: int = 64,
        window: int = 8,
        tolerance: float = 0.1,
        keys: int = 256,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.max_batch = max_batch
        self.sizes = sorted({1 << i for i in range(max_batch.bit_length()) if 1 << i <= max_batch} | {max_batch})
        self.probe_every, self.window, self.tolerance, self.keys = probe_every, window, tolerance, keys
        self._shapes: OrderedDict[Hashable, _Shape] = OrderedDict()

    def cap(self, key: Hashable) -> int:
        """The most rows the next batch of ``key`` takes."""
        shape = self._shapes.get(key)
        if shape is None:
            return self.max_batch
        return shape.probe if shape.probe is not None else shape.best

    def best(self, key: Hashable) -> int:
        """The size that has served ``key``'s rows fastest (``max_batch`` before any call)."""
        shape = self._shapes.get(key)
        return self.max_batch if shape is None else shape.best

    def observe(self, key: Hashable, cap: int, rows: int, seconds: float) -> None:
        """A call of ``rows`` rows of ``key``, made under ``cap`` (a size ``cap()`` gave), took ``seconds``."""
        if cap not in self.sizes or rows < 1 or not seconds > 0:
            return
        shape = self._shape(key)
        if cap != shape.best:  # a probe: the cap's earlier figures were taken under the load of then
            shape.samples[cap] = deque(maxlen=self.window)
        shape.samples.setdefault(cap, deque(maxlen=self.window)).append(seconds / rows)
        shape.calls += 1
        # Other work on the machine only ever adds time, so a cap's figure is its fastest recent call.
        figures = {c: min(s) for c, s in shape.samples.items()}
        fastest = min(figures.values())
        shape.best = max(c for c, t in figures.items() if t <= fastest * (1 + self.tolerance))
        shape.probe = self._next_probe(shape)

    def _shape(self, key: Hashable) -> _Shape:
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _Shape(best=self.max_batch)
            if len(self._shapes) > self.keys:
                self._shapes.popitem(last=False)  # the key used least recently
        else:
            self._shapes.move_to_end(key)
        return shape

    def _next_probe(self, shape: _Shape) -> int | None:
        i = self.sizes.index(shape.best)
        below = self.sizes[i - 1] if i > 0 else None
        above = self.sizes[i + 1] if i + 1 < len(self.sizes) else None
        for size in (below, above):
            if size is not None and size not in shape.samples:
                return size
        if shape.calls % self.probe_every:
            return None
        shape.probed_up = not shape.probed_up
        first, second = (above, below) if shape.probed_up else (below, above)
        return first if first is not None else second
