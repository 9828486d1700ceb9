"""JSON text (RFC 8259) as grammar IR: whitespace, string characters and their escapes,
digit and hex-digit ranges, and literal JSON values.

Two kinds of strings are produced:

* ``GENERIC_STRING``: RFC 8259 exactly, every escape included (``\\u0041`` and lone surrogate
  escapes too). Used where the schema does not constrain the string's contents.
* Constrained contents (patterns, formats, lengths, enum values, property names): the grammar
  works on *decoded characters*, so each character must be spelled in JSON. ``char_forms``
  spells a character set: raw where JSON allows it raw; ``\\" \\\\ \\/ \\b \\f \\n \\r \\t``;
  ``\\uXXXX`` (either hex case) for control characters and every non-ASCII character; a
  surrogate pair for characters beyond the BMP. The one spelling left out is the ``\\u`` escape
  of printable ASCII (``\\u0041`` for ``A``) and lone surrogates: every string value keeps at
  least one accepted spelling, so no valid value is lost; only redundant spellings are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from decimal import Decimal
from functools import lru_cache
from typing import Any, Final

from formcast.errors import SchemaError
from formcast.grammar.ir import (
    MAX_CODEPOINT,
    Expr,
    Literal,
    Repeat,
    chars,
    choice,
    lit,
    merge_ranges,
    repeat,
    seq,
    star,
)
from formcast.grammar.ir_kinds import CHAR_SET, CHOICE, EMPTY, LITERAL, NOTHING, REF, REPEAT, SEQ

Ranges = tuple[tuple[int, int], ...]

QUOTE: Final = lit('"')
ANY_CODEPOINT: Final[Ranges] = ((0, 0xD7FF), (0xE000, MAX_CODEPOINT))
RAW_ALLOWED: Final[Ranges] = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, MAX_CODEPOINT))
SHORT_ESCAPES: Final = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r",
                 0x09: "t"}
U_ESCAPED: Final[Ranges] = ((0x00, 0x1F), (0x7F, 0xD7FF), (0xE000, 0xFFFF))
ASTRAL: Final[Ranges] = ((0x10000, MAX_CODEPOINT),)

HEX_DIGIT: Final = chars([("0", "9"), ("a", "f"), ("A", "F")])
DIGIT: Final = chars([("0", "9")])
NONZERO_DIGIT: Final = chars([("1", "9")])

GENERIC_STRING: Final[Expr] = seq(
    QUOTE,
    star(choice(
        CHAR_SET(RAW_ALLOWED),
        seq(lit("\\"), choice(chars('"\\/bfnrt'), seq(lit("u"), repeat(HEX_DIGIT, 4, 4)))),
    )),
    QUOTE,
)
GENERIC_INTEGER: Final[Expr] = seq(repeat(lit("-"), 0, 1), choice(lit("0"), seq(NONZERO_DIGIT, star(DIGIT))))
GENERIC_NUMBER: Final[Expr] = seq(
    GENERIC_INTEGER,
    repeat(seq(lit("."), repeat(DIGIT, 1, None)), 0, 1),
    repeat(seq(chars("eE"), repeat(chars("+-"), 0, 1), repeat(DIGIT, 1, None)), 0, 1),
)


def union(items: Iterable[Expr]) -> Expr:
    """``ir.choice`` in linear time (set-based de-duplication) for long alternative lists.
    Literals (every enum value) are told apart by their bytes, whose hash is cached: the
    expression's own hash is a Python call."""
    flat: dict[object, Expr] = {}
    for item in items:
        for part in item.items if type(item) is CHOICE else (item,):
            key = part.data if type(part) is LITERAL else part  # type: ignore[attr-defined]
            if key not in flat:
                flat[key] = part
    alts = tuple(flat.values())
    return alts[0] if len(alts) == 1 else CHOICE(alts)


