"""Growing the engine's numpy tables in place of ``np.vstack``.

Tables of automaton and parser states double when full. ``np.vstack`` with a freshly filled
half took 20-50 ms at a few MB on this machine (a spike inside one cold mask); allocating
once and copying the old rows is a few ms at most.
"""

from __future__ import annotations

import mmap
import threading

import numpy as np


def grown_rows(array: np.ndarray, fill, at_least: int = 0) -> np.ndarray:
    """``array`` with at least twice (and at least ``at_least``) the rows, the new ones
    set to ``fill``."""
    n = array.shape[0]
    out = np.empty((max(2 * n, at_least, 1),) + array.shape[1:], dtype=array.dtype)
    out[:n] = array
    out[n:] = fill
    return out


def reserved_rows(rows: int, width: int, dtype: type = np.int32,
                  reuse: bool = False) -> np.ndarray:
    """A ``rows x width`` array whose memory is committed page by page as rows are written:
    an anonymous private mapping, so a large capacity costs address space only. (numpy's own
    allocation of a large array asks for transparent huge pages, and the first write then
    clears 2 MB at once: about 100 us inside the first mask of a small grammar.)

    With ``reuse``, it may be a table an earlier owner gave back (``give_back_rows``), with
    the rows that owner wrote, so only an owner that writes every row before reading it may
    ask (the parser states' table: its ``filled`` flags guard every read). Committing a page
    costs ~1-2 us here, and a schema's first pass writes a page for every two DFA states
    (~2 ms for 3,000 states); a process compiling its next grammar pays that only for rows
    past the last one's high-water mark."""
    itemsize = np.dtype(dtype).itemsize
    nbytes = max(rows * width * itemsize, 1)
    got = _recycled.take(nbytes) if reuse else None
    if isinstance(got, np.ndarray) and got.shape == (rows, width) and got.dtype == dtype:
        return got
    if got is None:
        got = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(got, dtype=dtype, count=rows * width).reshape(rows, width)


def give_back_rows(table: np.ndarray) -> None:
    """Hand a ``reserved_rows`` table to the next owner that asks with ``reuse`` (call it
    once nothing reads the table any more)."""
    _recycled.give(table)


class _MappingPool:
    """Released tables (or bare mappings), at most ``keep`` of them, handed out again by
    size. A table is kept whole: the next one of its shape needs no new numpy view."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._free: list[mmap.mmap | np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> mmap.mmap | np.ndarray | None:
        with self._lock:
            for i, buffer in enumerate(self._free):
                size = buffer.nbytes if isinstance(buffer, np.ndarray) else len(buffer)
                if size == nbytes:
                    return self._free.pop(i)
        return None

    def give(self, buffer: mmap.mmap | np.ndarray) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(buffer)


# Two: a process alternating between two grammars (or a table and the one replacing it)
# keeps both warm; more would hold committed memory nobody may ask for again.
_recycled = _MappingPool(keep=2)


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
