"""Digit trees of ``json_text``: the ``\\uXXXX`` escapes of a character class and the digit
strings of a value range must spell exactly the values in range, hex letters in either case."""

from __future__ import annotations

from itertools import product

from hypothesis import given, settings
from hypothesis import strategies as st

from formcast.grammar.ir import CharSet, Choice, Expr, Literal, Repeat, Seq, merge_ranges
from formcast.grammar.json_text import char_forms, fixed_width_range, hex4_ranges

DIGITS = "0123456789abcdef"


def spelled(expr: Expr) -> set[str]:
    """Every string of a small, finite expression, by enumeration (independent of the
    engine: a bug in the digit tree must not hide behind the same bug elsewhere)."""
    kind = type(expr)
    if kind is Literal:
        return {expr.data.decode("ascii")}
    if kind is CharSet:
        assert not expr.negated
        return {chr(c) for lo, hi in expr.ranges for c in range(lo, hi + 1)}
    if kind is Seq:
        out = {""}
        for item in expr.items:
            out = {a + b for a in out for b in spelled(item)}
        return out
    if kind is Choice:
        return set().union(*(spelled(item) for item in expr.items))
    if kind is Repeat:
        assert expr.min == expr.max
        out = {""}
        for _ in range(expr.min):
            out = {a + b for a in out for b in spelled(expr.item)}
        return out
    raise AssertionError(f"unexpected node {expr!r}")


def expected(ranges: list[tuple[int, int]], width: int, base: int) -> set[str]:
    out = set()
    for lo, hi in ranges:
        for value in range(lo, hi + 1):
            digits = []
            for _ in range(width):
                digits.append(DIGITS[value % base])
                value //= base
            text = "".join(reversed(digits))
            cases = [(c, c.upper()) if c.isalpha() else (c,) for c in text]
            out.update("".join(p) for p in product(*cases))
    return out


@st.composite
def range_sets(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int, int]:
    base = draw(st.sampled_from([10, 16]))
    width = draw(st.integers(1, 3))
    points = sorted(draw(st.sets(st.integers(0, base ** width), min_size=2, max_size=12)))
    pairs = [(points[i], points[i + 1] - 1) for i in range(0, len(points) - 1, 2)]
    return list(merge_ranges(p for p in pairs if p[0] <= p[1])), width, base


@settings(max_examples=300, deadline=None)
@given(range_sets())
def test_digit_tree_spells_exactly_the_values_in_range(case: tuple) -> None:
    ranges, width, base = case
    want = expected(ranges, width, base)
    got = set().union(*(spelled(fixed_width_range(lo, hi, width, base)) for lo, hi in ranges))
    assert got == want
    if base == 16 and width == 3 and ranges:  # the many-range tree used for \u escapes
        assert spelled(hex4_ranges([(lo + 0x1000, hi + 0x1000) for lo, hi in ranges])) == {
            "1" + s for s in want}


def test_negated_class_escapes_every_non_ascii_member_once() -> None:
    # [^@\s] restricted to the BMP below U+3100: the \u escapes are the members outside
    # printable ASCII, and nothing else.
    whitespace = [(9, 13), (32, 32), (160, 160), (5760, 5760), (8192, 8202), (8232, 8233),
                  (8239, 8239), (8287, 8287), (12288, 12288)]
    members = set(range(0x3100)) - {0x40} - {c for lo, hi in whitespace
                                             for c in range(lo, hi + 1)}
    ranges = merge_ranges((c, c) for c in sorted(members))
    forms = char_forms(ranges)
    escapes = next(item for item in forms.items if type(item) is Seq
                   and item.items[0] == Literal(b"\\"))
    u_escapes = {s[2:].lower() for s in spelled(escapes) if s.startswith("\\u")}
    want = {format(c, "04x") for c in members if not 0x20 <= c <= 0x7E}
    assert u_escapes == want