class MemoUnion:
    """``union`` for many calls over shared nodes: each node's structural hash is computed
    once (the IR's dataclass hash walks the whole subtree on every dict lookup). Nodes are held
    for the memo's lifetime, so their ids stay theirs."""

    def __init__(self) -> None:
        self._hashes: dict[int, tuple[Expr, int]] = {}

    def __call__(self, items: Iterable[Expr]) -> Expr:
        flat: dict[_Keyed, None] = {}
        for item in items:
            for part in item.items if isinstance(item, CHOICE) else (item,):
                flat.setdefault(_Keyed(part, self.hash(part)), None)
        alts = tuple(k.expr for k in flat)
        return alts[0] if len(alts) == 1 else CHOICE(alts)

    def hash(self, expr: Expr) -> int:
        got = self._hashes.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, SEQ | CHOICE):
            h = hash((type(expr), tuple(self.hash(x) for x in expr.items)))
        elif isinstance(expr, REPEAT):
            h = hash((Repeat, self.hash(expr.item), expr.min, expr.max))
        else:
            h = hash(expr)
        self._hashes[id(expr)] = (expr, h)
        return h


class _Keyed:
    """An expression as a dict key with a precomputed hash (equality stays structural)."""

    __slots__ = ("expr", "hash")

    def __init__(self, expr: Expr, hash_: int) -> None:
        self.expr = expr
        self.hash = hash_

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Keyed) and self.hash == other.hash and (
            self.expr is other.expr or self.expr == other.expr)


# ----------------------------------------------------------------------------- ranges


