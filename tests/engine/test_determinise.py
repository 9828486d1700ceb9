"""The C determiniser (``_determinise.c``) against the Python one it replaces: same automaton.

Both number DFA states in the same order, so the whole automaton they build must be equal
state by state: NFA sets, byte rows, segments, rule calls, acceptance; and so must the
parser-state rows built on top of it (written by ``Core.write_plain_row`` and
``Core.fill_row`` in C). Every other engine
test runs on whichever determiniser is active (the C one when it is built); these compare
the two directly, on random grammars and on the benchmark grammars, and keep the Python
fallback honest for machines without a compiler.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque

import numpy as np
import pytest
from benchmark_grammars import GRAMMAR_PATHS, GRAMMARS, load_grammar
from hypothesis import given
from hypothesis import strategies as st
from test_matcher_fuzz import fuzz_settings, grammars

from formcast.engine import determinise
from formcast.engine.lexer import Automaton, _check_left_recursion
from formcast.engine.nfa import build_nfa
from formcast.engine.parser import DenseStates, Parser
from formcast.errors import AmbiguousGrammarError, GrammarError
from formcast.grammar.ir import Choice, Grammar, Literal, Ref, Seq

# Off when the extension is missing, or switched off for the run (FORMCAST_PURE_PYTHON=1:
# the rest of the suite then tests the Python fallback).
needs_native = pytest.mark.skipif(determinise._determinise is None or bool(os.environ.get("FORMCAST_PURE_PYTHON")),
                                  reason="the C determiniser is not built here, or switched off")


def _automaton(grammar: Grammar, native: bool, limit: int) -> Automaton:
    nfa, fragments, order, live = build_nfa(grammar)
    auto = Automaton(nfa, fragments, order, live, grammar.start, native=native)
    auto.build_all(limit)
    return auto


def _assert_same_automaton(grammar: Grammar, limit: int = 1500) -> None:
    py = _automaton(grammar, False, limit)
    c = _automaton(grammar, True, limit)
    assert type(c._core).__name__ == "Core"
    assert py.n_states == c.n_states
    assert py.rule_start == c.rule_start
    for q in range(py.n_states):
        assert py.state_key(q) == c.state_key(q), q
    assert py.calls == c.calls  # first: the row accessors below would build missing states
    for q in range(py.n_states):
        assert py.row(q) == c.row(q), q
        assert py.segments(q) == c.segments(q), q
        assert py.targets(q) == c.targets(q), q
    assert py.accepting_list == c.accepting_list
    assert py.has_bytes == c.has_bytes


@needs_native
def test_the_c_determiniser_is_built_by_the_install():
    """`make test` installs with a compiler present: a silent fallback would triple the
    state-building share of every cold mask."""
    assert determinise._determinise is not None
    assert determinise.native_determinise_enabled()
    from formcast.engine import nfa as nfa_module

    assert nfa_module._nfa_build is not None  # the NFA builder's C half


def test_pure_python_switch_turns_the_c_determiniser_off(monkeypatch):
    monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    assert not determinise.native_determinise_enabled()
    grammar = Grammar.from_regex("[a-c]{2,40}")
    nfa, fragments, order, live = build_nfa(grammar)
    auto = Automaton(nfa, fragments, order, live, grammar.start)
    assert isinstance(auto._core, determinise.PyDeterminiser)


@needs_native
@fuzz_settings(80)
@given(grammar=grammars())
def test_c_and_python_determinisers_agree_on_random_grammars(grammar):
    # Refused grammars (left recursion, size) are refused before determinising.
    with contextlib.suppress(GrammarError):
        _assert_same_automaton(grammar, limit=400)


@needs_native
@pytest.mark.parametrize("path", GRAMMAR_PATHS, ids=lambda p: p.name)
def test_c_and_python_determinisers_agree_on_benchmark_grammars(path):
    """Including lazily pasted repetition copies (``maxLength``, ``{0,20}`` indentation),
    rule calls (json.gbnf) and UTF-8 classes: the first 1500 states, breadth first."""
    _assert_same_automaton(load_grammar(path))


@needs_native
@pytest.mark.parametrize("text", [
    'root ::= "a" ("b" never | "c" | item)\nnever ::= "x" never\nitem ::= "[" (root | never) "]"',
    'root ::= ("ab" never "c" | [a-z]{1,12} "!" | "x" ([0-9] never)? "y")\n'
    'never ::= "(" never ")"',
    'root ::= (item ",")* item\nitem ::= "k" | "n" never | "[" root "]"\n'
    'never ::= never2 "z"\nnever2 ::= "q" never',
])
def test_c_and_python_determinisers_agree_where_states_are_dead(text):
    """Rules that can never finish leave dead NFA states, which neither may step into."""
    grammar = Grammar.from_gbnf(text)
    assert not all(build_nfa(grammar)[3])
    _assert_same_automaton(grammar)


def _nfa_lists(grammar: Grammar) -> tuple:
    nfa = build_nfa(grammar)[0]
    repetitions = sorted((x, record.first, record.exit_offset,
                          getattr(record, "min_bytes", None), done)
                         for x, (record, done) in nfa.lazy_exits.items())
    return tuple([tuple(edges) for edges in lists]
                 for lists in (nfa.eps, nfa.byte_edges, nfa.call_edges)) + (repetitions,)


def _assert_same_nfa(grammar: Grammar, monkeypatch) -> None:
    """The NFA built with the C half of the builder (``_nfa_build``: literals, sequences,
    choices, copies of inlined rules, literal tries, compacted repetitions) and by the
    Python fallback alone is the same, state for state."""
    with monkeypatch.context() as m:
        m.delenv("FORMCAST_PURE_PYTHON", raising=False)
        native = _nfa_lists(grammar)
        m.setenv("FORMCAST_PURE_PYTHON", "1")
        assert _nfa_lists(grammar) == native


@needs_native
@fuzz_settings(120)
@given(grammar=grammars())
def test_c_and_python_build_the_same_nfa_on_random_grammars(grammar):
    with pytest.MonkeyPatch.context() as monkeypatch, contextlib.suppress(GrammarError):
        _assert_same_nfa(grammar, monkeypatch)


@needs_native
@pytest.mark.parametrize("path", GRAMMAR_PATHS, ids=lambda p: p.name)
def test_c_and_python_build_the_same_nfa_for_benchmark_grammars(path, monkeypatch):
    """Compacted repetitions (counted strings) and literal tries (enums of 249 countries)."""
    _assert_same_nfa(load_grammar(path), monkeypatch)


@needs_native
@pytest.mark.parametrize("gbnf", [
    'root ::= "[" item ("," item)* "]"\nitem ::= [a-z]+',  # a separated list
    'root ::= key ":" ("," key ":")*\nkey ::= [a-z]+',  # X of two items
    'root ::= key ("," val)*\nkey ::= [a-z]+\nval ::= [0-9]+',  # no separated list
    'root ::= "a" ("," "a")+',  # at least once: built as written
    'root ::= "a" ("," "a"){0,3}',  # bounded: built as written
    'root ::= "x" "a" ("a" "a")* "y"',  # the repeated item ends like the items before it
])
def test_c_and_python_tell_separated_lists_alike(gbnf, monkeypatch):
    """The C builder decides itself whether a sequence is a separated list ``X (S X)*``
    (the Python builder builds those) and builds every other sequence as a chain: the same
    NFA as the Python fallback, state for state."""
    _assert_same_nfa(Grammar.from_gbnf(gbnf), monkeypatch)


@needs_native
@fuzz_settings(150)
@given(literals=st.lists(st.binary(max_size=5).map(lambda b: bytes(x % 4 + 97 for x in b)),
                         min_size=2, max_size=12))
def test_c_and_python_build_the_same_literal_trie(literals):
    """Prefixes of one another, duplicates and the empty literal: node for node."""
    grammar = Grammar({"root": Choice(tuple(Literal(x) for x in literals)),
                       "other": Seq((Literal(b"x"), Ref("root"), Ref("root")))}, "other")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _assert_same_nfa(grammar, monkeypatch)


_EDGES = [0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000,
          0x10FFFF]
_codepoints = st.one_of(st.sampled_from(_EDGES), st.integers(0, 0x10FFFF),
                        st.sampled_from(_EDGES).flatmap(lambda c: st.integers(max(c - 2, 0),
                                                                              c + 2)))


@needs_native
@fuzz_settings(300)
@given(pairs=st.lists(st.tuples(_codepoints, _codepoints), max_size=6), negated=st.booleans())
def test_c_and_python_spell_character_sets_in_utf8_alike(pairs, negated):
    """UTF-8 byte-range paths of a character set (surrogates dropped, negation over every
    code point), as the NFA's character edges are built from them; a set of surrogates only
    matches nothing."""
    from formcast.engine import nfa as nfa_module
    from formcast.grammar.ir import CharSet, utf8_byte_sequences

    ranges = tuple((min(a, b), max(a, b)) for a, b in pairs)
    expected = [seq for lo, hi in CharSet(ranges, negated).codepoint_ranges()
                for seq in utf8_byte_sequences(lo, hi)]
    assert nfa_module._nfa_build.utf8_paths(ranges, negated) == expected
    assert nfa_module._nfa_build.derives(CharSet(ranges, negated), set()) == bool(expected)


def _grammar_scans(grammar: Grammar) -> tuple:
    from formcast.engine import nfa as nfa_module

    rules = grammar.engine_rules
    builder = nfa_module._Builder(rules, {grammar.start})
    sizes = {name: builder._inline_size(name, ()) for name in sorted(rules)}
    return (nfa_module._reference_counts(rules),
            nfa_module._rule_graph_calls(rules, nfa_module._rule_refs(rules), grammar.start),
            nfa_module._rules_productive(rules, set(rules)), sizes)


@needs_native
@fuzz_settings(120)
@given(grammar=grammars())
def test_c_and_python_scan_grammars_alike(grammar):
    """Reference counts, call rules, productive rules and inlined sizes (ref_names, derives,
    expr_size in C) decide the NFA's shape: the same answers either way."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        native = _grammar_scans(grammar)
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
        assert _grammar_scans(grammar) == native


