"""regex_to_expr: the IR it builds, and the errors it gives for what it cannot or will not do."""

from __future__ import annotations

import pytest

from formcast.errors import GrammarError, RegexSyntaxError, UnsupportedRegexError
from formcast.grammar.ir import NOTHING, CharSet, Grammar, Literal, Repeat, lit
from formcast.grammar.regex import regex_to_expr


def test_literals_merge_into_utf8_bytes() -> None:
    assert regex_to_expr("héllo") == Literal("héllo".encode())


@pytest.mark.parametrize(("pattern", "text"), [
    (r"\n\t\r\f\v", "\n\t\r\f\v"),
    (r"\\\/\.\-\*", "\\/.-*"),
    (r"\x41\u00e9\u{1F600}", "Aé😀"),
    (r"\uD83D\uDE00", "😀"),
    (r"\0\cJ", "\0\n"),
    (r"a{,3}", "a{,3}"),
    (r"}]", "}]"),
])
def test_escapes_and_annex_b_literals(pattern: str, text: str) -> None:
    assert regex_to_expr(pattern) == lit(text)


def test_bounded_repeats_stay_repeats() -> None:
    assert regex_to_expr(r"\d{2,400}") == Repeat(CharSet(((0x30, 0x39),)), 2, 400)
    assert regex_to_expr("a{3}") == Repeat(Literal(b"a"), 3, 3)
    assert regex_to_expr("a{3,}?") == Repeat(Literal(b"a"), 3, None)


def test_anchors_disappear_in_full_match_mode() -> None:
    assert regex_to_expr("^abc$") == regex_to_expr("abc")
    assert regex_to_expr("a^b") == NOTHING


def test_empty_classes() -> None:
    assert regex_to_expr("[]") == NOTHING
    any_char = regex_to_expr("[^]")
    assert isinstance(any_char, CharSet)
    assert any_char.codepoint_ranges() == ((0, 0xD7FF), (0xE000, 0x10FFFF))


def test_grammar_from_regex_is_a_full_match_grammar() -> None:
    assert Grammar.from_regex("ab+").rules["root"] == regex_to_expr("ab+")


@pytest.mark.parametrize(("pattern", "column", "fragment"), [
    ("ab(?=c)", 3, "lookahead"),
    ("(?!x)", 1, "negative lookahead"),
    ("a(?<=b)", 2, "lookbehind"),
    ("(?<!b)", 1, "negative lookbehind"),
    (r"(a)\1", 4, "backreference"),
    (r"(?<n>a)\k<n>", 8, "backreference"),
    (r"a\bc", 2, "word-boundary"),
    (r"\p{L}", 1, "property"),
    ("(?i)abc", 1, "flags"),
    ("(^a)*", 1, "anchor"),
])
def test_unsupported_features_name_the_column(pattern: str, column: int, fragment: str) -> None:
    with pytest.raises(UnsupportedRegexError) as info:
        regex_to_expr(pattern)
    assert info.value.line == 1
    assert info.value.column == column
    assert fragment in str(info.value)
    assert isinstance(info.value, GrammarError)


@pytest.mark.parametrize(("pattern", "column"), [
    ("(ab", 1), ("ab)", 3), ("[ab", 1), ("*a", 1), ("a**", 3), ("a|+", 3),
    (r"\q", 1), ("[z-a]", 3), ("a{3,2}", 2), ("ab\\", 3), (r"\x4", 1), (r"\u{110000}", 1),
    ("(?<1x>a)", 4), ("^*", 2),
])
def test_syntax_errors_name_the_column(pattern: str, column: int) -> None:
    with pytest.raises(RegexSyntaxError) as info:
        regex_to_expr(pattern)
    assert (info.value.line, info.value.column) == (1, column)
    assert pattern in str(info.value)  # the source line is shown under the message
