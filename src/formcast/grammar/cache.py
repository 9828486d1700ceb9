"""A thread-safe LRU cache of compiled grammars, with hit/miss figures.

The key is the schema's canonical hash, the compiler version and the compile options: never the
schema alone, so a compiler upgrade or a different whitespace policy cannot return a stale
grammar. ``Grammar`` objects are immutable, so one cached grammar is shared by every caller and
thread.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Final

from formcast.errors import SchemaError
from formcast.grammar.ir import Grammar
from formcast.pure_python import pure_python

try:
    from formcast.grammar import _canonical  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler
    _canonical = None


def canonical_json(value: Any) -> str:
    """The schema's JSON text with no whitespace, keys in the schema's own order.

    Key order is kept because it shapes the grammar: objects list their properties in the
    order of ``properties`` (a schema puts ``reasoning`` before ``label`` on purpose), so two
    schemas that differ only in key order are different compiles. ``1`` and ``1.0`` stay
    distinct too (their texts differ); both only ever cost a cache miss.
    """
    try:
        if c_make_encoder is None:  # a Python without the C accelerator
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)
        # json.dumps with these options builds a JSONEncoder and runs three Python functions
        # before reaching this C encoder; a compile hashes its schema every time. No markers
        # dict (None): it checked every container for a cycle by inserting and deleting its
        # id (40% of the encoding of an invoice schema); a schema that contains itself now
        # ends in RecursionError, reported below like any other value that is not JSON.
        encode = c_make_encoder(None, _not_json, encode_basestring, None, ":", ",", False,
                                False, False)
        return "".join(encode(value, 0))
    except RecursionError:
        raise SchemaError("schema is not a JSON value: it contains itself (or nests deeper "
                          "than Python's recursion limit)") from None
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"schema is not a JSON value: {exc}") from None


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def canonical_utf8(value: Any) -> bytes:
    """The UTF-8 of ``canonical_json(value)``, written by the C encoder (``_canonical.c``,
    several times faster) where it is built and the value is plain JSON; by the json module
    otherwise, which also raises the errors."""
    if _canonical is not None and not pure_python():
        data = _canonical.utf8(value)
        if data is not None:
            return data
    text = canonical_json(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SchemaError(f"schema is not a JSON value: a string in it holds a lone surrogate "
                          f"({exc.object[exc.start:exc.end]!r}), which is not Unicode text"
                          ) from None


def schema_hash(schema: Any) -> str:
    """SHA-256 of the UTF-8 of the schema's canonical JSON text (``canonical_json``)."""
    return hashlib.sha256(canonical_utf8(schema)).hexdigest()


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    size: int
    capacity: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CompileCache:
    """Least-recently-used map from a compile key to a ``Grammar``.

    ``get_or_compile`` compiles at most once per key even under concurrent callers: a lock per
    key in flight makes the second caller wait for the first one's result.
    """

    def __init__(self, capacity: int = 128) -> None:
        if capacity < 1:
            raise ValueError("cache capacity must be at least 1")
        self.capacity = capacity
        self._items: OrderedDict[Hashable, Grammar] = OrderedDict()
        self._lock = threading.Lock()
        self._in_flight: dict[Hashable, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Grammar | None:
        with self._lock:
            got = self._items.get(key)
            if got is not None:
                self._items.move_to_end(key)
                self.hits += 1
            return got

    def put(self, key: Hashable, grammar: Grammar) -> None:
        with self._lock:
            self._items[key] = grammar
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get_or_compile(self, key: Hashable, compile_fn: Callable[[], Grammar]) -> Grammar:
        got = self.get(key)
        if got is not None:
            return got
        with self._lock:
            gate = self._in_flight.setdefault(key, threading.Lock())
        with gate:
            with self._lock:  # another thread may have finished it while we waited
                got = self._items.get(key)
                if got is not None:
                    self._items.move_to_end(key)
                    self.hits += 1
                    return got
                self.misses += 1
            try:
                grammar = compile_fn()
                self.put(key, grammar)
                return grammar
            finally:
                with self._lock:
                    self._in_flight.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self.hits, self.misses, len(self._items), self.capacity)

    def __len__(self) -> int:
        return len(self._items)


DEFAULT_CACHE: Final = CompileCache()


class Memo:
    """A small thread-safe LRU map for compile-time pieces that are pure functions of their key
    (automata spelled as expressions, number languages): shared by every compile."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            got = self._items.get(key)
            if got is not None:
                self._items.move_to_end(key)
            return got

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
