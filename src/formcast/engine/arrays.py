"""Growing the engine's numpy tables in place of ``np.vstack``.

Tables of automaton and parser states double when full. ``np.vstack`` with a freshly filled
half took 20-50 ms at a few MB on this machine (a spike inside one cold mask); allocating
once and copying the old rows is a few ms at most.
"""

from __future__ import annotations

import mmap

import numpy as np


def grown_rows(array: np.ndarray, fill, at_least: int = 0) -> np.ndarray:
    """``array`` with at least twice (and at least ``at_least``) the rows, the new ones
    set to ``fill``."""
    n = array.shape[0]
    out = np.empty((max(2 * n, at_least, 1),) + array.shape[1:], dtype=array.dtype)
    out[:n] = array
    out[n:] = fill
    return out


def reserved_rows(rows: int, width: int, dtype: type = np.int32) -> np.ndarray:
    """A ``rows x width`` array of zeros whose memory is committed page by page as rows are
    written: an anonymous mapping, so a large capacity costs address space only. (numpy's own
    allocation of a large array asks for transparent huge pages, and the first write then
    clears 2 MB at once: about 100 us inside the first mask of a small grammar.)"""
    itemsize = np.dtype(dtype).itemsize
    buffer = mmap.mmap(-1, max(rows * width * itemsize, 1))
    return np.frombuffer(buffer, dtype=dtype, count=rows * width).reshape(rows, width)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for 1-D arrays, without it: numpy's set routines import
    ``numpy.ma`` on first use (10-14 ms here), which would land inside one cold mask."""
    values = np.sort(values)
    if values.size < 2:
        return values
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