_RULE_NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])


@needs_native
@fuzz_settings(300)
@given(graph=st.dictionaries(_RULE_NAMES, st.lists(_RULE_NAMES, max_size=4), min_size=1))
def test_c_and_python_cut_every_cycle_of_a_reference_graph_alike(graph):
    """The call rules decide which rules are inlined: on any reference graph (cycles through
    several rules, self-references, repeats), C and Python keep the same ones, and once those
    are calls, no other rule can reach itself."""
    from formcast.engine import nfa as nfa_module

    refs = {name: [t for t in targets if t in graph] for name, targets in graph.items()}
    start = min(refs)
    native = nfa_module._rule_graph_calls({}, refs, start)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
        assert nfa_module._rule_graph_calls({}, refs, start) == native
    acyclic, calls = native
    assert start in calls and (calls == {start} or not acyclic)
    inlined = {name: {t for t in refs[name] if t not in calls}
               for name in refs if name not in calls}
    assert not nfa_module._on_cycles_or_before(inlined)


@needs_native
def test_c_and_python_compact_a_json_string_character_alike(monkeypatch):
    """A counted JSON string's character (every escape spelled exactly) is 54 NFA states
    and compacts to 37: the case compaction exists for."""
    grammar = Grammar.from_json_schema({"type": "string", "maxLength": 30})
    _assert_same_nfa(grammar, monkeypatch)
    uncompacted = Grammar.from_json_schema({"type": "string", "maxLength": 3})  # not lazy
    assert len(_nfa_lists(grammar)[0]) < len(_nfa_lists(uncompacted)[0])


