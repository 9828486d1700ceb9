"""Numbers between integral bounds, spelled directly as digit expressions.

Bounds like ``"minimum": 0, "maximum": 100`` are the common case. The general digit
automaton of ``json_numbers`` builds and minimises a DFA for them, a few hundred microseconds
a number in Python. An interval of integers has a textbook spelling instead: split it by
number of digits, then at the first digit where its two ends differ. Fractions only matter at
the ends of the interval (``x > 5`` allows ``5.01``, ``x <= 30`` allows ``30.00``). The
language is the automaton's exactly: the same spellings (no exponent, no ``-0``, integers
without fraction), checked against it in the tests.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from formcast.grammar.ir import Expr, chars, choice, lit, opt, plus, repeat, seq, star
from formcast.grammar.ir_kinds import NOTHING
from formcast.grammar.json_text import DIGIT, NONZERO_DIGIT

# (value, strict): the end of an interval of magnitudes; None above means no upper end.
End = tuple[int, bool]

ANY_FRACTION: Final = opt(seq(lit("."), plus(DIGIT)))
NONZERO_FRACTION: Final = seq(lit("."), star(lit("0")), NONZERO_DIGIT, star(DIGIT))
ZERO_FRACTION: Final = opt(seq(lit("."), plus(lit("0"))))


def _digit_span(lo: int, hi: int) -> Expr:
    if lo == hi:
        return lit(str(lo))
    return chars([(str(lo), str(hi))])


def _same_length(lo: str, hi: str) -> Expr:
    """Digit strings of ``len(lo) == len(hi)`` digits from ``lo`` to ``hi`` inclusive."""
    if lo == "0" * len(lo) and hi == "9" * len(hi):
        return repeat(DIGIT, len(lo), len(lo))
    if lo[0] == hi[0]:
        return seq(lit(lo[0]), _same_length(lo[1:], hi[1:]))
    rest = len(lo) - 1
    alts = []
    first_full, last_full = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * rest:
        alts.append(seq(lit(lo[0]), _same_length(lo[1:], "9" * rest)))
        first_full += 1
    tail = None
    if hi[1:] != "9" * rest:
        tail = seq(lit(hi[0]), _same_length("0" * rest, hi[1:]))
        last_full -= 1
    if first_full <= last_full:
        alts.append(seq(_digit_span(first_full, last_full), repeat(DIGIT, rest, rest)))
    if tail is not None:
        alts.append(tail)
    return choice(*alts)


def integer_interval(low: int, high: int | None) -> Expr:
    """Integers ``low <= n <= high`` (``0 <= low``; ``high`` None: unbounded) written without
    leading zeros."""
    if high is not None and high < low:
        return NOTHING
    if high is None and low <= 1:
        return choice(*([lit("0")] if low == 0 else []), seq(NONZERO_DIGIT, star(DIGIT)))
    alts: list[Expr] = []
    full: list[int] = []  # lengths wholly inside the interval, made one repetition

    def flush() -> None:
        if full:
            alts.append(seq(NONZERO_DIGIT, repeat(DIGIT, full[0] - 1, full[-1] - 1)))
            full.clear()

    shortest = len(str(low))
    longest = len(str(high)) if high is not None else shortest
    for length in range(shortest, longest + 1):
        smallest = 10 ** (length - 1) if length > 1 else 0
        largest = 10**length - 1
        a = max(low, smallest)
        b = largest if high is None else min(high, largest)
        if a == smallest and b == largest and length > 1:
            full.append(length)
            continue
        flush()
        alts.append(_same_length(str(a), str(b)))
    if high is None:
        full.append(longest + 1)
        alts.append(seq(NONZERO_DIGIT, repeat(DIGIT, full[0] - 1, None)))
    else:
        flush()
    return choice(*alts)


def magnitude_interval(lower: End, upper: End | None, integer: bool) -> Expr:
    """Unsigned numbers whose value lies between ``lower`` and ``upper``."""
    lo, lo_strict = lower
    if integer:
        return integer_interval(lo + lo_strict, None if upper is None else upper[0] - upper[1])
    hi = None if upper is None else upper[0]
    parts = [seq(integer_interval(lo + lo_strict, None if hi is None else hi - 1),
                 ANY_FRACTION)]
    if lo_strict and (hi is None or lo < hi):
        parts.append(seq(lit(str(lo)), NONZERO_FRACTION))
    if upper is not None and not upper[1] and (hi > lo or (hi == lo and not lo_strict)):
        parts.append(seq(lit(str(hi)), ZERO_FRACTION))
    return choice(*parts)


# Longer bounds go to the digit automaton, which caps its size (a schema's "maximum": 1e9999
# is refused there, not spelled here digit by digit).
MAX_DIGITS: Final = 40


def _integral(value: Decimal | None) -> bool:
    return value is None or (value.is_finite() and value == value.to_integral_value()
                             and value.adjusted() < MAX_DIGITS)


def interval_expr(*, integer: bool, low: Decimal | None, low_exclusive: bool,
                  high: Decimal | None, high_exclusive: bool) -> Expr | None:
    """The JSON numbers (integers when ``integer``) within the bounds, or None when a bound
    is not an integer (the digit automaton handles those)."""
    if not (_integral(low) and _integral(high)):
        return None
    lo = None if low is None else int(low)
    hi = None if high is None else int(high)
    alts: list[Expr] = []
    # x >= 0, spelled unsigned
    if hi is None or hi > 0 or (hi == 0 and not high_exclusive):
        lower = (0, False) if lo is None or lo < 0 else (lo, low_exclusive)
        upper = None if hi is None else (hi, high_exclusive)
        alts.append(magnitude_interval(lower, upper, integer))
    # x < 0, spelled "-" and a magnitude above zero (no "-0")
    if lo is None or lo < 0:
        lower = (0, True) if hi is None or hi >= 0 else (-hi, high_exclusive)
        upper = None if lo is None else (-lo, low_exclusive)
        alts.append(seq(lit("-"), magnitude_interval(lower, upper, integer)))
    return choice(*alts) if alts else NOTHING
