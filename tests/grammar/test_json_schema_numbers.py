"""Numeric bounds and multipleOf as digit automata, checked against exact decimal arithmetic."""

from __future__ import annotations

import re
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from formcast.grammar import charfa
from formcast.grammar.digit_ranges import interval_expr
from formcast.grammar.json_numbers import number_dfa, number_expr

CANONICAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")

bounds = st.one_of(st.none(), st.decimals(min_value=-1000, max_value=1000, places=2,
                                          allow_nan=False, allow_infinity=False))
spellings = st.one_of(
    st.integers(-2000, 2000).map(str),
    st.decimals(min_value=-2000, max_value=2000, places=3, allow_nan=False,
                allow_infinity=False).map(lambda d: format(d, "f")),
    st.sampled_from(["-0", "0.0", "-0.0", "00", "1.", ".5", "1e3", "--1", "", "12.50"]),
)


def expected(text: str, integer: bool, low, low_x, high, high_x, multiples) -> bool:
    if not CANONICAL.fullmatch(text):
        return False
    value = Decimal(text)
    if text.startswith("-") and value == 0:
        return False  # -0 spellings: zero keeps its unsigned spelling
    if integer and "." in text:
        return False  # integers are spelled without fraction
    if low is not None and (value < low or (low_x and value == low)):
        return False
    if high is not None and (value > high or (high_x and value == high)):
        return False
    return all(value % m == 0 for m in multiples)


@settings(max_examples=60, deadline=None)
@given(integer=st.booleans(), low=bounds, low_x=st.booleans(), high=bounds,
       high_x=st.booleans(),
       multiples=st.lists(st.sampled_from([Decimal(3), Decimal("0.5"), Decimal("0.01"),
                                           Decimal(7), Decimal("2.5")]), max_size=2),
       texts=st.lists(spellings, min_size=20, max_size=40))
def test_number_automaton_matches_decimal_arithmetic(integer, low, low_x, high, high_x,
                                                     multiples, texts) -> None:
    dfa = number_dfa(integer=integer, low=low, low_exclusive=low_x, high=high,
                     high_exclusive=high_x, multiples=multiples)
    probes = list(texts)
    for b in (low, high):
        if b is not None:  # the bounds themselves and their neighbours are the edge cases
            probes += [format(b, "f"), format(b + Decimal("0.001"), "f"),
                       format(b - Decimal("0.001"), "f"), str(int(b))]
    for text in probes:
        want = expected(text, integer, low, low_x, high, high_x, multiples)
        assert dfa.accepts(text) == want, (text, integer, low, low_x, high, high_x, multiples)


def test_huge_bounds_stay_small() -> None:
    dfa = number_dfa(integer=True, low=Decimal(0), low_exclusive=False,
                     high=Decimal(10) ** 300, high_exclusive=False, multiples=[])
    assert dfa.accepts("9" * 300) and dfa.accepts("1" + "0" * 300)
    assert not dfa.accepts("1" + "0" * 299 + "1")
    assert dfa.size < 2 * 302  # linear in the number of digits


integral_bounds = st.one_of(st.none(), st.integers(-10**6, 10**6).map(Decimal),
                            st.sampled_from([Decimal(0), Decimal(1), Decimal(-1), Decimal(9),
                                             Decimal(10), Decimal(99), Decimal(10) ** 18]))


@settings(max_examples=150, deadline=None)
@given(integer=st.booleans(), low=integral_bounds, low_x=st.booleans(), high=integral_bounds,
       high_x=st.booleans())
def test_integral_bounds_are_spelled_with_the_automaton_language(integer, low, low_x, high,
                                                                 high_x) -> None:
    """Integral bounds skip the automaton (``digit_ranges``): the language must not move."""
    direct = interval_expr(integer=integer, low=low, low_exclusive=low_x, high=high,
                           high_exclusive=high_x)
    assert direct is not None
    spelled = charfa.minimize(charfa.from_expr(direct))
    automaton = number_dfa(integer=integer, low=low, low_exclusive=low_x, high=high,
                           high_exclusive=high_x, multiples=[])
    assert charfa.difference(spelled, automaton).is_empty(), "spells a value out of bounds"
    assert charfa.difference(automaton, spelled).is_empty(), "misses a value in bounds"


def test_fractional_and_huge_bounds_keep_the_automaton() -> None:
    assert interval_expr(integer=False, low=Decimal("0.5"), low_exclusive=False, high=None,
                         high_exclusive=False) is None
    # The automaton caps its size; spelled here, 1e9999 would be ten thousand digit ranges.
    assert interval_expr(integer=True, low=None, low_exclusive=False, high=Decimal(10) ** 45,
                         high_exclusive=False) is None
    expr = number_expr(integer=False, low=Decimal("0.5"), high=Decimal(2))
    assert charfa.from_expr(expr).accepts("0.5") and not charfa.from_expr(expr).accepts("0.49")