def _parser_rows(grammar: Grammar, native: bool, limit: int, memos: dict | None = None) -> dict:
    """Parser-state rows breadth first from the start: {id: (state, row, finishes)}; the
    parser's closure memos go into ``memos[native]``."""
    nfa, fragments, order, live = build_nfa(grammar)
    auto = Automaton(nfa, fragments, order, live, grammar.start, native=native)
    _check_left_recursion(auto)
    parser = Parser(auto)
    dense = DenseStates(parser)
    start = dense.intern(parser.initial)
    queue, seen, rows = deque([start]), {start}, {}
    while queue and len(rows) < limit:
        sid = queue.popleft()
        dense.ensure_rows(np.array([sid]))
        row = dense.table[sid].tolist()
        rows[sid] = (dense.state(sid), row, bool(dense.finishes[sid]))
        for t in sorted(set(row)):
            if t >= 0 and t not in seen:
                seen.add(t)
                queue.append(t)
    if memos is not None:
        memos[native] = (parser._closure_memo, parser._top_memo)
    return rows


@needs_native
@fuzz_settings(80)
@given(grammar=grammars())
def test_c_and_python_parser_rows_agree_on_random_grammars(grammar):
    """Rows of one-frame states (written by the determiniser) and of states with several or
    deeper stacks (``Core.fill_row``): same successors, numbered alike."""
    with contextlib.suppress(GrammarError):
        assert _parser_rows(grammar, True, 300) == _parser_rows(grammar, False, 300)


