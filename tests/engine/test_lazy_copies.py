"""Further uses of a plain-bytes inlined rule (JSON's whitespace between tokens) are pasted
when the DFA construction first reaches them (``nfa.LazyCopy``): the language and every mask
stay what the eager copies gave, at a fraction of the compile's NFA states."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mask_walk import clear_compiled, masks_along

from formcast.engine import nfa as nfa_module
from formcast.engine.matcher import CompiledGrammar, Matcher
from formcast.engine.nfa import LazyCopy, build_nfa
from formcast.grammar.ir import Grammar

ROOT = Path(__file__).resolve().parents[2]
TOOL_CALL = json.loads((ROOT / "benchmarks/grammars/schema/tool_call.schema.json").read_text())

# `pair` holds a stub (its second `ws`); the lazily repeated `("," pair){0,12}` copies `pair`
# into an item that is itself pasted on demand from a snapshot, which keeps no stubs.
NESTED = 'root ::= pair ("," pair){0,12}\npair ::= "(" ws "a" ws ")"\nws ::= [ ]{0,15}\n'


def _uncached_matcher(grammar: Grammar, vocab) -> Matcher:
    CompiledGrammar._compiled.clear()
    CompiledGrammar._automata.clear()
    return Matcher(grammar, vocab)


def test_schema_whitespace_gaps_are_stubs() -> None:
    grammar = Grammar.from_json_schema(TOOL_CALL, strict=False, cache=None)
    nfa, *_ = build_nfa(grammar)
    stubs = [x for x, (record, _) in nfa.lazy_exits.items() if isinstance(record, LazyCopy)]
    assert len(stubs) > 20  # every gap after the first whitespace rule's own
    assert len(nfa.eps) < 1000  # where eager copies made ~2,500 states


def test_a_rule_holding_stubs_is_copied_lazily_with_them(smollm2_vocab) -> None:
    # `pair` holds a whitespace stub; its second use is itself a stub, whose paste brings
    # stubs of its own.
    grammar = Grammar.from_gbnf('root ::= pair ";" pair\npair ::= "(" ws "ab" ws ")"\n'
                                'ws ::= [ ]{0,15}\n')
    nfa, *_ = build_nfa(grammar)
    copies = {x: record for x, (record, _) in nfa.lazy_exits.items()}
    pair = [r for r in copies.values() if r.stubs]
    assert len(pair) == 1 and len(pair[0].stubs) == 1
    for text, ok in [(b"( ab );(ab  )", True), (b"(ab);(" + b" " * 15 + b"ab)", True),
                     (b"(ab);(" + b" " * 16 + b"ab)", False), (b"(ab);(ab", False)]:
        matcher = _uncached_matcher(grammar, smollm2_vocab)
        assert (matcher.accept_bytes(text) and matcher.is_accepting()) is ok, text


@pytest.mark.parametrize("pure", [False, True], ids=["native", "python"])
def test_copies_inside_a_lazily_repeated_item_keep_their_whitespace(monkeypatch, smollm2_vocab,
                                                                    pure) -> None:
    if pure:
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    grammar = Grammar.from_gbnf(NESTED)

    def accepts(text: bytes) -> bool:
        matcher = _uncached_matcher(grammar, smollm2_vocab)
        return matcher.accept_bytes(text) and matcher.is_accepting()

    items = ",".join(f"({' ' * (i % 16)}a{' ' * (15 - i % 16)})" for i in range(13))
    assert accepts(items.encode())
    assert accepts(b"(a),( a ),(a ),(  a),(a)")
    assert not accepts(b"(a),(" + b" " * 16 + b"a)")  # the bound holds in copies too
    assert not accepts(b",".join([b"(a)"] * 14))


@pytest.mark.parametrize("pure", [False, True], ids=["native", "python"])
@pytest.mark.parametrize("name", ["tool_call", "invoice"])
def test_masks_equal_the_eager_copies(monkeypatch, smollm2_vocab, smollm2_encode, pure,
                                      name) -> None:
    """Every mask along a pretty-printed sample, lazy copies against eager ones (the invoice's
    buyer is a lazy copy of its seller, whitespace stubs inside)."""
    if pure:
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    schema = json.loads((ROOT / f"benchmarks/grammars/schema/{name}.schema.json").read_text())
    grammar = Grammar.from_json_schema(schema, strict=False, cache=None)
    sample = (ROOT / f"benchmarks/grammars/schema/{name}.samples.txt").read_text()
    first = sample.split("\n%%\n")[0].split("\n", 1)[1]  # after the comment line
    tokens = smollm2_encode(json.dumps(json.loads(first), indent=2))  # a gap at every turn

    lazy = masks_along(grammar, smollm2_vocab, tokens)
    monkeypatch.setattr(nfa_module, "LAZY_COPY_MIN", 10**9)
    eager = masks_along(grammar, smollm2_vocab, tokens)
    clear_compiled()
    assert len(lazy) == len(eager) > 50
    for step, (a, b) in enumerate(zip(lazy, eager, strict=True)):
        assert np.array_equal(a, b), f"step {step}"
