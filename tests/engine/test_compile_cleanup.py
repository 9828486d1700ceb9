"""Compiling a grammar's automaton: rules that can never finish stay out of every mask, and the
compile leaves no reference cycles behind (a server compiling many schemas would otherwise hold
each NFA builder until the cyclic collector next ran)."""

from __future__ import annotations

import gc
import json
from collections import Counter
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
def test_automaton_compile_leaves_no_builder_cycles(path: Path) -> None:
    grammar = Grammar.from_json_schema(json.loads(path.read_text()), strict=False, cache=None)
    was_enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        automaton = compile_automaton(grammar)
        assert automaton.n_states
        del automaton
        gc.collect()
        kinds = Counter(type(obj).__name__ for obj in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    assert "_Builder" not in kinds and "partial" not in kinds, kinds.most_common(8)