@needs_native
@pytest.mark.parametrize("name", ["json/json.gbnf", "gbnf/arithmetic.gbnf", "gbnf/c_like.gbnf",
                                  "schema/tree.schema.json"])
def test_c_and_python_parser_rows_agree_on_recursive_grammars(name):
    """States of several stacks are closed and filled in C (``Core.fill_state``) into the
    parser's own memo dicts: the rows and the memoised closures both match Python's."""
    grammar = load_grammar(GRAMMARS / name)
    memos = {}
    assert _parser_rows(grammar, True, 800, memos) == _parser_rows(grammar, False, 800, memos)
    assert memos[True][0] and memos[True] == memos[False]


@needs_native
@pytest.mark.parametrize("native", [True, False])
def test_a_state_with_too_many_stacks_is_refused_with_the_rules_named(native):
    """The C closure hands a closure over the stack limit back to Python, which refuses it
    with the grammar error (not a crash, not a silent cut)."""
    grammar = Grammar.from_gbnf('root ::= "=" | "=" root{2,4}')
    with pytest.raises(AmbiguousGrammarError) as info:
        _parser_rows(grammar, native, 10_000)
    assert info.value.rules == ["root"]


@needs_native
def test_the_c_determiniser_refuses_a_state_it_does_not_have():
    grammar = Grammar.from_regex("ab")
    auto = _automaton(grammar, True, 0)
    with pytest.raises(IndexError, match="DFA state 99 out of range"):
        auto._core.ensure(99)


@pytest.mark.parametrize("native", [False, pytest.param(True, marks=needs_native)])
def test_a_repetition_outgrowing_the_automaton_bound_is_refused_clearly(monkeypatch, native):
    """Copies of a long repetition are pasted while states are built, inside the C closure
    too: past the bound the error is the GrammarError that names it, not a crash, and the
    automaton keeps what it had."""
    from formcast.engine import nfa as nfa_module

    monkeypatch.setattr(nfa_module, "MAX_NFA_STATES", 400)
    grammar = Grammar.from_regex("(ab|cd|ef){0,500}")
    nfa, fragments, order, live = build_nfa(grammar)
    auto = Automaton(nfa, fragments, order, live, grammar.start, native=native)
    parser = Parser(auto)
    state = parser.initial
    with pytest.raises(GrammarError, match="too large to compile"):
        for _ in range(500):
            state = parser.advance(state, b"ab")
            assert state
    assert parser.advance(parser.initial, b"cd")  # states built before the error still work


@needs_native
@pytest.mark.parametrize("name", ["schema/tool_call.schema.json", "schema/many_enums.schema.json",
                                  "gbnf/checklist.gbnf", "gbnf/sql_select.gbnf"])
def test_c_and_python_pastes_build_the_same_nfa(monkeypatch, name):
    """Fragment copies (inlined rules at compile time, repetition copies while determinising)
    are pasted in C when the extension is built: the same NFA, edge for edge."""
    grammar = load_grammar(GRAMMARS / name)
    c_auto = _automaton(grammar, True, 1500)
    c = c_auto._nfa
    monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    py = _automaton(grammar, False, 1500)._nfa
    assert len(c.eps) > 1000
    assert len(c.eps) > c_auto.nfa_states  # repetition copies were pasted while determinising
    assert c.eps == py.eps
    assert c.byte_edges == py.byte_edges
    assert c.call_edges == py.call_edges


