"""The reader's decoding paced so that its hashing threads keep hashing.

A read hashes the file (segment checksums, or a signature's chunk digests) on worker threads while the main thread
decodes the graphs and plans. The hashing releases the GIL, but each thread needs it back between one segment or
chunk and the next, and CPython hands the GIL from a thread running Python (the decoder) to a waiting one only
every switch interval (5 ms by default): with tens of chunks per thread, most of the hashing waited for the decoding
to end, and a signed GPT-2-small read cost decode + hash instead of the longer of the two. The decoder calls
``pace()`` between small steps (a launch, a run of graph nodes): while some hashing thread is running it sleeps for
no time, which gives the GIL to a thread waiting for it, and costs nothing otherwise. The count is process-wide
(any read's threads), as is the GIL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_lock = threading.Lock()
_running = 0  # hashing threads running now, in any read


def pace() -> None:
    """Let a waiting hashing thread take the GIL, if any thread is hashing."""
    if _running:
        time.sleep(0)


class Hashing:
    """``with Hashing():`` around a hashing thread's work, so the decoder paces itself while it runs."""

    def __enter__(self) -> None:
        global _running
        with _lock:
            _running += 1

    def __exit__(self, *_exc: object) -> None:
        global _running
        with _lock:
            _running -= 1


def start_workers(target: Callable[[], None], count: int) -> list[threading.Thread]:
    """Up to ``count`` daemon threads running ``target``, started now. Fewer, even none, where the process can
    start no more ("can't start new thread": a capped address space has no room for another stack); the caller
    then hashes inline what they leave. A file is never called corrupt for want of a thread."""
    started: list[threading.Thread] = []
    for _ in range(count):
        t = threading.Thread(target=target, daemon=True)
        try:
            t.start()
        except RuntimeError:
            break
        started.append(t)
    return started
