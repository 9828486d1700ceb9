"""One process-wide memory bound for memoised masks and token verdicts.

Every compiled grammar keeps masks (one byte per vocabulary token: 48 KiB for SmolLM2, 256 KiB
for Gemma 3) keyed by parser state. Bounding each cache on its own lets a process with many
schemas hold many times the bound; this budget is shared instead, and evicts the oldest entry
of any cache when a new one would go over it. Evicted entries are only recomputed on demand.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, MutableMapping

DEFAULT_LIMIT_BYTES = 1024 * 1024 * 1024


def _limit_from_environment() -> int:
    raw = os.environ.get("FORMCAST_MASK_CACHE_MB")
    if not raw:
        return DEFAULT_LIMIT_BYTES
    try:
        megabytes = float(raw)
    except ValueError:
        raise ValueError(f"FORMCAST_MASK_CACHE_MB must be a number of MiB, got {raw!r}") from None
    return max(0, int(megabytes * 1024 * 1024))


class MemoBudget:
    """Bytes held by registered cache entries, evicted oldest first beyond ``limit_bytes``.

    A cache stores its value first, then calls :meth:`charge` with the dict and key; eviction
    pops the key from that dict, so a reader either finds the value or recomputes it. The most
    recent entry is never evicted, so a single mask larger than the limit still works.
    """

    def __init__(self, limit_bytes: int | None = None) -> None:
        self.limit_bytes = _limit_from_environment() if limit_bytes is None else limit_bytes
        self.used_bytes = 0
        self.evictions = 0
        self._entries: OrderedDict[tuple[int, Hashable], tuple[MutableMapping, int]] = OrderedDict()
        self._lock = threading.Lock()

    def charge(self, store: MutableMapping, key: Hashable, nbytes: int) -> None:
        """Account ``store[key]`` (already stored) and evict older entries over the limit."""
        with self._lock:
            entry = (id(store), key)
            old = self._entries.pop(entry, None)
            if old is not None:
                self.used_bytes -= old[1]
            self._entries[entry] = (store, nbytes)
            self.used_bytes += nbytes
            while self.used_bytes > self.limit_bytes and len(self._entries) > 1:
                (_, old_key), (old_store, size) = self._entries.popitem(last=False)
                old_store.pop(old_key, None)
                self.used_bytes -= size
                self.evictions += 1

    def __repr__(self) -> str:
        return (f"MemoBudget(used={self.used_bytes / 2**20:.1f} MiB, "
                f"limit={self.limit_bytes / 2**20:.0f} MiB, entries={len(self._entries)}, "
                f"evictions={self.evictions})")


default_budget = MemoBudget()
