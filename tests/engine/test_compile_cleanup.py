"""Compiling a grammar's automaton: rules that can never finish stay out of every mask, and the
compile leaves no reference cycles behind (a server compiling many schemas would otherwise hold
each NFA builder until the cyclic collector next ran)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from formcast.engine.lexer import compile_automaton
from formcast.engine.matcher import Matcher
from formcast.grammar.ir import Grammar, choice, lit, ref, seq

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = sorted(ROOT.glob("benchmarks/grammars/schema/*.schema.json"))


def test_recursion_without_an_exit_is_refused(smollm2_vocab) -> None:
    # "b" leads into a rule that calls itself forever: no string starting with "b" ends.
    grammar = Grammar({"root": choice(lit("a"), seq(lit("b"), ref("loop"))),
                       "loop": seq(lit("c"), ref("loop"))})
    m = Matcher(grammar, smollm2_vocab)
    assert not m.accept_bytes(b"b")
    assert m.accept_bytes(b"a") and m.is_accepting()


def test_acyclic_rules_all_derive(smollm2_vocab) -> None:
    # No rule refers to itself: every NFA state is live, and a rule used twice is inlined twice.
    grammar = Grammar({"root": seq(ref("word"), lit("-"), ref("word")),
                       "word": choice(lit("ab"), lit("cd"))})
    m = Matcher(grammar, smollm2_vocab)
    assert m.accept_bytes(b"ab-cd") and m.is_accepting()
    assert not Matcher(grammar, smollm2_vocab).accept_bytes(b"ab-x")


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.name.split(".")[0] for p in SCHEMAS])
def test_automaton_compile_leaves_no_builder_cycles(path: Path, cyclic_leftovers) -> None:
    grammar = Grammar.from_json_schema(json.loads(path.read_text()), strict=False, cache=None)

    def compile_and_drop() -> None:
        assert compile_automaton(grammar).n_states

    kinds = cyclic_leftovers(compile_and_drop)
    assert "_Builder" not in kinds and "partial" not in kinds, kinds.most_common(8)
