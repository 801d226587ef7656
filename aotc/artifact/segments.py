"""The data segments of an artifact: their placement (in order, 4096-aligned, zero padding between) and
their checksums, hashed on worker threads while the reader decodes the graphs."""

from __future__ import annotations

import os
from collections.abc import Sequence

from aotc.artifact.decode import SegmentInfo
from aotc.artifact.layout import align_up, segment_checksum
from aotc.artifact.pacing import Hashing, start_workers
from aotc.errors import ArtifactError

# Below this many bytes of weights a thread costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
MAX_WORKERS = 8


def place_segments(view: memoryview, fb_end: int, segments: Sequence[SegmentInfo]) -> list[int]:
    """Where each segment starts in the file: in order after the FlatBuffer, each at the next 4096
    boundary, zero padding between. Stored offsets count from the data start, the first 4096 boundary
    at or after the FlatBuffer's end."""
    size, pos = len(view), fb_end
    data_start = align_up(fb_end)
    starts = []
    for i, s in enumerate(segments):
        start = align_up(pos)
        if s.offset != start - data_start:
            raise ArtifactError(f"segment {i} starts at {s.offset} from the data start, expected {start - data_start}")
        if s.length > size - start:
            raise ArtifactError(f"segment {i} ({s.length} bytes at {start}) runs past the end of the file")
        if bytes(view[pos:start]) != bytes(start - pos):
            raise ArtifactError(f"padding before segment {i} is not zero")
        starts.append(start)
        pos = start + s.length
    if pos != size:
        raise ArtifactError(f"file has {size - pos} bytes after its last segment")
    return starts


class SegmentHasher:
    """Checks every segment's checksum: inline for small files, else on worker threads started at once,
    so hashing overlaps whatever the caller does before ``join()``. xxhash and hashlib release the GIL
    on large buffers, so the threads hash in parallel with each other and with the decoder."""

    def __init__(
        self, view: memoryview, starts: Sequence[int], segments: Sequence[SegmentInfo], schema_version: int
    ) -> None:
        # largest first, so one big embedding table does not start last
        self._jobs = sorted(range(len(segments)), key=lambda i: segments[i].length)
        self._view, self._starts, self._segments, self._version = view, starts, segments, schema_version
        self._bad: list[int] = []
        total = sum(s.length for s in segments)
        workers = min(MAX_WORKERS, os.cpu_count() or 1, len(segments)) if total >= PARALLEL_MIN_BYTES else 0
        self._threads = start_workers(self._paced_work, workers)
        if not self._threads:
            self._work()
            self.join()  # fail before the caller decodes anything

    def _paced_work(self) -> None:
        with Hashing():
            self._work()

    def _work(self) -> None:
        jobs, view = self._jobs, self._view
        while True:
            try:
                i = jobs.pop()  # atomic under the GIL
            except IndexError:
                return
            start, seg = self._starts[i], self._segments[i]
            if segment_checksum(view[start : start + seg.length], self._version) != seg.checksum:
                self._bad.append(i)

    def cancel(self) -> None:
        """Stop after the segments being hashed now (the caller already has an error to report)."""
        self._jobs.clear()
        for t in self._threads:
            t.join()

    def join(self) -> None:
        """Wait for the hashing; raise ArtifactError naming the first corrupted segment."""
        for t in self._threads:
            t.join()
        if self._bad:
            raise ArtifactError(f"segment {min(self._bad)} is corrupted (checksum mismatch)")
