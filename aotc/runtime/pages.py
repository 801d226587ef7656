"""Giving mapped weight pages back: once a copy of a weight lives elsewhere (onnxruntime's own, prepacked), the
pages of the file it was read from need not stay in this process's resident set. They stay in the page cache and
mapped, so a later read of the array (the numpy references, another backend) faults them in again, from the file."""

from __future__ import annotations

import mmap

import numpy as np


def release_pages(array: np.ndarray) -> bool:
    """Drop the whole pages under ``array`` from the resident set, when it is a view of a read-only file mapping
    (an artifact read from a path); True if any were. An array over process memory is left alone: MADV_DONTNEED
    would zero anonymous pages."""
    base: object = array
    while isinstance(base, (np.ndarray, memoryview)):  # views of views of the reader's mapping
        base = base.base if isinstance(base, np.ndarray) else base.obj
    if not isinstance(base, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED") or array.nbytes == 0:
        return False
    start = array.ctypes.data - np.frombuffer(base, np.uint8, count=1).ctypes.data
    page = mmap.PAGESIZE
    low, high = -(-start // page) * page, (start + array.nbytes) // page * page
    if high <= low:
        return False
    base.madvise(mmap.MADV_DONTNEED, low, high - low)
    return True
