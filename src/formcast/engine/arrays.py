"""Growing the engine's numpy tables in place of ``np.vstack``.

Tables of automaton and parser states double when full. ``np.vstack`` with a freshly filled
half took 20-50 ms at a few MB on this machine (a spike inside one cold mask); allocating
once and copying the old rows is a few ms at most.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Hashable
from typing import Any

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
    """A ``rows x width`` array whose memory is committed page by page as rows are written:
    an anonymous private mapping, so a large capacity costs address space only. (numpy's own
    allocation of a large array asks for transparent huge pages, and the first write then
    clears 2 MB at once: about 100 us inside the first mask of a small grammar.)"""
    itemsize = np.dtype(dtype).itemsize
    nbytes = max(rows * width * itemsize, 1)
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(buffer, dtype=dtype, count=rows * width).reshape(rows, width)


class _Pool:
    """Tables their owners gave back, at most ``keep`` of them, handed out again by key.

    Committing a page of a reserved table costs ~1-2 us here, and a schema's first pass
    writes a page for every two DFA states (~2 ms for 3,000 states); a process compiling its
    next grammar pays that only for rows past the last one's high-water mark.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._free: list[tuple[Hashable, Any]] = []
        self._lock = threading.Lock()

    def take(self, key: Hashable) -> Any | None:
        with self._lock:
            for i, (its_key, value) in enumerate(self._free):
                if its_key == key:
                    del self._free[i]
                    return value
        return None

    def give(self, key: Hashable, value: Any) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append((key, value))


# Two: a process alternating between two grammars (or a table and the one replacing it)
# keeps both warm; more would hold committed memory nobody may ask for again.
_recycled = _Pool(keep=2)


def take_recycled(key: Hashable) -> Any | None:
    """What an earlier owner gave back under ``key`` (``recycle``), or None. It holds
    whatever that owner wrote: the taker must be one that can tell (see ``DenseStates``)."""
    return _recycled.take(key)


def recycle(key: Hashable, value: Any) -> None:
    """Give ``value`` to the next ``take_recycled(key)`` (once nothing reads it any more)."""
    _recycled.give(key, value)


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
