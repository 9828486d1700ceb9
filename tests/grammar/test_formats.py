"""The shortcuts that make the first date-time compile cheap give exactly what the plain IR
constructors and a full JSON-spelling walk give."""

from __future__ import annotations

import pytest

from formcast.grammar.formats import FORMATS, format_expr, leap_seconds
from formcast.grammar.ir import Expr, Grammar, Ref, chars, choice, lit, opt, plus, seq
from formcast.grammar.json_strings import format_body, json_spelled
from formcast.grammar.json_text import QUOTE, char_forms, union
from formcast.grammar.recognize import recognizes


def _leap_table_by_constructors() -> Expr:
    frac = opt(seq(lit("."), plus(chars([("0", "9")]))))
    alts = []
    for local in range(24 * 60):
        diff = (local - (23 * 60 + 59)) % (24 * 60)
        if diff == 0:
            offsets = [chars("Zz"), lit("+00:00"), lit("-00:00")]
        else:
            neg = 24 * 60 - diff
            offsets = [lit(f"+{diff // 60:02d}:{diff % 60:02d}"),
                       lit(f"-{neg // 60:02d}:{neg % 60:02d}")]
        alts.append(seq(lit(f"{local // 60:02d}:{local % 60:02d}:60"), frac, choice(*offsets)))
    return union(alts)


def _label(ranges: tuple[tuple[int, int], ...]) -> Expr:
    return char_forms(ranges, Ref("unicode-escape"))


def test_leap_second_table_is_what_the_constructors_build() -> None:
    assert leap_seconds() == _leap_table_by_constructors()


def test_leap_second_table_spells_as_itself() -> None:
    assert json_spelled(leap_seconds(), _label) == leap_seconds()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_format_bodies_equal_a_full_spelling_walk(name: str) -> None:
    expr = format_expr(name)
    assert expr is not None
    assert format_body(name) == seq(QUOTE, json_spelled(expr, _label), QUOTE)


def test_leap_seconds_only_at_23_59_utc() -> None:
    grammar = Grammar({"root": format_expr("time")})
    assert recognizes(grammar, b"23:59:60Z")
    assert recognizes(grammar, b"15:59:60.5-08:00")
    assert not recognizes(grammar, b"15:59:60Z")
    assert not recognizes(grammar, b"23:59:60+01:00")
