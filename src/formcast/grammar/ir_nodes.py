"""The IR's expression nodes: literals, byte and character sets, sequences, choices,
repetitions and rule references, as frozen dataclasses (hashable, comparable, picklable, safe
to share across threads).

This module stays Python when the install compiles the front ends with mypyc: compiled, the
frozen dataclasses were no faster to build and could not be unpickled. Where the C extension
``_ir_nodes`` is built, the names below are bound to C types with the same fields, equality,
hashes, reprs and pickles (a test holds them to the dataclasses); the dataclasses stay the
reference and the fallback. The functions that build nodes (``ir_build``) and the range
algebra (``ir_ranges``) are compiled by mypyc.
"""

from __future__ import annotations

import os
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

from formcast.grammar.ir_ranges import (
    MAX_CODEPOINT,
    SURROGATES,
    complement_ranges,
    merge_ranges,
    subtract_ranges,
)


def _native_module() -> Any:
    """The compiled ``_ir_nodes``, unless it is not built or ``FORMCAST_PURE_PYTHON=1``."""
    if os.environ.get("FORMCAST_PURE_PYTHON"):
        return None
    try:
        from formcast.grammar import _ir_nodes  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _ir_nodes


_native = _native_module()


class Expr:
    """Base class of grammar expressions."""

    __slots__ = ()


if _native is not None:
    # The C base class: the C node types below subclass it, and a Python base would make
    # them inherit the cyclic collector's support (nodes cannot form cycles).
    Expr = _native.Expr  # type: ignore[misc]


def _keep_hash(expr: Expr, h: int) -> int:
    """Store a composite expression's hash on it: expressions are deep trees, hashed again
    and again as dict and set keys (memos, duplicate choices) while a schema compiles."""
    object.__setattr__(expr, "_hash", h)
    return h


@dataclass(frozen=True, slots=True)
class Literal(Expr):
    """An exact byte string (UTF-8 for text)."""

    data: bytes

    def __hash__(self) -> int:
        return hash(self.data)  # bytes keep their hash; the generated one made a tuple first


@dataclass(frozen=True, slots=True)
class ByteSet(Expr):
    """Exactly one byte whose value lies in one of the inclusive ``ranges``."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class CharSet(Expr):
    """Exactly one Unicode scalar value (encoded as UTF-8) in ``ranges``, or not in them when
    ``negated``. Surrogates are never matched: they cannot be encoded in UTF-8."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False
    _codepoints: tuple[tuple[int, int], ...] | None = field(
        default=None, init=False, repr=False, compare=False)

    def codepoint_ranges(self) -> tuple[tuple[int, int], ...]:
        """The matched code points as sorted, merged, surrogate-free inclusive ranges (kept
        on the set: a pattern's classes are asked by the regex parser, the character
        automaton and the JSON spelling in turn)."""
        got = self._codepoints
        if got is None:
            got = _codepoints_of(self.ranges, self.negated)
            _SET_CODEPOINTS(self, got)
        return got

    def __reduce__(self) -> tuple:
        return CharSet, (self.ranges, self.negated)  # not the kept code points


