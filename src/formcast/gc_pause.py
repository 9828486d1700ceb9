"""Pausing Python's cyclic garbage collector around a compile.

A compile allocates tens of thousands of small containers (IR nodes, NFA edge lists), and
every 700 of them set off a young-generation collection that walks all the young objects
still alive, most of which the compile is about to drop or keep for good. Paused, the
survivors are walked once, by the first collection after the compile (measured: 1-8 ms of
collections inside a 15 ms schema compile). Nothing a compile builds is cyclic garbage.
"""

from __future__ import annotations

import gc


class gc_paused:  # noqa: N801 - used as ``with gc_paused():``, like a function
    """Disable the cyclic collector inside the block (re-enabled after, if it was on).

    A class, not ``contextlib.contextmanager``: the generator version ran five Python
    functions per use, twice a compile."""

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self._was_enabled:
            gc.enable()
