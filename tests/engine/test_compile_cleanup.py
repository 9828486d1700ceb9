"""Compiling a grammar's automaton: rules that can never finish stay out of every mask, and the
compile leaves no reference cycles behind (a server compiling many schemas would otherwise hold
each NFA builder until the cyclic collector next ran)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from formcast.engine.lexer import compile_automaton
from formcast.engine.matcher import CompiledGrammar, Matcher
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


def _first_sample(path: Path) -> bytes:
    """The first sample of the grammar's samples file (see benchmarks/grammars/README.md)."""
    text = path.with_name(path.name.split(".")[0] + ".samples.txt").read_text()
    lines = [line for line in text.split("\n") if not line.startswith("%% ")]
    return "\n".join(lines[:lines.index("%%")]).encode()


def _grammar(path: Path) -> Grammar:
    if path.suffix == ".gbnf":
        return Grammar.from_gbnf(path.read_text())
    return Grammar.from_json_schema(json.loads(path.read_text()), strict=False, cache=None)


# Every benchmark schema, and a grammar with lazy repetitions inside lazy repetitions.
CYCLE_CASES = SCHEMAS + [ROOT / "benchmarks/grammars/gbnf/checklist.gbnf"]


@pytest.mark.parametrize("path", CYCLE_CASES, ids=[p.name.split(".")[0] for p in CYCLE_CASES])
def test_compiled_grammar_leaves_no_cycles(path: Path, smollm2_vocab, cyclic_leftovers) -> None:
    # Compiled and used through a whole sample (so lazily copied repetitions are pasted),
    # then dropped: nothing may wait for the cyclic collector. The NFA and its lazy
    # repetitions referred to each other, so each compile left its whole NFA (thousands of
    # edge containers) behind until the next full collection.
    grammar = _grammar(path)
    sample = _first_sample(path)

    def compile_and_drop() -> None:
        assert compile_automaton(grammar).n_states
        matcher = Matcher(grammar, smollm2_vocab)
        matcher.next_token_mask()
        assert matcher.accept_bytes(sample) and matcher.is_accepting()
        matcher.next_token_mask()
        # Out of the compile caches again, so that dropping the matcher drops everything.
        del CompiledGrammar._compiled[(grammar.fingerprint, smollm2_vocab.fingerprint)]
        del CompiledGrammar._automata[grammar.fingerprint]

    kinds = cyclic_leftovers(compile_and_drop)
    assert not kinds, f"the compile left cycles: {kinds.most_common(8)}"