def intersect_ranges(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> Ranges:
    """The intersection of two sets of inclusive ranges."""
    return _intersect_merged(merge_ranges(a), merge_ranges(b))


def _intersect_merged(a: Ranges, b: Ranges) -> Ranges:
    """The intersection of two sorted, merged sets of ranges (sorted and merged too: pieces
    of disjoint, non-adjacent ranges are never adjacent)."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = a[i]
        c, d = b[j]
        x, y = max(lo, c), min(hi, d)
        if x <= y:
            out.append((x, y))
        if hi < d:
            i += 1
        else:
            j += 1
    return tuple(out)


def _contains(ranges: Ranges, c: int) -> bool:
    return any(lo <= c <= hi for lo, hi in ranges)


def _digit_class(lo: int, hi: int, base: int) -> Expr:
    """One digit with value in ``[lo, hi]``; hex letters in both cases (from the table)."""
    return _DIGIT_CLASSES[lo, hi, base]


def _make_digit_class(lo: int, hi: int, base: int) -> Expr:
    ranges: list[tuple[int, int]] = []
    for v in range(lo, hi + 1):
        c = "0123456789abcdef"[v]
        ranges.append((ord(c), ord(c)))
        if base == 16 and c.isalpha():
            ranges.append((ord(c.upper()), ord(c.upper())))
    merged = merge_ranges(ranges)
    if len(merged) == 1 and merged[0][0] == merged[0][1]:
        return lit(chr(merged[0][0]))
    return CHAR_SET(merged)


# Every digit class of base 10 and 16, made once at import: ranges of \u escapes and
# integer bounds ask for them thousands of times per schema (a sixth of an invoice's front end).
_DIGIT_CLASSES: Final = {(lo, hi, base): _make_digit_class(lo, hi, base)
                  for base in (10, 16) for lo in range(base) for hi in range(lo, base)}


def fixed_width_range(lo: int, hi: int, width: int, base: int = 10) -> Expr:
    """Strings of exactly ``width`` digits in ``base`` whose value lies in ``[lo, hi]``."""
    if lo > hi:
        return NOTHING
    return _digit_tree(((lo, hi),), 0, width, base)


def hex4_ranges(ranges: Iterable[tuple[int, int]]) -> Expr:
    """Four hex digits (either case) whose value lies in one of ``ranges``."""
    merged = merge_ranges(ranges)
    return _digit_tree(merged, 0, 4, 16) if merged else NOTHING


def _digit_tree(ranges: Ranges, offset: int, width: int, base: int) -> Expr:
    """The ``width``-digit strings whose value lies in one of ``ranges`` (sorted, merged, all
    inside ``[offset, offset + base**width)``), as one digit tree over all the ranges at
    once: a run of first digits whose subtrees are full is one digit class followed by any
    digits, a first digit whose subtree is partly covered recurses. A negated class such as
    ``[^@\\s]`` has a dozen ranges; one tree for all of them builds half the nodes that a
    tree per range did, and no node is hashed to drop duplicates (first digits differ)."""
    if width == 0:
        return EMPTY
    size = base ** (width - 1)
    top = base - 1
    parts: list[Expr] = []
    run_start = -1  # first digit of the current run of full subtrees
    i, n = 0, len(ranges)
    d = (ranges[0][0] - offset) // size
    while d < base and i < n:
        lo = offset + d * size
        hi = lo + size - 1
        r_lo, r_hi = ranges[i]
        if r_hi < lo:
            i += 1
            continue
        if r_lo > hi:  # an empty subtree: the run ends; go on at the next range's digit
            if run_start >= 0:
                parts.append(_full_digits(run_start, d - 1, width, base))
                run_start = -1
            d = (r_lo - offset) // size
            continue
        if r_lo <= lo and r_hi >= hi:  # full subtrees, as many as this range covers
            if run_start < 0:
                run_start = d
            d = min(top, (r_hi + 1 - offset) // size - 1) + 1
            continue
        if run_start >= 0:
            parts.append(_full_digits(run_start, d - 1, width, base))
            run_start = -1
        j = i
        inside = []
        while j < n and ranges[j][0] <= hi:
            inside.append((max(ranges[j][0], lo), min(ranges[j][1], hi)))
            j += 1
        parts.append(_digit_then(_DIGIT_CLASSES[d, d, base],
                                 _digit_tree(tuple(inside), lo, width - 1, base)))
        i = j if ranges[j - 1][1] <= hi else j - 1  # the last range may go on past hi
        d += 1
    if run_start >= 0:
        parts.append(_full_digits(run_start, d - 1, width, base))
    return parts[0] if len(parts) == 1 else CHOICE(tuple(parts))


def _full_digits(first: int, last: int, width: int, base: int) -> Expr:
    """A first digit in ``[first, last]``, then any ``width - 1`` digits."""
    rest = width - 1
    head = _DIGIT_CLASSES[first, last, base]
    if not rest:
        return head
    return _digit_then(head, repeat(_DIGIT_CLASSES[0, base - 1, base], rest, rest))


def _digit_then(head: Expr, tail: Expr) -> Expr:
    """``seq(head, tail)`` for a digit and a digit tree (literal digits merged, as seq
    would), without seq's general flattening loop."""
    kind = type(tail)
    if kind is SEQ:
        first = tail.items[0]  # type: ignore[attr-defined]
        if type(head) is LITERAL and type(first) is LITERAL:
            return SEQ((LITERAL(head.data + first.data),) + tail.items[1:])  # type: ignore
        return SEQ((head,) + tail.items)  # type: ignore[attr-defined]
    if kind is LITERAL and type(head) is LITERAL:
        return LITERAL(head.data + tail.data)  # type: ignore[attr-defined]
    if tail is EMPTY:
        return head
    return SEQ((head, tail))


# ----------------------------------------------------------------------------- characters


def char_forms(ranges: Iterable[tuple[int, int]], u_all: Expr | None = None) -> Expr:
    """The JSON string spellings of one character from ``ranges`` (see the module docstring).

    ``u_all``, when given, stands for the ``\\u`` escapes of every character that has one
    (``U_ALL``); it is used when ``ranges`` includes all of them, to keep grammars small.
    """
    cps = intersect_ranges(ranges, ANY_CODEPOINT)
    if not cps:
        return NOTHING
    alts: list[Expr] = []
    raw = _intersect_merged(cps, RAW_ALLOWED)
    if raw:
        alts.append(_single_char(raw))
    escaped: list[Expr] = []
    short = sorted(c for c in SHORT_ESCAPES if _contains(cps, c))
    if short:
        letters = [SHORT_ESCAPES[c] for c in short]
        escaped.append(lit(letters[0]) if len(letters) == 1 else chars("".join(letters)))
    uesc = _intersect_merged(cps, U_ESCAPED)
    astral = _intersect_merged(cps, ASTRAL)
    if u_all is not None and uesc == U_ESCAPED and astral == ASTRAL:
        escaped.append(u_all)
    else:
        u_alts: list[Expr] = []
        if uesc:
            u_alts.append(hex4_ranges(uesc))
        if astral:
            u_alts.append(_ALL_PAIRS if astral == ASTRAL else _surrogate_pairs(astral))
        if u_alts:
            escaped.append(seq(lit("u"), _distinct_choice(u_alts)))
    if escaped:
        alts.append(seq(lit("\\"), _distinct_choice(escaped)))
    return _distinct_choice(alts)


def _distinct_choice(items: list[Expr]) -> Expr:
    """``choice(*items)`` for alternatives known to differ (they spell different characters,
    or the same one in different lengths), so none is hashed to find duplicates: the digit
    trees of a negated class are hundreds of nodes, and hashing them took longer than
    building them."""
    flat: list[Expr] = []
    for item in items:
        if type(item) is CHOICE:
            flat.extend(item.items)  # type: ignore[attr-defined]
        else:
            flat.append(item)
    return flat[0] if len(flat) == 1 else CHOICE(tuple(flat))


def _single_char(ranges: Ranges) -> Expr:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return lit(chr(ranges[0][0]))
    return CHAR_SET(ranges)


def _surrogate_pairs(ranges: Ranges) -> Expr:
    """The surrogate-pair escapes of astral ``ranges``: a high surrogate whose low ones are
    all allowed joins its neighbours in one pair class, so the whole astral plane is one
    ``[Dd][89ABab]XX\\u[Dd][C-Fc-f]XX`` (a third of the NFA states of three pieces)."""
    alts = []
    for lo, hi in ranges:
        hlo, llo = 0xD800 + ((lo - 0x10000) >> 10), 0xDC00 + ((lo - 0x10000) & 0x3FF)
        hhi, lhi = 0xD800 + ((hi - 0x10000) >> 10), 0xDC00 + ((hi - 0x10000) & 0x3FF)
        if hlo == hhi:
            alts.append(_pair(hlo, hlo, llo, lhi))
            continue
        full_lo = hlo if llo == 0xDC00 else hlo + 1  # first high surrogate with every low one
        full_hi = hhi if lhi == 0xDFFF else hhi - 1
        if full_lo != hlo:
            alts.append(_pair(hlo, hlo, llo, 0xDFFF))
        if full_lo <= full_hi:
            alts.append(_pair(full_lo, full_hi, 0xDC00, 0xDFFF))
        if full_hi != hhi:
            alts.append(_pair(hhi, hhi, 0xDC00, lhi))
    return choice(*alts)


def _pair(h1: int, h2: int, l1: int, l2: int) -> Expr:
    return seq(fixed_width_range(h1, h2, 4, 16), lit("\\u"), fixed_width_range(l1, l2, 4, 16))


# Every surrogate pair (most negated classes include all of them), made once at import.
_ALL_PAIRS: Final[Expr] = _surrogate_pairs(ASTRAL)
U_ALL: Final[Expr] = seq(lit("u"), choice(hex4_ranges(U_ESCAPED), _ALL_PAIRS))
ANY_CHAR_FORMS: Final[Expr] = char_forms(ANY_CODEPOINT)
# One character of a JSON string as the schema compiler's "char" rule spells it, with its \u
# escapes in the rule "unicode-escape" (whose body is U_ALL). The item of every length-bounded
# string; the engine keeps its automaton precomputed (engine/fragments.py).
JSON_CHAR: Final[Expr] = char_forms(ANY_CODEPOINT, REF("unicode-escape"))


@lru_cache(maxsize=4096)
def char_forms_cached(ranges: Ranges, u_all: Expr | None = None) -> Expr:
    """``char_forms`` memoised (automaton labels repeat a lot)."""
    return char_forms(ranges, u_all)


_PLAIN_RUN: Final = re.compile(r'[ !#-.0-\[\]-~]+')  # printable ASCII but quote, backslash, slash
_PLAIN_RUNS: Final = re.compile(r'[ !#-.0-\[\]-~]+(?:\x00[ !#-.0-\[\]-~]+)*')  # of them, NUL-joined


def string_content(text: str) -> Expr:
    """The spellings of exactly ``text`` inside a JSON string (without the quotes)."""
    parts: list[Expr] = []
    pos = 0
    for run in _PLAIN_RUN.finditer(text):
        parts += [_char_spellings(c) for c in text[pos:run.start()]]
        parts.append(LITERAL(run.group().encode("ascii")))
        pos = run.end()
    parts += [_char_spellings(c) for c in text[pos:]]
    return seq(*parts)


def _char_spellings(c: str) -> Expr:
    cp = ord(c)
    if 0xD800 <= cp <= 0xDFFF:  # a lone surrogate (json.loads keeps them): escape only
        return seq(lit("\\u"), fixed_width_range(cp, cp, 4, 16))
    return char_forms_cached(((cp, cp),))


def is_plain(text: str) -> bool:
    """Whether ``text`` (non-empty) has one JSON spelling: itself (printable ASCII other than
    the quote, backslash and slash)."""
    return _PLAIN_RUN.fullmatch(text) is not None


def string_literal(text: str) -> Expr:
    """The JSON string ``text``, quotes included."""
    if _PLAIN_RUN.fullmatch(text):
        return LITERAL(b'"' + text.encode("ascii") + b'"')
    return seq(QUOTE, string_content(text), QUOTE)


def string_union(texts: list[str]) -> Expr:
    """The JSON strings ``texts`` (distinct, at least one), as ``union`` of their
    ``string_literal``: a string enum of hundreds of values (country codes) is the common
    case, and going through ``value_literal`` and ``union`` cost twice as much a value.
    Distinct strings have distinct spellings, so nothing needs de-duplicating."""
    if len(texts) > 1 and _PLAIN_RUNS.fullmatch("\x00".join(texts)):
        # All plain (the common case): quote and encode them in one go.
        spelled = ('"' + '"\x00"'.join(texts) + '"').encode("ascii").split(b"\x00")
        return CHOICE(tuple(map(Literal, spelled)))
    plain = _PLAIN_RUN.fullmatch
    alts = tuple(LITERAL(b'"' + t.encode("ascii") + b'"') if plain(t) else string_literal(t)
                 for t in texts)
    return alts[0] if len(alts) == 1 else CHOICE(alts)


# ----------------------------------------------------------------------------- numbers


def plain_decimal(value: Decimal) -> str:
    """``value`` written without exponent, without trailing fraction zeros (``1.50`` -> ``1.5``,
    ``2.0`` -> ``2``)."""
    if value == value.to_integral_value():
        return str(int(value))
    text = format(value.normalize(), "f")
    return text


def to_decimal(value: Any) -> Decimal:
    """A JSON number as an exact ``Decimal`` (floats through their shortest repr, as written)."""
    if isinstance(value, bool):
        raise TypeError("booleans are not numbers")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SchemaError(f"{value} is not a JSON number")
        return Decimal(repr(value))
    if isinstance(value, Decimal):
        return value
    raise TypeError(f"not a number: {value!r}")


def number_literal(value: Any) -> Expr:
    """The spellings of one number: plain decimal, plus ``json.dumps``'s when it differs.

    Integral values are spelled as integers only (``1.0`` is the JSON Schema value ``1``).
    """
    text = plain_decimal(to_decimal(value))
    alts = [lit(text)]
    if isinstance(value, float) and value != int(value):
        dumped = repr(value)
        if dumped != text:
            alts.append(lit(dumped))
    return choice(*alts)


# ----------------------------------------------------------------------------- values


def is_json_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def value_literal(value: Any, ws: Expr, any_order_limit: int = 0) -> Expr:
    """The spellings of one JSON value (for ``const`` and ``enum``), with ``ws`` between tokens.

    Object members come in the value's own key order, or in any order when the object has at
    most ``any_order_limit`` members.
    """
    if value is None:
        return lit("null")
    if value is True:
        return lit("true")
    if value is False:
        return lit("false")
    if is_json_number(value):
        return number_literal(value)
    if isinstance(value, str):
        return string_literal(value)
    sep = seq(ws, lit(","), ws)
    if isinstance(value, list):
        if not value:
            return seq(lit("["), ws, lit("]"))
        items = [value_literal(v, ws, any_order_limit) for v in value]
        body: list[Expr] = [items[0]]
        for item in items[1:]:
            body += [sep, item]
        return seq(lit("["), ws, *body, ws, lit("]"))
    if isinstance(value, dict):
        if not value:
            return seq(lit("{"), ws, lit("}"))
        members = [seq(string_literal(k), ws, lit(":"), ws, value_literal(v, ws, any_order_limit))
                   for k, v in value.items()]
        if 1 < len(members) <= any_order_limit:
            body_expr = _permutations(members, sep)
        else:
            parts: list[Expr] = [members[0]]
            for m in members[1:]:
                parts += [sep, m]
            body_expr = seq(*parts)
        return seq(lit("{"), ws, body_expr, ws, lit("}"))
    raise SchemaError(f"not a JSON value: {value!r}")


def _permutations(members: list[Expr], sep: Expr) -> Expr:
    if len(members) == 1:
        return members[0]
    return choice(*(seq(m, sep, _permutations(members[:i] + members[i + 1:], sep))
                    for i, m in enumerate(members)))
