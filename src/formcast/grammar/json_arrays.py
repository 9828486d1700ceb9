"""Arrays: ``prefixItems``/``items`` per position, ``minItems``/``maxItems``, and ``contains``.

Positions are nested optionals (an array of at most 3 items is ``a (, b (, c)?)?``), the tail
past ``prefixItems`` is a bounded repetition. ``contains`` with ``minContains``/``maxContains``
is exact when its schema can be negated: every item is either a match (items AND contains) or
a miss (items AND NOT contains), and the matches are counted in the item list itself.
``uniqueItems`` compares items with each other, which no context-free grammar can do.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Final

from formcast.grammar.ir import Expr, choice, is_nothing, lit, opt, repeat, seq, star
from formcast.grammar.ir_kinds import EMPTY, NOTHING
from formcast.grammar.json_conj import Conj
from formcast.grammar.json_negate import negate
from formcast.grammar.json_objects import emit_graph
from formcast.grammar.json_refs import Loc, join_pointer
from formcast.grammar.json_text import value_literal

if TYPE_CHECKING:  # pragma: no cover
    from formcast.grammar.json_schema import SchemaCompiler

MAX_UNIQUE_VALUES: Final = 6  # one grammar state per subset of used values: 2**6 = 64


def build_array(c: SchemaCompiler, conj: Conj, loc: Loc) -> Expr:
    """The arrays ``conj`` allows."""
    lo, hi = conj.min_items, conj.max_items
    parts = conj.arrays
    if conj.unique and (hi is None or hi > 1):
        distinct = None
        if not conj.contains and not any(p.prefix for p in parts):
            distinct = _distinct_items(c, conj, loc)
        if distinct is not None:
            return distinct
        for ptr in conj.unique:
            c.report(ptr, "uniqueItems", "uniqueItems is compiled only for items drawn from a "
                     f"small finite set (at most {MAX_UNIQUE_VALUES} values); left to the "
                     "validator")
    if conj.contains:
        counted = None
        if (len(conj.contains) == 1 and not any(p.prefix for p in parts) and lo == 0
                and hi is None):
            counted = _contains(c, conj, loc)
        if counted is not None:
            return counted
        for spec in conj.contains:
            c.report(spec.pointer, "contains", "contains (how many items match) is compiled "
                     "only for a negatable schema without prefixItems or minItems/maxItems;"
                     " left to the validator")
    if not parts and lo == 0 and hi is None:
        return c.prim("array")
    if hi is not None and hi < lo:
        return NOTHING
    n = max((len(p.prefix) for p in parts), default=0)
    positions: list[Expr] = []
    with c.consuming():
        for i in range(n):
            subs = [p.prefix[i] if i < len(p.prefix) else p.items for p in parts]
            expr = c.compile_subs([s for s in subs if s is not None],
                                     join_pointer(loc.pointer, "prefixItems", i))
            if is_nothing(expr):
                hi = i if hi is None else min(hi, i)
                break
            positions.append(expr)
        rest_subs = [p.items for p in parts if p.items is not None]
        rest = (c.compile_subs(rest_subs, join_pointer(loc.pointer, "items"))
                if (hi is None or hi > len(positions)) else NOTHING)
    if is_nothing(rest):
        hi = len(positions) if hi is None else min(hi, len(positions))
    if hi is not None and hi < lo:
        return NOTHING
    ws = c.ws
    return seq(lit("["), ws, _items(positions, rest, lo, hi, seq(lit(","), ws), ws), lit("]"))


def _items(positions: list[Expr], rest: Expr, lo: int, hi: int | None, comma: Expr,
           ws: Expr) -> Expr:
    """What goes between ``[ ws`` and ``]``: the positional items in turn, each one past
    ``lo`` optional (with all that follows it), then ``rest`` repeated. Built from the end
    (a loop, not a recursive closure: a closure that calls itself is a reference cycle
    that outlives the compile)."""
    stop = len(positions) if hi is None else min(len(positions), hi)
    if hi is not None and stop >= hi:
        out = EMPTY if stop >= lo else NOTHING
    else:
        lo_r = max(0, lo - stop)
        hi_r = None if hi is None else hi - stop
        more = seq(comma, rest, ws)
        if stop > 0:
            out = repeat(more, lo_r, hi_r)
        else:
            body = seq(rest, ws, repeat(more, max(lo_r - 1, 0),
                                        None if hi_r is None else hi_r - 1))
            out = body if lo_r > 0 else opt(body)
    for i in range(stop - 1, -1, -1):
        item = seq(comma if i > 0 else EMPTY, positions[i], ws, out)
        out = item if i < lo else opt(item)
    return out


def _distinct_items(c: SchemaCompiler, conj: Conj, loc: Loc) -> Expr | None:
    """``uniqueItems`` when the items come from a small finite set (``enum`` items, say): the
    grammar remembers which values were used, one state per subset."""
    items = [p.items for p in conj.arrays if p.items is not None]
    if not items:
        return None
    inner = Conj()
    for sub, sub_loc in items:
        c.acc.add(inner, sub, sub_loc, (sub_loc.pointer,))
    if inner.values is None or inner.groups or inner.nots:
        return None
    c.seen.update(inner.seen)
    valid = c.checker(inner)
    values = [v for v in inner.values if valid(v)]
    if len(values) > MAX_UNIQUE_VALUES:
        return None
    limit = 5 if c.options.property_order == "any" else 0
    spelled = [value_literal(v, c.ws, limit) for v in values]
    lo = conj.min_items
    hi = len(values) if conj.max_items is None else min(conj.max_items, len(values))
    if hi < lo:
        return NOTHING
    ws = c.ws
    moves = _DistinctMoves(spelled, lo, hi, seq(lit(","), ws), ws)
    body = emit_graph(c, frozenset(), moves, c.rule_base(loc) + "-u")
    return seq(lit("["), ws, body, lit("]"))


class _DistinctMoves:
    """Distinct items drawn from ``spelled``: a state is the set of those written (a class,
    not a closure: compiled, a nested function is a reference cycle with its environment)."""

    def __init__(self, spelled: list[Expr], lo: int, hi: int, comma: Expr, ws: Expr) -> None:
        self.spelled, self.lo, self.hi, self.comma, self.ws = spelled, lo, hi, comma, ws

    def __call__(self, used: Hashable) -> list[tuple[Expr, Hashable | None]]:
        assert isinstance(used, frozenset)
        out: list[tuple[Expr, Hashable | None]] = []
        if len(used) >= self.lo:
            out.append((EMPTY, None))
        if len(used) < self.hi:
            for i, text in enumerate(self.spelled):
                if i not in used:
                    out.append((seq(self.comma if used else EMPTY, text, self.ws), used | {i}))
        return out


def _contains(c: SchemaCompiler, conj: Conj, loc: Loc) -> Expr | None:
    """Arrays whose items are each a match (items AND contains) or a miss (items AND NOT
    contains), with the number of matches in [minContains, maxContains]."""
    spec = conj.contains[0]
    misses = negate(c, spec.schema, spec.loc)
    if misses is None:
        return None
    items = [p.items for p in conj.arrays if p.items is not None]
    with c.consuming():
        match = c.compile_subs(items + [(spec.schema, spec.loc)], spec.loc.pointer)
        miss_alts = []
        for piece in misses:
            branch = Conj()
            for sub, sub_loc in items:
                c.acc.add(branch, sub, sub_loc, (sub_loc.pointer,))
            branch.merge(piece)
            miss_alts.append(c.compile_conj(branch, spec.loc))
        miss = choice(*miss_alts) if miss_alts else NOTHING
    if spec.max is not None and spec.max < spec.min:
        return NOTHING
    ws = c.ws
    comma = seq(lit(","), ws)
    misses_after = star(seq(comma, miss, ws))

    def with_matches(low: int, high: int | None) -> Expr:
        first = choice(seq(match, ws), seq(miss, ws, misses_after, comma, match, ws))
        more = repeat(seq(comma, match, ws, misses_after), low - 1,
                      None if high is None else high - 1)
        return seq(first, misses_after, more)

    if spec.min >= 1:
        body = with_matches(spec.min, spec.max)
    else:
        body = choice(EMPTY, seq(miss, ws, misses_after),
                      *([with_matches(1, spec.max)] if spec.max != 0 else []))
    return seq(lit("["), ws, body, lit("]"))