@needs_native
def test_automaton_lists_stay_out_of_the_cyclic_collector():
    """A tool-call schema's automaton holds ~20k small lists; tracked, each older-generation
    collection walked them all again, 1-5 ms inside a cold mask. They hold ints and tuples
    only, so they are untracked, and stay untracked as states and copies are added."""
    import gc

    grammar = load_grammar(GRAMMARS / "schema" / "tool_call.schema.json")
    nfa, fragments, order, live = build_nfa(grammar)
    lists = [*nfa.eps, *nfa.byte_edges, *nfa.call_edges]
    assert lists and not any(gc.is_tracked(x) for x in lists)
    edges = [edge for state in [*nfa.byte_edges, *nfa.call_edges] for edge in state]
    assert edges and not any(gc.is_tracked(edge) for edge in edges)  # tuples of ints
    before = len(nfa.eps)
    auto = Automaton(nfa, fragments, order, live, grammar.start, native=True)
    auto.build_all(3000)
    assert len(nfa.eps) > before  # repetition copies were pasted on demand
    assert not any(gc.is_tracked(x) for x in nfa.eps[before:])
    rows = [auto.row(q) for q in range(auto.n_states) if auto.calls[q] is not None]
    segments = [auto.segments(q) for q in range(auto.n_states) if auto.calls[q] is not None]
    assert rows and not any(gc.is_tracked(row) for row in rows)
    assert not any(gc.is_tracked(seg) for segs in segments for seg in segs)
    assert not any(gc.is_tracked(x) for state in nfa.byte_edges[before:] for x in state)
    # Nothing was freed that is still in use: the automaton works after a full collection.
    gc.collect()
    assert auto.row(0) is auto.trans_rows[0] and len(auto.row(0)) == 256


def _big_rule_grammar(uses: int) -> Grammar:
    """``item`` (one literal of ~60 words: ~8,000 NFA states inlined) referenced ``uses``
    times from the root."""
    words = " | ".join(f'"w{i:03d}-{"x" * 120}"' for i in range(60))
    refs = ' "," '.join(["item"] * uses)
    return Grammar.from_gbnf(f"root ::= {refs}\nitem ::= {words}\n")


def test_an_array_item_rule_used_twice_is_inlined_however_large():
    """An array's item schema is referenced twice (the first item and the rest): copies share
    their edges, so a big one is still inlined, and masks inside items need no stack. A rule
    that large used in more places stays a call."""
    nfa, _, order, _ = build_nfa(_big_rule_grammar(2))
    assert order == ["root"]
    assert len(nfa.eps) > 6000
    # the second use is a copy pasted when first reached (a plain-bytes fragment)
    assert [type(r).__name__ for r, _ in nfa.lazy_exits.values()] == ["LazyCopy"]
    _, _, order, _ = build_nfa(_big_rule_grammar(3))
    assert order == ["root", "item"]


@pytest.mark.parametrize("gbnf, first, later", [
    # a JSON array of objects: after "[" and after "," the item starts in the same state
    ('root ::= "[" item ("," item)* "]"\nitem ::= "{\\"a\\":" [0-9]+ "}"', b"[", b'[{"a":1},'),
    # an object's members (inside the first key and a later one: after "{" the object may
    # also close, after "," not), the member spelled in several items
    ('root ::= "{" ( key ":" val ("," key ":" val)* )? "}"\n'
     'key ::= "\\"" [a-z]+ "\\""\nval ::= [0-9]+ | "true"', b'{"', b'{"ab":true,"'),
])
def test_a_list_s_first_and_later_elements_share_their_states(gbnf, first, later):
    """``X (S X)*`` is built as one copy of X with S leading back to it: the first element
    and every later one are the same automaton states, so their masks are computed once and
    the item is compiled once."""
    from formcast.engine.vocab import Vocabulary

    vocab = Vocabulary.from_tokens([b""] + [bytes([c]) for c in range(32, 127)], eos_ids=[0])
    from formcast.engine.matcher import Matcher

    m = Matcher(Grammar.from_gbnf(gbnf), vocab)
    assert m.accept_bytes(first)
    at_first = m.state
    m.reset()
    assert m.accept_bytes(later)
    assert m.state == at_first


@pytest.mark.parametrize("text, ok", [
    (b"ab", True), (b"a,b", True), (b"a1,b", True), (b"a,,b", True), (b"a1,,2b", True),
    (b"ab,", False), (b"a,1", False), (b"b", False), (b"a1b", True), (b"a12,b", False),
])
def test_a_separated_list_keeps_its_language(text, ok):
    """Head, nullable X and separator: the loop accepts exactly ``a X ("," X)* b``."""
    from formcast.engine.vocab import Vocabulary

    vocab = Vocabulary.from_tokens([b""] + [bytes([c]) for c in b"ab12,"], eos_ids=[0])
    from formcast.engine.matcher import Matcher

    m = Matcher(Grammar.from_gbnf('root ::= "a" x ("," x)* "b"\nx ::= [0-9]?'), vocab)
    assert (m.accept_bytes(text) and m.is_accepting()) == ok


