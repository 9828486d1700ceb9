"""The reference recognizer, checked against Python's regex engines and hand-made grammars.

Random regexes are rendered twice from one tree: once in the JSON Schema (ECMA) dialect for
``regex_to_expr`` and once in an equivalent Python spelling (``.`` and ``$`` differ), so a
disagreement is a bug in the recognizer or in the regex front end, never in the translation.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from formcast.grammar.ir import (
    ByteSet,
    Choice,
    Grammar,
    Literal,
    Repeat,
    byte_set,
    chars,
    choice,
    lit,
    opt,
    plus,
    ref,
    repeat,
    seq,
    star,
)
from formcast.grammar.recognize import recognizes
from formcast.grammar.regex import regex_to_expr

ALPHABET = "ab0 -.é😀\n"

# ----------------------------------------------------------------------------- random regexes
# A strategy yields (ecma_pattern, python_pattern) pairs.

_CHAR_ATOMS = st.sampled_from([
    ("a", "a"), ("b", "b"), ("0", "0"), (" ", " "), ("é", "é"), ("😀", "😀"),
    (r"\.", r"\."), (r"\-", r"\-"), (r"\n", r"\n"), (r"\u00e9", "é"), (r"\u{1F600}", "😀"),
    (r"\uD83D\uDE00", "😀"), (r"\x61", "a"),
    (".", "[^\\n\\r\\u2028\\u2029]"),
    (r"\d", r"\d"), (r"\w", r"\w"), (r"\s", r"\s"), (r"\D", r"\D"), (r"\W", r"\W"), (r"\S", r"\S"),
])
_CLASS_ITEMS = st.sampled_from(["a", "b", "a-c", "0-9", r"\d", r"\w", r"\s", "é", "😀", r"\-",
                                " ", r"\n", "à-ÿ", "\U0001F600-\U0001F64F", r"\."])


@st.composite
def _char_class(draw: st.DrawFn) -> tuple[str, str]:
    items = draw(st.lists(_CLASS_ITEMS, min_size=1, max_size=4))
    neg = "^" if draw(st.booleans()) else ""
    text = f"[{neg}{''.join(items)}]"
    return text, text


def _quantified(inner: st.SearchStrategy[tuple[str, str]]) -> st.SearchStrategy[tuple[str, str]]:
    quant = st.sampled_from(["*", "+", "?", "{2}", "{1,}", "{0,2}", "{1,3}", "*?", "+?", "??"])
    return st.tuples(inner, quant).map(
        lambda t: (f"(?:{t[0][0]}){t[1]}", f"(?:{t[0][1]}){t[1]}"))


def _joined(parts: list[tuple[str, str]], sep: str) -> tuple[str, str]:
    return sep.join(p[0] for p in parts), sep.join(p[1] for p in parts)


def _number_groups(pair: tuple[str, str]) -> tuple[str, str]:
    """Python refuses duplicate group names, so give each named group its own."""
    def renumber(text: str, opener: str) -> str:
        parts = text.split(opener)
        return parts[0] + "".join(f"{opener[:-1]}{i}>{part}" for i, part in enumerate(parts[1:]))
    return renumber(pair[0], "(?<g>"), renumber(pair[1], "(?P<g>")


_REGEX = st.recursive(
    st.one_of(_CHAR_ATOMS, _char_class()),
    lambda inner: st.one_of(
        _quantified(inner),
        st.lists(inner, min_size=2, max_size=3).map(lambda ps: _joined(ps, "")),
        st.lists(inner, min_size=2, max_size=3).map(lambda ps: _joined(ps, "|")),
        inner.map(lambda p: (f"({p[0]})", f"({p[1]})")),
        inner.map(lambda p: (f"(?<g>{p[0]})", f"(?P<g>{p[1]})")),
    ),
    max_leaves=8,
).map(_number_groups)


@st.composite
def _anchored(draw: st.DrawFn) -> tuple[str, str]:
    ecma, py = draw(_REGEX)
    if draw(st.booleans()):
        ecma, py = "^" + ecma, "^" + py
    if draw(st.booleans()):
        ecma, py = ecma + "$", py + r"\Z"
    return ecma, py


def _python(py: str) -> re.Pattern[str]:
    return re.compile(py, re.ASCII)  # ASCII \d \w \s, as ECMA; the alphabet has no other spaces


_SETTINGS = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@_SETTINGS
@given(_REGEX, st.lists(st.text(ALPHABET, max_size=6), min_size=1, max_size=6), st.data())
def test_full_match_agrees_with_python(pattern: tuple[str, str], texts: list[str],
                                       data: st.DataObject) -> None:
    ecma, py = pattern
    compiled = _python(py)
    grammar = Grammar({"root": regex_to_expr(ecma)})
    # Positives from the same alphabet: outside it ECMA and Python (re.ASCII) disagree on \s.
    texts = texts + [data.draw(st.from_regex(compiled, fullmatch=True, alphabet=ALPHABET),
                               label="positive")]
    for text in texts:
        expected = compiled.fullmatch(text) is not None
        assert recognizes(grammar, text.encode()) == expected, (ecma, text)


@_SETTINGS
@given(_anchored(), st.lists(st.text(ALPHABET, max_size=6), min_size=1, max_size=5))
def test_search_mode_agrees_with_python_search(pattern: tuple[str, str], texts: list[str]) -> None:
    ecma, py = pattern
    compiled = _python(py)
    grammar = Grammar({"root": regex_to_expr(ecma, search=True)})
    for text in texts:
        assert recognizes(grammar, text.encode()) == (compiled.search(text) is not None), (ecma, text)


@_SETTINGS
@given(_REGEX, st.data())
def test_every_byte_prefix_of_a_match_is_a_viable_prefix(pattern: tuple[str, str],
                                                         data: st.DataObject) -> None:
    ecma, py = pattern
    grammar = Grammar({"root": regex_to_expr(ecma)})
    # Drawn from the test alphabet: beyond it ECMA and Python (re.ASCII) disagree on \s.
    encoded = data.draw(st.from_regex(_python(py), fullmatch=True, alphabet=ALPHABET)).encode()
    for cut in range(len(encoded) + 1):
        assert recognizes(grammar, encoded[:cut], prefix=True), (ecma, encoded[:cut])


@_SETTINGS
@given(_REGEX, st.lists(st.text(ALPHABET, max_size=5), min_size=1, max_size=6))
@example(pattern=(r"((?<g0>aa|[^a]|[^\-]))", r"((?P<g0>aa|[^a]|[^\-]))"), texts=["-"])
def test_prefix_mode_agrees_with_partial_matching(pattern: tuple[str, str], texts: list[str]) -> None:
    regex = pytest.importorskip("regex")
    ecma, py = pattern
    full = _python(py)
    # Laziness changes which match is found, never the language. The oracle is made greedy:
    # regex 2026.11.19 reports a partial match of "a0" for "(?:a)*?a" (none for "(?:a)*a").
    for lazy in (")*?", ")+?", ")??"):
        py = py.replace(lazy, lazy[:-1])
    compiled = regex.compile(py, regex.ASCII)
    grammar = Grammar({"root": regex_to_expr(ecma)})
    for text in texts:
        # A full match is a viable prefix too. Asked through re as well: regex 2026.11.19
        # finds no match at all of "-" for "[^a]|[^\-]" (partial or not).
        expected = (full.fullmatch(text) is not None
                    or compiled.fullmatch(text, partial=True) is not None)
        assert recognizes(grammar, text.encode(), prefix=True) == expected, (ecma, text)


# ----------------------------------------------------------------------------- hand-made grammars


def _json_grammar() -> Grammar:
    ws = regex_to_expr(r"[ \t\n\r]*")
    comma_list = lambda item: opt(seq(item, star(seq(ws, lit(","), ws, item))))  # noqa: E731
    return Grammar({
        "root": seq(ws, ref("value"), ws),
        "value": choice(ref("object"), ref("array"), ref("string"), ref("number"),
                        lit("true"), lit("false"), lit("null")),
        "object": seq(lit("{"), ws, comma_list(ref("member")), ws, lit("}")),
        "member": seq(ref("string"), ws, lit(":"), ws, ref("value")),
        "array": seq(lit("["), ws, comma_list(ref("value")), ws, lit("]")),
        "string": regex_to_expr(r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'),
        "number": regex_to_expr(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?"),
    })


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(JSON_VALUES, st.booleans(), st.booleans())
def test_json_grammar_accepts_json_dumps_and_its_prefixes(value: object, ascii_only: bool,
                                                          pretty: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=2 if pretty else None).encode()
    grammar = _json_grammar()
    assert recognizes(grammar, text)
    assert all(recognizes(grammar, text[:cut], prefix=True) for cut in range(0, len(text), 7))


@pytest.mark.parametrize("text", [b"{", b"[1,", b'{"a":', b"tru", b'"\\u00', b"-"])
def test_json_grammar_incomplete_documents_are_prefixes_only(text: bytes) -> None:
    grammar = _json_grammar()
    assert recognizes(grammar, text, prefix=True)
    assert not recognizes(grammar, text)


@pytest.mark.parametrize("text", [b"{,}", b"[1,]", b"01", b'"a\nb"', b"nul l", b"}", b"\xff"])
def test_json_grammar_rejects_non_json_even_as_prefix(text: bytes) -> None:
    assert not recognizes(_json_grammar(), text, prefix=True)


def test_left_recursion_and_ambiguity() -> None:
    grammar = Grammar({
        "root": ref("expr"),
        "expr": choice(seq(ref("expr"), lit("+"), ref("expr")), ref("atom")),  # ambiguous
        "atom": choice(lit("x"), seq(lit("("), ref("expr"), lit(")"))),
    })
    assert recognizes(grammar, b"x+x+(x+x)+x")
    assert recognizes(grammar, b"((x+x)+", prefix=True)
    assert not recognizes(grammar, b"x+")
    assert not recognizes(grammar, b"x++x", prefix=True)


def test_nullable_rules_and_indirect_left_recursion() -> None:
    grammar = Grammar({
        "root": seq(ref("a"), lit("!")),
        "a": choice(seq(ref("b"), lit("a")), lit("")),
        "b": seq(ref("c"), ref("a")),
        "c": opt(lit("c")),
    })
    # Independently: a = "" | ("c" | "") a "a", enumerated up to 6 characters.
    lang_a = {""}
    for _ in range(6):
        lang_a |= {x + w + "a" for x in ("", "c") for w in lang_a if len(x + w) < 6}
    all_strings = [""]
    for _ in range(6):
        all_strings += [s + c for s in all_strings if len(s) == len(all_strings[-1]) for c in "ac"]
    for text in set(all_strings):
        expected = text in lang_a
        assert recognizes(grammar, (text + "!").encode()) == expected, text


def test_bounded_and_unbounded_repeats() -> None:
    grammar = Grammar({"root": seq(repeat(lit("ab"), 2, 4), repeat(lit("c"), 3, None))})
    assert recognizes(grammar, b"ababccc")
    assert recognizes(grammar, b"ababababcccccccc")
    assert not recognizes(grammar, b"abababababccc")
    assert not recognizes(grammar, b"ababcc")
    assert recognizes(grammar, b"ababcc", prefix=True)
    assert not recognizes(grammar, b"ababababa" + b"b" + b"a", prefix=True)


def test_byte_sets_can_match_bytes_that_are_not_utf8() -> None:
    grammar = Grammar({"root": plus(byte_set([(0x80, 0xFF)]))})
    assert recognizes(grammar, b"\xff\x80")
    assert not recognizes(grammar, b"a")


def test_charsets_match_whole_utf8_characters_only() -> None:
    grammar = Grammar({"root": chars([(0x80, 0x10FFFF)])})
    assert recognizes(grammar, "é".encode())
    assert recognizes(grammar, "😀".encode())
    assert recognizes(grammar, "😀".encode()[:2], prefix=True)
    assert not recognizes(grammar, "😀".encode()[:2])
    assert not recognizes(grammar, b"\xed\xa0\x80")  # an encoded surrogate is not UTF-8
    assert not recognizes(grammar, b"\xc0\x80", prefix=True)  # overlong encoding


def test_unproductive_parts_are_never_viable() -> None:
    dead = Grammar({"root": choice(seq(lit("a"), Choice(())), lit("b")),
                    "loop": seq(lit("x"), ref("loop"))})
    assert not recognizes(dead, b"a", prefix=True)
    assert recognizes(dead, b"b")
    never = Grammar({"root": seq(lit("x"), ref("loop")), "loop": seq(lit("x"), ref("loop"))})
    assert not recognizes(never, b"", prefix=True)
    assert not recognizes(Grammar({"root": ByteSet(())}), b"", prefix=True)


def test_empty_language_and_empty_string() -> None:
    assert recognizes(Grammar({"root": lit("")}), b"")
    assert not recognizes(Grammar({"root": lit("")}), b"a", prefix=True)
    assert recognizes(Grammar({"root": Repeat(Literal(b"a"), 0, None)}), b"")


def test_a_hundred_rule_grammar_on_a_long_input() -> None:
    rules = dict(_json_grammar().rules)
    for i in range(100):  # many rules, most of them unreachable or rarely used
        rules[f"extra{i}"] = seq(lit(f"<{i}>"), ref("value"), opt(ref(f"extra{(i + 1) % 100}")))
    rules["value"] = choice(rules["value"], ref("extra0"))
    grammar = Grammar(rules)
    doc = json.dumps({"name": "Zoë" * 20, "items": [1, 2.5, -3e10, {"a": [True, None]}] * 6},
                     ensure_ascii=False).encode()
    assert len(doc) > 300
    assert recognizes(grammar, doc)
    assert recognizes(grammar, b"<0>1<1>[2]<2>{}")
    assert not recognizes(grammar, doc[:-1] + b"!", prefix=True)