@dataclass(frozen=True, slots=True)
class Seq(Expr):
    """The items one after another. ``Seq(())`` matches the empty string."""

    items: tuple[Expr, ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        return _keep_hash(self, hash(self.items)) if h is None else h

    def __reduce__(self) -> tuple:
        return Seq, (self.items,)  # not the kept hash: str hashes differ between processes


@dataclass(frozen=True, slots=True)
class Choice(Expr):
    """Any one of the items. ``Choice(())`` matches nothing at all."""

    items: tuple[Expr, ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        return _keep_hash(self, hash(self.items)) if h is None else h

    def __reduce__(self) -> tuple:
        return Choice, (self.items,)  # not the kept hash (see Seq)


@dataclass(frozen=True, slots=True)
class Repeat(Expr):
    """``item`` repeated between ``min`` and ``max`` times (``max=None``: unbounded)."""

    item: Expr
    min: int = 0
    max: int | None = None
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        return _keep_hash(self, hash((self.item, self.min, self.max))) if h is None else h

    def __reduce__(self) -> tuple:
        return Repeat, (self.item, self.min, self.max)  # not the kept hash (see Seq)


@dataclass(frozen=True, slots=True)
class Ref(Expr):
    """A reference to another rule by name (this is how recursion is written)."""

    name: str

    def __hash__(self) -> int:
        return hash(self.name)


def _codepoints_of(ranges: tuple[tuple[int, int], ...],
                   negated: bool) -> tuple[tuple[int, int], ...]:
    """A character set's code points as sorted, merged, surrogate-free inclusive ranges."""
    merged = merge_ranges(ranges)
    if negated:
        merged = complement_ranges(merged, 0, MAX_CODEPOINT)
    return subtract_ranges(merged, (SURROGATES,))


def _slot_setters(cls: type, *names: str) -> tuple:
    """The slot descriptors' setters of a frozen dataclass's fields."""
    return tuple(cls.__dict__[name].__set__ for name in names)


# Faster constructors than the dataclass ones, which set each field through
# object.__setattr__ (frozen): a schema compile makes about a thousand expressions, and the
# generated __init__ was the largest single line of its profile. Same fields, same values.
_SET_DATA, = _slot_setters(Literal, "data")
_SET_BYTE_RANGES, = _slot_setters(ByteSet, "ranges")
_SET_CHAR_RANGES, _SET_NEGATED, _SET_CODEPOINTS = _slot_setters(CharSet, "ranges", "negated",
                                                                 "_codepoints")
_SET_SEQ_ITEMS, _SET_SEQ_HASH = _slot_setters(Seq, "items", "_hash")
_SET_CHOICE_ITEMS, _SET_CHOICE_HASH = _slot_setters(Choice, "items", "_hash")
_SET_ITEM, _SET_MIN, _SET_MAX, _SET_REPEAT_HASH = _slot_setters(Repeat, "item", "min", "max",
                                                                "_hash")
_SET_NAME, = _slot_setters(Ref, "name")


def _literal_init(self: Literal, data: bytes) -> None:
    _SET_DATA(self, data)


def _byte_set_init(self: ByteSet, ranges: tuple[tuple[int, int], ...]) -> None:
    _SET_BYTE_RANGES(self, ranges)


def _char_set_init(self: CharSet, ranges: tuple[tuple[int, int], ...],
                   negated: bool = False) -> None:
    _SET_CHAR_RANGES(self, ranges)
    _SET_NEGATED(self, negated)
    _SET_CODEPOINTS(self, None)


def _seq_init(self: Seq, items: tuple[Expr, ...]) -> None:
    _SET_SEQ_ITEMS(self, items)
    _SET_SEQ_HASH(self, None)


def _choice_init(self: Choice, items: tuple[Expr, ...]) -> None:
    _SET_CHOICE_ITEMS(self, items)
    _SET_CHOICE_HASH(self, None)


def _repeat_init(self: Repeat, item: Expr, min: int = 0,  # noqa: A002
                 max: int | None = None) -> None:  # noqa: A002
    _SET_ITEM(self, item)
    _SET_MIN(self, min)
    _SET_MAX(self, max)
    _SET_REPEAT_HASH(self, None)


def _ref_init(self: Ref, name: str) -> None:
    _SET_NAME(self, name)


for _cls, _init in ((Literal, _literal_init), (ByteSet, _byte_set_init),
                    (CharSet, _char_set_init), (Seq, _seq_init), (Choice, _choice_init),
                    (Repeat, _repeat_init), (Ref, _ref_init)):
    _init.__qualname__ = f"{_cls.__name__}.__init__"
    _cls.__init__ = _init  # type: ignore[method-assign]


# The same classes as C types (``_ir_nodes.c``) where the module is built: built by one call
# and hashed in C, a node costs a fraction of a dataclass's Python ``__init__`` and
# ``__hash__``, which were about a quarter of a schema compile's front end. The dataclasses
# above stay the reference (a test holds the two alike) and the fallback.
DATACLASS_NODES = (Literal, ByteSet, CharSet, Seq, Choice, Repeat, Ref)
NATIVE_NODES = _native is not None
if _native is not None:
    (Literal, ByteSet, CharSet, Seq, Choice, Repeat,  # type: ignore[misc]
     Ref) = _native.make_types(_codepoints_of, FrozenInstanceError)

EMPTY = Seq(())
NOTHING = Choice(())
