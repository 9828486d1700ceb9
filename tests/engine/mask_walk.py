"""Masks along a token sequence from a fresh compile, for tests that compare two ways of
building the same automaton."""

from __future__ import annotations

import numpy as np

from formcast.engine.matcher import CompiledGrammar, Matcher
from formcast.grammar.ir import Grammar


def clear_compiled() -> None:
    """Forget compiled grammars and automata, so the next matcher compiles again."""
    CompiledGrammar._compiled.clear()
    CompiledGrammar._automata.clear()


def masks_along(grammar: Grammar, vocab, tokens: list[int]) -> list[np.ndarray]:
    """Every mask of a fresh compile along ``tokens`` (each accepted), then the last one
    (the sequence must end accepting)."""
    clear_compiled()
    matcher = Matcher(grammar, vocab)
    out = []
    for token in tokens:
        out.append(matcher.next_token_mask().copy())
        assert matcher.accept_token(token)
    out.append(matcher.next_token_mask().copy())
    assert matcher.is_accepting()
    return out