@pytest.mark.parametrize("pure", [False, True])
def test_an_unknown_ir_node_is_a_grammar_error_in_both_builders(monkeypatch, pure):
    """Expr subclasses the builder does not know are refused with the node named, whether the
    C half or the Python builder meets them."""
    from formcast.grammar.ir import Expr

    class Unknown(Expr):
        __slots__ = ()

    if pure:
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    grammar = Grammar({"root": Seq((Literal(b"a"), Ref("odd"))), "odd": Unknown()}, "root")
    with pytest.raises(GrammarError, match="unknown IR node"):
        build_nfa(grammar)


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.sets(st.sampled_from("abcdefghz")),
                       max_size=8))
def test_cyclic_components_are_exactly_the_nodes_on_cycles(graph):
    """Which rules must stay calls rests on these components: every node on a cycle is in
    one (with exactly the nodes it shares cycles with), and no other node is."""
    from formcast.engine.nfa import _cyclic_sccs

    def reach(node):
        seen, todo = set(), [node]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt in graph and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {node: reach(node) for node in graph}
    expected = {frozenset(m for m in graph if m in reached[n] and n in reached[m])
                for n in graph if n in reached[n]}
    assert {frozenset(c) for c in _cyclic_sccs(graph)} == expected


def test_copy_owners_answer_like_a_dict_filled_range_by_range():
    """Automaton.copy_shape reads which copy each NFA state lies in; ranges are registered
    in bulk, nested ones overlapping (an outer repetition registers its first copy after
    the inner ones inside it), and the later registration wins, as a dict update would."""
    from formcast.engine.nfa import CopyOwners

    owners, reference = CopyOwners(), {}
    assert not owners
    for start, stop, value in [(5, 9, "inner"), (3, 12, "outer"), (20, 25, "copy 1"),
                               (22, 24, "inner clone"), (25, 30, "copy 2")]:
        owners.register(start, stop, value)
        reference.update(dict.fromkeys(range(start, stop), value))
    assert owners
    assert [owners.get(x) for x in range(40)] == [reference.get(x) for x in range(40)]


@needs_native
@given(st.lists(st.sampled_from(b"ab\xc3\xa9\"z"), max_size=14))
def test_walk_bytes_steps_as_the_built_rows_do(data):
    """``Core.walk_bytes`` makes the states on one token's path without building whole rows
    (the long tokens of a ``maxLength`` string); it must end where stepping the built rows
    ends. With no byte allowed to follow the frame, only a refusal stops it early."""
    from formcast.grammar.ir import CharSet, Repeat

    run = Repeat(CharSet(((ord("a"), ord("b")), (0xE9, 0xE9))), 0, 9)
    grammar = Grammar({"root": Seq((Literal(b'"'), run, Literal(b'"z')))}, start="root")
    token = bytes(data)
    sparse = _automaton(grammar, native=True, limit=0)
    full = _automaton(grammar, native=True, limit=0)
    q = full.rule_start[0]
    alive = True
    for byte in token:
        q = full.row(q)[byte]
        if q < 0:
            alive = False
            break
    start = sparse.rule_start[0]
    assert sparse.native_core.walk_bytes(start, token, bytes(256)) == int(alive)


@pytest.mark.parametrize("native", [False, True])
def test_copies_made_on_demand_know_their_repetition_and_index(native):
    """Automaton.copy_shape tells positions of a long counted run apart by copy index; a
    copy pasted while stepping must be registered with its repetition and index (in C,
    ``paste_copy``), or later copies would lose the verdict sharing their masks rely on."""
    from formcast.grammar.ir import CharSet, Repeat

    if native and (determinise._determinise is None or os.environ.get("FORMCAST_PURE_PYTHON")):
        pytest.skip("the C determiniser is not built here, or switched off")
    run = Repeat(CharSet(((ord("a"), ord("z")), (0xE9, 0xE9))), 0, 40)  # not a byte chain
    grammar = Grammar({"root": Seq((Literal(b"<"), run, Literal(b">")))}, start="root")
    nfa, fragments, order, live = build_nfa(grammar)
    auto = Automaton(nfa, fragments, order, live, grammar.start, native=native)
    q = auto.rule_start[0]
    for byte in b"<" + b"x" * 20:
        q = auto.row(q)[byte]
    _, states = auto.state_key(q)
    owners = [nfa.copy_of.get(x) for x in states]
    assert any(o is not None and o[1] == 20 for o in owners), owners
    assert auto.copy_shape(q) is not None
