"""The JSON string character's automaton is pasted from precomputed data (``fragments.py``):
it must be exactly what the builder makes, so grammars and masks are the same either way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mask_walk import clear_compiled, masks_along

from formcast.engine import _json_char_fragment
from formcast.engine import nfa as nfa_module
from formcast.engine.fragments import JSON_CHAR_FRAGMENT, built_json_char, fragment_source
from formcast.engine.nfa import LazyRepeat, build_nfa
from formcast.grammar.ir import Grammar

ROOT = Path(__file__).resolve().parents[2]
TREE = json.loads((ROOT / "benchmarks/grammars/schema/tree.schema.json").read_text())
# bounded strings of every kind: lazily repeated (max >= 8), eagerly copied (max < 8),
# unbounded above, nested in an array of objects, and a pattern (not the character rule)
STRINGS = {"type": "object", "properties": {
    "a": {"type": "string", "maxLength": 40}, "b": {"type": "string", "minLength": 2,
                                                    "maxLength": 5},
    "c": {"type": "string", "minLength": 3},
    "d": {"type": "array", "items": {"type": "object", "properties": {
        "e": {"type": "string", "minLength": 1, "maxLength": 300}}}},
    "f": {"type": "string", "pattern": "^[a-z]{2,20}$"}}}


@pytest.mark.parametrize("pure", [False, True], ids=["native", "python"])
def test_the_checked_in_fragment_is_what_the_builder_makes(monkeypatch, pure) -> None:
    # If this fails, the character rule or the builder changed: run
    # `python -m formcast.engine.fragments` to write the fragment again.
    if pure:
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    built = built_json_char()
    assert built == JSON_CHAR_FRAGMENT
    assert fragment_source(built) == Path(_json_char_fragment.__file__).read_text()
    assert len(built.states) < 54  # compacted: the item is 54 NFA states as built


def _nfa_and_records(grammar: Grammar, precomputed: bool):
    nfa, fragments, order, live = build_nfa(grammar, precomputed=precomputed)
    records = sorted((x, r.first, r.exit_offset, r.copies, r.minimum, r.end, r.min_bytes,
                      r.nullable, tuple(r.edges))
                     for x, (r, _) in nfa.lazy_exits.items() if isinstance(r, LazyRepeat))
    states = [tuple(tuple(edges) for edges in kind) for kind in
              (nfa.eps, nfa.byte_edges, nfa.call_edges)]
    return states, records, fragments, order, live


@pytest.mark.parametrize("pure", [False, True], ids=["native", "python"])
@pytest.mark.parametrize("schema", [TREE, STRINGS], ids=["tree", "strings"])
def test_pasting_the_fragment_builds_the_same_nfa(monkeypatch, pure, schema) -> None:
    if pure:
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    grammar = Grammar.from_json_schema(schema, cache=None)
    pasted = _nfa_and_records(grammar, precomputed=True)
    built = _nfa_and_records(grammar, precomputed=False)
    assert pasted == built
    assert len(pasted[1]) >= 1  # a lazily repeated character was met


def test_only_the_compilers_own_character_rule_is_pasted(monkeypatch) -> None:
    # A GBNF rule spelling the same language is other objects: built as usual, same language.
    pasted = []
    original = nfa_module._Builder._paste_lazy_repeat

    def spy(self, *args):
        pasted.append(args)
        return original(self, *args)

    monkeypatch.setattr(nfa_module._Builder, "_paste_lazy_repeat", spy)
    schema_grammar = Grammar.from_json_schema({"type": "string", "maxLength": 9}, cache=None)
    build_nfa(schema_grammar)
    assert len(pasted) == 1
    text_grammar = Grammar.from_gbnf(schema_grammar.to_gbnf())
    build_nfa(text_grammar)
    assert len(pasted) == 1


def test_masks_are_the_same_with_the_fragment_pasted_or_built(monkeypatch, smollm2_vocab,
                                                              smollm2_encode) -> None:
    grammar = Grammar.from_json_schema(STRINGS, cache=None)
    # escapes as JSON text: a short escape, a \u escape and a surrogate pair; 40 characters
    # in "a", its maxLength
    text = ('{"a": "' + "x" * 39 + 'é", "b": "\\u00e9\\n", "c": "abc", '
            '"d": [{"e": "\\ud83d\\ude00 ok"}], "f": "abc"}')
    assert json.loads(text)["b"] == "é\n"
    tokens = smollm2_encode(text)

    pasted = masks_along(grammar, smollm2_vocab, tokens)
    monkeypatch.setattr(nfa_module, "precomputed_item", lambda *args: None)
    built = masks_along(grammar, smollm2_vocab, tokens)
    clear_compiled()
    assert len(pasted) == len(built) > 30
    for step, (a, b) in enumerate(zip(pasted, built, strict=True)):
        assert np.array_equal(a, b), f"step {step}"
