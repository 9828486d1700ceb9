"""regex_to_expr: the IR it builds, and the errors it gives for what it cannot or will not do."""

from __future__ import annotations

import pytest

from formcast.errors import GrammarError, RegexSyntaxError, UnsupportedRegexError
from formcast.grammar.ir import NOTHING, CharSet, Grammar, Literal, Repeat, Seq, lit
from formcast.grammar.recognize import recognizes
from formcast.grammar.regex import regex_to_expr


def test_literals_merge_into_utf8_bytes() -> None:
    assert regex_to_expr("héllo") == Literal("héllo".encode())


@pytest.mark.parametrize(("pattern", "text"), [
    (r"\n\t\r\f\v", "\n\t\r\f\v"),
    (r"\\\/\.\-\*", "\\/.-*"),
    (r"\_\é\ ", "_é "),
    (r"\x41\u00e9\u{1F600}", "Aé😀"),
    (r"\uD83D\uDE00", "😀"),
    (r"\0\cJ", "\0\n"),
    (r"a{,3}", "a{,3}"),
    (r"}]", "}]"),
])
def test_escapes_and_annex_b_literals(pattern: str, text: str) -> None:
    assert regex_to_expr(pattern) == lit(text)


def test_long_patterns_build_flat_sequences() -> None:
    expr = regex_to_expr("^" + "[a-z]" * 3000 + "$")
    assert isinstance(expr, Seq) and len(expr.items) == 3000


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
    (r"x\uD83D", 2, "surrogate"),
    (r"\uD83D[\uDE00-\uDE4F]+", 1, "surrogate"),  # '+' would repeat half a character
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


# ----------------------------------------------------------------------------- languages
# Where ECMA-262 (JSON Schema's dialect) and Python's re differ, the ECMA answer is checked here;
# agreement with Python elsewhere is checked by hypothesis in test_recognize.py.


def _full(pattern: str, text: str) -> bool:
    return recognizes(Grammar({"root": regex_to_expr(pattern)}), text.encode())


def _search(pattern: str, text: str) -> bool:
    return recognizes(Grammar({"root": regex_to_expr(pattern, search=True)}), text.encode())


@pytest.mark.parametrize(("pattern", "text", "expected"), [
    (".", "\r", False), (".", "\u2028", False), (".", "\n", False), (".", "😀", True),
    (r"\s", "\u00a0", True), (r"\s", "\ufeff", True), (r"\s", "\x1c", False),
    (r"\d", "٣", False), (r"\w", "é", False), (r"\W", "é", True),
    ("a$", "a\n", False), ("[^]", "\n", True), ("[]", "", False),
    (r"[\d-z]", "-", True), (r"[\d-z]", "y", False), (r"[\b]", "\b", True),
    (r"[^\D]", "5", True), (r"[^\D]", "x", False),
    ("a{,2}", "a{,2}", True), ("a{,2}", "aa", False),
    ("(?<year>\\d{4})-(?:0[1-9]|1[0-2])", "2024-12", True),
    (r"^\uD83D[\uDE00-\uDE4F]$", "😀", True),
    (r"[\u{1F600}-\u{1F64F}]+", "😀🙏", True),
])
def test_ecma_semantics(pattern: str, text: str, expected: bool) -> None:
    assert _full(pattern, text) is expected


@pytest.mark.parametrize(("pattern", "text", "expected"), [
    ("b", "abc", True), ("b", "ac", False), ("b", "a\nb\n", True),
    ("^a", "abc", True), ("^a", "bac", False),
    ("c$", "abc", True), ("c$", "abc\n", False),
    ("^b$", "b", True), ("^b$", "bb", False),
    ("^a|c$", "axx", True), ("^a|c$", "xxc", True), ("^a|c$", "xax", False),
    ("(^a|b)c", "xbc", True), ("(^a|b)c", "xac", False), ("(^a|b)c", "acx", True),
    ("a?^b", "bx", True), ("x^b", "xb", False),
    ("^[a-z]+$", "", False), ("", "anything", True), ("^$", "", True), ("^$", "x", False),
])
def test_search_mode_is_json_schema_pattern(pattern: str, text: str, expected: bool) -> None:
    assert _search(pattern, text) is expected
