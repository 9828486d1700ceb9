"""One process-wide memory bound for memoised masks and token verdicts.

Every compiled grammar keeps masks (one byte per vocabulary token: 48 KiB for SmolLM2, 256 KiB
for Gemma 3) keyed by parser state. Bounding each cache on its own lets a process with many
schemas hold many times the bound; this budget is shared instead, and evicts the oldest entry
of any cache when a new one would go over it. Evicted entries are only recomputed on demand.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable

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


class MemoStore(dict):
    """A dict whose entries a :class:`MemoBudget` accounts for. The budget holds it weakly:
    when its owner (a compiled grammar's mask cache) is dropped, its bytes leave the budget
    at once instead of crowding out live entries."""

    __slots__ = ("__weakref__", "serial")


class MemoBudget:
    """Bytes held by registered cache entries, evicted oldest first beyond ``limit_bytes``.

    A cache stores its value first, then calls :meth:`charge` with the store and key; eviction
    pops the key from that store, so a reader either finds the value or recomputes it. The most
    recent entry is never evicted, so a single mask larger than the limit still works.
    """

    def __init__(self, limit_bytes: int | None = None) -> None:
        self.limit_bytes = _limit_from_environment() if limit_bytes is None else limit_bytes
        self.used_bytes = 0
        self.evictions = 0
        self._entries: OrderedDict[tuple[int, Hashable], int] = OrderedDict()
        # store serial -> (weak reference, [bytes it holds]); serials are never reused
        self._stores: dict[int, tuple[weakref.ref, list[int]]] = {}
        self._serials = itertools.count()
        self._lock = threading.RLock()  # a store may die (and report) while a charge runs

    def charge(self, store: MemoStore, key: Hashable, nbytes: int) -> None:
        """Account ``store[key]`` (already stored) and evict older entries over the limit."""
        with self._lock:
            sid = getattr(store, "serial", None)
            if sid is None or sid not in self._stores:
                sid = store.serial = next(self._serials)
                self._stores[sid] = (weakref.ref(store, self._forget(sid)), [0])
            known = self._stores[sid]
            entry = (sid, key)
            old = self._entries.pop(entry, None)
            if old is not None:
                self.used_bytes -= old
                known[1][0] -= old
            self._entries[entry] = nbytes
            self.used_bytes += nbytes
            known[1][0] += nbytes
            while self.used_bytes > self.limit_bytes and len(self._entries) > 1:
                (old_sid, old_key), size = self._entries.popitem(last=False)
                owner = self._stores.get(old_sid)
                target = owner[0]() if owner is not None else None
                if target is None:
                    continue  # its store is gone; its bytes left when it died
                target.pop(old_key, None)
                owner[1][0] -= size
                self.used_bytes -= size
                self.evictions += 1

    def _forget(self, sid: int):
        def dropped(ref: weakref.ref) -> None:
            with self._lock:
                known = self._stores.get(sid)
                if known is not None:
                    self.used_bytes -= known[1][0]
                    del self._stores[sid]
        return dropped

    def __repr__(self) -> str:
        return (f"MemoBudget(used={self.used_bytes / 2**20:.1f} MiB, "
                f"limit={self.limit_bytes / 2**20:.0f} MiB, entries={len(self._entries)}, "
                f"evictions={self.evictions})")


default_budget = MemoBudget()
