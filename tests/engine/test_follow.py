"""FOLLOW bytes of call rules: what can come right after a rule returns, in any context.

They bound which tokens a per-position verdict must hand to the exact walk from the whole
parser state, so a set too small would refuse good tokens (the matcher fuzz tests catch that
end to end); these pin the sets on grammars whose FOLLOW is known by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from formcast.engine.follow import follow_bytes
from formcast.engine.nfa import build_nfa
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
