"""Numbers with bounds and ``multipleOf`` as exact digit automata.

A bound compares decimal values, so it can be decided digit by digit while the number is being
written: the automaton tracks, per bound, whether the digits so far are below, equal to or
above the bound's digits (a longer integer part is always larger; fraction digits compare
position by position). ``multipleOf m`` with ``m = p / 10**k`` tracks the remainder modulo ``p``
of the digits read so far, as long-division does. Everything is exact on decimal values. Integral bounds without ``multipleOf`` (the common
case) skip the automaton: ``digit_ranges`` spells the same language directly, far faster.

Spelling: a constrained number is written without exponent (``0.00001``, not ``1e-5``) and
without ``-0``; an integer without fraction (``3``, not ``3.0``). Every value keeps one
spelling, so no valid value is lost. Unconstrained numbers accept the full RFC 8259 syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from formcast.grammar import charfa
from formcast.grammar.cache import Memo
from formcast.grammar.digit_ranges import interval_expr
from formcast.grammar.ir import Expr, choice, lit, opt, plus, seq, star
from formcast.grammar.ir_kinds import CHAR_SET
from formcast.grammar.json_text import GENERIC_INTEGER, GENERIC_NUMBER, plain_decimal

if TYPE_CHECKING:  # pragma: no cover
    from formcast.grammar.json_conj import Conj
    from formcast.grammar.json_refs import Loc
    from formcast.grammar.json_schema import SchemaCompiler

MAX_MODULUS: Final = 1000
MAX_SCALE: Final = 30

_NUMBER_EXPRS: Final = Memo(256)

_GE, _GT, _LE, _LT = frozenset({0, 1}), frozenset({1}), frozenset({-1, 0}), frozenset({-1})


def modulus_of(multiple: Decimal) -> tuple[int, int]:
    """``multiple = p / 10**k`` with integers ``p > 0`` and ``k >= 0``."""
    sign, digits, exp = multiple.normalize().as_tuple()
    p = int("".join(map(str, digits)) or "0")
    assert isinstance(exp, int)
    if exp >= 0:
        return p * 10**exp, 0
    return p, -exp


def multiple_supported(multiple: Decimal) -> bool:
    """Whether ``multipleOf`` with this value compiles to a small enough automaton."""
    p, k = modulus_of(multiple)
    return p <= MAX_MODULUS and k <= MAX_SCALE


def _magnitude_parts(value: Decimal) -> tuple[str, str]:
    """Integer digits (canonical) and fraction digits (no trailing zeros) of ``|value|``."""
    value = abs(value)
    whole = int(value)
    frac = value - whole
    ftext = format(frac.normalize(), "f") if frac else "0"
    fdigits = ftext.split(".")[1] if "." in ftext else ""
    return str(whole), fdigits.rstrip("0")


class _Bound:
    """A comparison ``|x| REL bound`` decided digit by digit."""

    def __init__(self, magnitude: Decimal, allowed: frozenset[int]) -> None:
        self.ib, self.fb = _magnitude_parts(magnitude)
        self.allowed = allowed

    # tracker states: ("i", n, cmp) reading integer digits; ("f", j) fraction equal so far;
    # ("r", cmp) decided.
    start = ("i", 0, 0)

    def int_digit(self, st: tuple, d: str) -> tuple:
        if st[0] == "r":
            return st
        _, n, cmp = st
        if n >= len(self.ib):
            return ("r", 1)  # longer integer part
        if cmp == 0:
            cmp = (d > self.ib[n]) - (d < self.ib[n])
        return ("i", n + 1, cmp)

    def end_int(self, st: tuple) -> tuple:
        if st[0] == "r":
            return st
        _, n, cmp = st
        if n < len(self.ib):
            return ("r", -1)
        return ("r", cmp) if cmp else ("f", 0)

    def frac_digit(self, st: tuple, d: str) -> tuple:
        if st[0] == "r":
            return st
        j = st[1]
        if j < len(self.fb):
            if d != self.fb[j]:
                return ("r", 1 if d > self.fb[j] else -1)
            return ("f", j + 1)
        return ("r", 1) if d != "0" else st

    def result(self, st: tuple) -> int:
        if st[0] == "r":
            return st[1]
        return -1 if st[1] < len(self.fb) else 0


def number_expr(*, integer: bool, low: Decimal | None = None, low_exclusive: bool = False,
                high: Decimal | None = None, high_exclusive: bool = False,
                multiples: Sequence[Decimal] = (), excluded: Sequence[Decimal] = (),
                rules: dict[str, Expr] | None = None, prefix: str = "num") -> Expr:
    """The JSON numbers (integers when ``integer``) within the bounds and multiples given.

    ``rules`` receives helper rules when the automaton has cycles that do not fit in one
    expression (large moduli); they are named ``{prefix}-{n}``.
    """
    if low is None and high is None and not multiples and not excluded:
        return GENERIC_INTEGER if integer else GENERIC_NUMBER
    # Decimals by their text: equal values written differently are different keys
    key = (integer, str(low), low_exclusive, str(high), high_exclusive,
           tuple(map(str, multiples)), tuple(map(str, excluded)))
    got = _NUMBER_EXPRS.get(key)
    if got is not None:
        return got
    if not multiples and not excluded:
        direct = interval_expr(integer=integer, low=low, low_exclusive=low_exclusive,
                               high=high, high_exclusive=high_exclusive)
        if direct is not None:
            _NUMBER_EXPRS.put(key, direct)
            return direct
    dfa = number_dfa(integer=integer, low=low, low_exclusive=low_exclusive, high=high,
                     high_exclusive=high_exclusive, multiples=multiples)
    if excluded:
        dfa = charfa.difference(dfa, _spellings(excluded))
    target = rules if rules is not None else {}
    before = len(target)
    expr = charfa.to_expr(dfa, _ascii_label, target, prefix)
    if len(target) == before:  # no helper rules: the expression stands alone, share it
        _NUMBER_EXPRS.put(key, expr)
    return expr


def _spellings(values: Sequence[Decimal]) -> charfa.DFA:
    """Every plain spelling of each value (trailing fraction zeros included)."""
    alts = []
    for v in values:
        text = plain_decimal(v)
        zeros = star(lit("0"))
        if "." in text:
            alts.append(seq(lit(text), zeros))
        else:
            alts.append(seq(lit(text), opt(seq(lit("."), plus(lit("0"))))))
    return charfa.minimize(charfa.from_expr(choice(*alts)))


def _ascii_label(ranges: tuple[tuple[int, int], ...]) -> Expr:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return lit(chr(ranges[0][0]))
    return CHAR_SET(ranges)


def number_dfa(*, integer: bool, low: Decimal | None, low_exclusive: bool,
               high: Decimal | None, high_exclusive: bool,
               multiples: Sequence[Decimal]) -> charfa.DFA:
    """The automaton behind ``number_expr``."""
    sides: dict[bool, list[_Bound] | None] = {}
    for neg in (False, True):
        bounds: list[_Bound] | None = []
        if low is not None:
            if not neg and low > 0 or (not neg and low == 0 and low_exclusive):
                bounds.append(_Bound(low, _GT if low_exclusive else _GE))
            elif neg:
                if low >= 0:
                    bounds = None
                else:
                    bounds.append(_Bound(-low, _LT if low_exclusive else _LE))
        if bounds is not None and high is not None:
            if not neg:
                if high < 0 or (high == 0 and high_exclusive):
                    bounds = None
                else:
                    bounds.append(_Bound(high, _LT if high_exclusive else _LE))
            elif high < 0:
                bounds.append(_Bound(-high, _GT if high_exclusive else _GE))
        sides[neg] = bounds
    mods = [modulus_of(m) for m in multiples]

    # state: (phase, neg, nonzero_seen, bound trackers, modulus trackers)
    def step(st: tuple, c: str) -> tuple | None:
        phase, neg, nz, trs, ms = st
        if phase == "S" and c == "-":
            return None if sides[True] is None else ("M", True, False, trs, ms)
        if phase in ("S", "M"):
            if not c.isdigit():
                return None
            if phase == "S" and sides[False] is None:
                return None
            bounds = sides[neg]
            assert bounds is not None
            trs = tuple(b.int_digit(b.start, c) for b in bounds)
            ms = tuple(((int(c)) % p, 0) for p, _ in mods)
            return ("Z" if c == "0" else "I", neg, c != "0", trs, ms)
        bounds = sides[neg]
        assert bounds is not None
        if phase == "I" and c.isdigit():
            trs = tuple(b.int_digit(t, c) for b, t in zip(bounds, trs, strict=True))
            ms = tuple(((r * 10 + int(c)) % p, 0) for (p, _), (r, _) in zip(mods, ms, strict=True))
            return ("I", neg, True, trs, ms)
        if phase in ("Z", "I") and c == "." and not integer:
            trs = tuple(b.end_int(t) for b, t in zip(bounds, trs, strict=True))
            return ("D", neg, nz, trs, ms)
        if phase in ("D", "F") and c.isdigit():
            new_ms = []
            for (p, k), (r, j) in zip(mods, ms, strict=True):
                if j < k:
                    new_ms.append(((r * 10 + int(c)) % p, j + 1))
                elif c != "0":
                    return None
                else:
                    new_ms.append((r, j))
            trs = tuple(b.frac_digit(t, c) for b, t in zip(bounds, trs, strict=True))
            return ("F", neg, nz or c != "0", trs, tuple(new_ms))
        return None

    def accepting(st: tuple) -> bool:
        phase, neg, nz, trs, ms = st
        if phase not in ("Z", "I", "F"):
            return False
        if neg and not nz:
            return False  # "-0" spellings: 0 keeps its unsigned spelling
        bounds = sides[neg]
        assert bounds is not None
        for b, t in zip(bounds, trs, strict=True):
            if phase in ("Z", "I"):
                t = b.end_int(t)
            if b.result(t) not in b.allowed:
                return False
        return all((r * 10 ** (k - j)) % p == 0
                   for (p, k), (r, j) in zip(mods, ms, strict=True))

    start = ("S", False, False, (), ())
    return charfa.minimize(charfa.from_step(start, step, accepting, "-0123456789."))


def build_number(c: SchemaCompiler, conj: Conj, loc: Loc, integer: bool) -> Expr:
    """The numbers ``conj`` allows (bounds, multipleOf, excluded values), reporting what
    does not fit in an automaton."""
    multiples = []
    for m, ptr in conj.multiples:
        if multiple_supported(m):
            multiples.append((m, ptr))
        else:
            c.report(ptr, "multipleOf", f"multipleOf {m}: the modulus is too large for a "
                     "digit automaton (numerator at most 1000)")
    low = conj.low
    high = conj.high
    excluded = conj.excluded_numbers
    if low is None and high is None and not multiples and not excluded:
        return c.prim("integer" if integer else "number")
    prefix = c.rule_base(loc) + "-num"

    def build(with_multiples: bool) -> Expr:
        return number_expr(integer=integer, low=low and low[0],
                           low_exclusive=bool(low and low[1]), high=high and high[0],
                           high_exclusive=bool(high and high[1]),
                           multiples=[m for m, _ in multiples] if with_multiples else [],
                           excluded=excluded, rules=c.rules, prefix=prefix)

    try:
        expr = build(True)
    except charfa.AutomatonTooLarge:
        for _, ptr in multiples:
            c.report(ptr, "multipleOf", "multipleOf together with the bounds makes an "
                     "automaton too large to compile")
        expr = build(False)
    if low is not None or high is not None or multiples or excluded:
        c.note("constrained numbers are written without exponent, integers without "
               "fraction (every value keeps that spelling)")
    return expr
