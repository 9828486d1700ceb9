"""FOLLOW bytes of call rules: what can come right after a rule returns, in any context.

They bound which tokens a per-position verdict must hand to the exact walk from the whole
parser state, so a set too small would refuse good tokens (the matcher fuzz tests catch that
end to end); these pin the sets on grammars whose FOLLOW is known by hand.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest
from benchmark_grammars import GRAMMAR_PATHS, load_grammar
from hypothesis import given
from test_matcher_fuzz import fuzz_settings, grammars

from formcast.engine import follow
from formcast.engine.follow import follow_bytes
from formcast.engine.nfa import build_nfa
from formcast.errors import GrammarError
from formcast.grammar.ir import Grammar

GRAMMARS = Path(__file__).resolve().parents[2] / "benchmarks" / "grammars"


def _follow(text: str) -> dict[str, bytes]:
    nfa, fragments, order, live = build_nfa(Grammar.from_gbnf(text))
    table = follow_bytes(nfa, fragments, order, live)
    return {name: bytes(np.flatnonzero(table[r]).astype(np.uint8).tolist())
            for r, name in enumerate(order)}


def test_a_json_value_is_followed_by_a_comma_or_a_closing_bracket():
    follow = _follow((GRAMMARS / "json" / "json.gbnf").read_text())
    assert follow["value"] == b",]}"  # its trailing whitespace is inside the rule
    assert follow["root"] == b""  # nothing follows the document


def test_a_rule_ending_its_caller_inherits_the_callers_follow():
    # r ends s, so whatever follows s follows r too; "<" r ">" adds ">".
    follow = _follow('root ::= s ";" | "{" s "}"\n'
                     's ::= "s" r | "(" s ")"\n'
                     'r ::= "r" | "[" s "]" | "<" r ">"')
    assert follow["s"] == b");]}"
    assert follow["r"] == b");>]}"


def test_a_nullable_tail_adds_its_first_bytes_and_passes_the_rest_on():
    # after r comes o = "-"*, which may be empty: "-" or what follows s.
    follow = _follow('root ::= s ";" | "{" s "}"\n'
                     's ::= "s" r o | "(" s ")"\n'
                     'o ::= "-"*\n'
                     'r ::= "r" | "[" s "]" | "<" r ">"')
    assert follow["r"] == b")-;>]}"


def test_copies_of_an_inlined_rule_add_what_follows_each_copy():
    # e (not recursive) is inlined twice: once at the top, then copied into "[" e "]". The
    # call to f inside the copy is followed by "]", which only the copy's context shows.
    follow = _follow('root ::= e "!" | "[" e "]"\n'
                     'e ::= f ("+" f)*\n'
                     'f ::= "x" | "-" f')
    assert follow["f"] == b"!+]"


def test_arithmetic_calls_close_with_a_bracket_or_a_comma(smollm2_vocab):
    """The benchmark found this: after ``max(abs(x_min - 3.75`` the token ``),`` was refused
    by the mask but accepted by the matcher, because FOLLOW(factor) had missed the ``)`` and
    ``,`` that follow the copies of ``expr`` inside calls and brackets."""
    from formcast.engine.matcher import Matcher

    follow = _follow((GRAMMARS / "gbnf" / "arithmetic.gbnf").read_text())
    assert follow["factor"] == b" %)*+,-/"
    grammar = Grammar.from_gbnf((GRAMMARS / "gbnf" / "arithmetic.gbnf").read_text())
    closing = [t for t in range(smollm2_vocab.size) if smollm2_vocab.token_bytes[t] in (b"),", b"))")]
    for text in (b"max(abs(x_min - 3.75", b"max(abs(x_max + 12", b"((1 + rate / 12) ^ months - 1"):
        m = Matcher(grammar, smollm2_vocab)
        assert m.accept_bytes(text)
        mask = m.next_token_mask()
        for t in closing:
            assert mask[t] == m.copy().accept_token(t), (text, smollm2_vocab.token_bytes[t])


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_nullable_call_passes_on_to_what_follows_it(native):
    # p and q are recursive, so they stay calls, and both may match nothing: after p in
    # root comes q's "<" or, q being empty, "!".
    grammar = Grammar.from_gbnf('root ::= p q "!"\n'
                                'p ::= "(" p ")" | ""\n'
                                'q ::= "<" q ">" | ""')
    nfa, fragments, order, live = build_nfa(grammar)
    nfa.native_paste = native and follow._nfa_build is not None
    table = follow_bytes(nfa, fragments, order, live)
    got = {name: bytes(np.flatnonzero(table[r]).astype(np.uint8).tolist())
           for r, name in enumerate(order)}
    assert got["p"] == b"!)<"
    assert got["q"] == b"!>"


needs_native = pytest.mark.skipif(
    follow._nfa_build is None or bool(os.environ.get("FORMCAST_PURE_PYTHON")),
    reason="the C extension is not built, or FORMCAST_PURE_PYTHON switches it off")


def _assert_c_and_python_follow_agree(grammar: Grammar) -> None:
    nfa, fragments, order, live = build_nfa(grammar)
    native = follow_bytes(nfa, fragments, order, live)
    nfa.native_paste = False  # the Python reference
    assert np.array_equal(follow_bytes(nfa, fragments, order, live), native)


@needs_native
@fuzz_settings(150)
@given(grammar=grammars())
def test_c_and_python_follow_sets_agree_on_random_grammars(grammar):
    """Lazily copied repetitions, nullable rules, dead states and calls between rules."""
    with contextlib.suppress(GrammarError):
        _assert_c_and_python_follow_agree(grammar)


@needs_native
@pytest.mark.parametrize("path", GRAMMAR_PATHS, ids=lambda p: p.name)
def test_c_and_python_follow_sets_agree_on_benchmark_grammars(path):
    _assert_c_and_python_follow_agree(load_grammar(path))
