"""The functions that build IR expressions, normalising as they go: sequences flatten and
merge adjacent literals, choices flatten and drop duplicates, repetitions check their bounds.

Compiled by mypyc at install, as the other front-end modules are: a schema compile calls these
hundreds of times, and as Python they were a fifth of its front end.
"""

from __future__ import annotations

from collections.abc import Iterable

from formcast.errors import GrammarError
from formcast.grammar.ir_kinds import (
    BYTE_SET,
    CHAR_SET,
    CHOICE,
    EMPTY,
    LITERAL,
    NOTHING,
    REF,
    REPEAT,
    SEQ,
)
from formcast.grammar.ir_nodes import ByteSet, CharSet, Expr, Ref
from formcast.grammar.ir_ranges import merge_ranges


def is_nothing(e: Expr) -> bool:
    """Whether ``e`` is the empty choice (matches nothing): a type check, not ``e == NOTHING``,
    whose dataclass comparisons run as Python and were called hundreds of times a compile."""
    return type(e) is CHOICE and not e.items  # type: ignore[attr-defined]


def lit(text: str | bytes) -> Expr:
    """A literal; ``str`` is encoded as UTF-8."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return LITERAL(data) if data else EMPTY


def seq(*items: Expr) -> Expr:
    """A sequence, flattening nested sequences and merging adjacent literals."""
    # Exact type checks, one pass: the schema compiler calls this a few hundred times a
    # schema, and the isinstance version was a tenth of its front end.
    flat: list[Expr] = []
    after_literal = False
    for item in items:
        for part in item.items if type(item) is SEQ else (item,):
            kind = type(part)
            if kind is LITERAL:
                if after_literal:
                    flat[-1] = LITERAL(flat[-1].data + part.data)  # type: ignore[attr-defined]
                    continue
                after_literal = True
            elif kind is CHOICE and not part.items:  # type: ignore[attr-defined]
                return NOTHING
            else:
                after_literal = False
            flat.append(part)
    return flat[0] if len(flat) == 1 else SEQ(tuple(flat))


def choice(*items: Expr) -> Expr:
    """An alternation, flattening nested choices and dropping duplicates (order is kept)."""
    flat: list[Expr] = []
    seen: set[Expr] = set()
    for item in items:
        for part in item.items if type(item) is CHOICE else (item,):  # type: ignore
            if part not in seen:
                seen.add(part)
                flat.append(part)
    return flat[0] if len(flat) == 1 else CHOICE(tuple(flat))


def factored_choice(*items: Expr) -> Expr:
    """:func:`choice`, with alternatives that begin with the same item sharing it:
    ``a b | a c`` becomes ``a (b | c)``, level by level. Same language; the automaton holds
    the shared beginning once instead of once per alternative (the branches of an anyOf of
    tool calls all begin ``{ ws "name" ws : ws``)."""
    flat = choice(*items)
    return _factored(flat.items) if type(flat) is CHOICE else flat


def _factored(alts: tuple[Expr, ...] | list[Expr]) -> Expr:
    """The alternatives ``alts`` (distinct) with common first items shared. Tails of distinct
    alternatives with the same beginning are distinct, so they go into a Choice as they are
    (hashing the tails to drop duplicates cost more than the factoring saved)."""
    groups: dict[Expr, list[Expr]] = {}  # by first item, in order of first appearance
    for alt in alts:
        groups.setdefault(alt.items[0] if type(alt) is SEQ and alt.items else alt,
                          []).append(alt)
    if len(groups) == len(alts):
        return CHOICE(tuple(alts)) if len(alts) != 1 else alts[0]
    out = []
    for head, group in groups.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        # The whole common beginning at once, not one item a level.
        shared = 1
        if all(type(a) is SEQ for a in group):
            rows = [a.items for a in group]  # type: ignore[attr-defined]
            first, shortest = rows[0], min(len(r) for r in rows)
            while shared < shortest and all(r[shared] == first[shared] for r in rows[1:]):
                shared += 1
        else:
            first = (head,)
        tails = [_rest(a, shared) for a in group]
        out.append(seq(*first[:shared], _factored(tails)))
    return out[0] if len(out) == 1 else CHOICE(tuple(out))


def _rest(alt: Expr, shared: int) -> Expr:
    """What follows the first ``shared`` items of ``alt``."""
    if type(alt) is not SEQ:
        return EMPTY
    items = alt.items  # type: ignore[attr-defined]
    left = len(items) - shared
    return EMPTY if left <= 0 else items[shared] if left == 1 else SEQ(items[shared:])


def repeat(item: Expr, min: int = 0, max: int | None = None) -> Expr:  # noqa: A002
    """``item{min,max}``; validates the bounds."""
    if min < 0 or (max is not None and max < min):
        raise GrammarError(f"bad repetition bounds {{{min},{'' if max is None else max}}}")
    if max == 0:
        return EMPTY
    if min == 1 and max == 1:
        return item
    return REPEAT(item, min, max)


def opt(item: Expr) -> Expr:
    """``item?``"""
    return repeat(item, 0, 1)


def star(item: Expr) -> Expr:
    """``item*``"""
    return repeat(item, 0, None)


def plus(item: Expr) -> Expr:
    """``item+``"""
    return repeat(item, 1, None)


def ref(name: str) -> Ref:
    """A reference to the rule ``name``."""
    return REF(name)


def chars(ranges: Iterable[tuple[int, int] | tuple[str, str] | str], negated: bool = False) -> CharSet:
    """A character set from ``(lo, hi)`` pairs (code points or characters) or strings of
    single characters."""
    out: list[tuple[int, int]] = []
    for r in ranges:
        if isinstance(r, str):
            out.extend((ord(c), ord(c)) for c in r)
        else:
            lo, hi = (ord(x) if isinstance(x, str) else x for x in r)
            if lo > hi:
                raise GrammarError(f"character range {lo:#x}-{hi:#x} is reversed")
            out.append((lo, hi))
    return CHAR_SET(merge_ranges(out), negated)


def byte_set(ranges: Iterable[tuple[int, int]]) -> ByteSet:
    """A set of single bytes."""
    rs = merge_ranges(ranges)
    for lo, hi in rs:
        if not 0 <= lo <= hi <= 255:
            raise GrammarError(f"byte range {lo}-{hi} is outside 0-255")
    return BYTE_SET(rs)
