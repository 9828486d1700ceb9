"""The C trie walk (``_trie_walk.c``) against the numpy walk it replaces: same verdicts.

Both walks take the same filled parser-state rows; the C one resumes where rows were missing.
Every other engine test runs on whichever walk is active (the C one when it is built); these
tests compare the two directly, on random grammars and on the benchmark grammars over the
real SmolLM2 vocabulary, and keep the numpy fallback honest for machines without a compiler.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from benchmark_grammars import GRAMMAR_PATHS, load_grammar
from hypothesis import given
from hypothesis import strategies as st
from test_matcher_fuzz import (
    fuzz_settings,
    grammars,
    matcher_or_reject,
    pick_token,
    synthetic_vocabs,
)

from formcast.engine import mask_cache, token_trie
from formcast.engine.mask_cache import MaskCache, classify_tokens_native, classify_tokens_numpy
from formcast.engine.matcher import Matcher
from formcast.engine.parser import DenseStates
from formcast.errors import AmbiguousGrammarError
from formcast.grammar.ir import Grammar

# Off when the extension is missing, or switched off for the run (FORMCAST_PURE_PYTHON=1:
# the rest of the suite then tests the Python fallback).
needs_native = pytest.mark.skipif(mask_cache._trie_walk is None or bool(os.environ.get("FORMCAST_PURE_PYTHON")),
                                  reason="the C trie walk is not built here, or switched off")


@needs_native
def test_the_c_walk_is_built_by_the_install():
    """`make test` installs with a compiler present: a silent numpy fallback would hide a
    ten-fold slower cold mask."""
    assert mask_cache._trie_walk is not None
    assert mask_cache.native_walk_enabled()


def test_pure_python_switch_turns_the_c_walk_off(monkeypatch):
    monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    assert not mask_cache.native_walk_enabled()


def _verdicts_agree(compiled, state) -> None:
    """Both walks from ``state`` on fresh tables: same allowed tokens, same context tokens."""
    table = compiled.table
    dense_a = DenseStates(compiled.parser)
    dense_b = DenseStates(compiled.parser)
    a = classify_tokens_numpy(dense_a, table, dense_a.intern(state))
    b = classify_tokens_native(dense_b, table, dense_b.intern(state))
    assert np.array_equal(a.allowed, b.allowed)
    assert np.array_equal(np.sort(a.needs_context), np.sort(b.needs_context))


def _walk_randomly(m, vocab, data, visit=None, steps: int = 6) -> bool:
    """Up to ``steps`` tokens along a random allowed path, calling ``visit(state)`` before
    each mask; False when the grammar turned out too ambiguous to parse."""
    try:
        for _ in range(steps):
            if visit is not None:
                visit(m.state)
            mask = m.next_token_mask()
            if not mask[2:].any():
                break
            assert m.accept_token(pick_token(data, mask, vocab))
    except AmbiguousGrammarError:
        return False
    return True


@needs_native
@fuzz_settings(60)
@given(grammar=grammars(), data=st.data())
def test_c_and_numpy_walks_agree_on_random_grammars(grammar, data):
    vocab = data.draw(synthetic_vocabs(grammar))
    m = matcher_or_reject(grammar, vocab)

    def both_walks(state) -> None:
        _verdicts_agree(m.compiled, state)
        for frame in state:  # the one-frame walks behind the per-position verdicts
            _verdicts_agree(m.compiled, frozenset(((frame[-1],),)))

    _walk_randomly(m, vocab, data, both_walks)


def _rows_match_whole_closures(compiled) -> int:
    """Every filled row of a one-frame state whose DFA state calls rules, read as parser
    states, against the row built from the state's whole closure; how many were compared."""
    dense = compiled.masks.dense
    auto = compiled.automaton
    fresh = DenseStates(compiled.parser)
    compared = 0
    for sid in np.flatnonzero(dense.filled).tolist():
        if sid % 2 or not auto.calls[sid // 2]:
            continue
        fid = fresh.intern(dense.state(sid))
        fresh.ensure_rows(np.array([fid]))
        got = [dense.state(t) if t >= 0 else None for t in dense.table[sid].tolist()]
        want = [fresh.state(t) if t >= 0 else None for t in fresh.table[fid].tolist()]
        assert got == want, sid
        assert dense.finishes[sid] == fresh.finishes[fid], sid
        compared += 1
    return compared


@needs_native
@fuzz_settings(60)
@given(grammar=grammars(), data=st.data())
def test_rows_the_walk_builds_are_those_of_the_whole_closure(grammar, data):
    """The C walk builds the row of a one-frame state whose DFA state calls rules from the
    row its calls alone lead to (shared by every state with the same calls), with the state's
    own moves laid over it: each such row is the one built from the state's whole closure."""
    vocab = data.draw(synthetic_vocabs(grammar))
    m = matcher_or_reject(grammar, vocab)
    if _walk_randomly(m, vocab, data):
        _rows_match_whole_closures(m.compiled)


@needs_native
@pytest.mark.model
@pytest.mark.parametrize("gbnf, text", [
    # each position of bounded whitespace before a nested value calls the value rule
    ('root ::= value\nvalue ::= "[" ws (value ws ("," ws value ws)*)? "]" | [0-9]+ | '
     '"\\"" [a-z]* "\\""\nws ::= [ \\n]{0,6}', '[ [1, "ab"],\n  [ [] , 7 ] ]'),
    # a rule that may end right after its call (a tail call) and one that may not
    ('root ::= "(" item ")"\nitem ::= "a" item? | "b" [ ]{0,3} item "c" | "d"', "(b  bad  c)"),
    # a tail call to a rule that may be empty: the caller's frame may end right there
    ('root ::= "(" list ")"\nlist ::= "a" list | "b"*', "(aaabb)"),
])
def test_rows_built_from_calls_are_those_of_the_whole_closure(smollm2_vocab, smollm2_tokenize,
                                                               gbnf, text):
    m = Matcher(Grammar.from_gbnf(gbnf), smollm2_vocab)
    for token in smollm2_tokenize(text):
        m.next_token_mask()
        if not m.accept_token(token):
            break
    assert _rows_match_whole_closures(m.compiled) >= 2


@needs_native
@pytest.mark.model
@pytest.mark.parametrize("path", GRAMMAR_PATHS, ids=lambda p: p.name)
def test_c_and_numpy_walks_agree_on_benchmark_grammars(smollm2_vocab, smollm2_tokenize, path):
    """The first masks of each benchmark grammar, along its first sample, over SmolLM2."""
    grammar = load_grammar(path)
    samples = path.with_name(path.name.split(".")[0] + ".samples.txt").read_text()
    lines = [line for line in samples.splitlines() if not line.startswith("%% ")]
    sample = "\n".join(lines).split("\n%%\n")[0].strip("\n")
    m = Matcher(grammar, smollm2_vocab)
    for token in smollm2_tokenize(sample)[:40]:
        _verdicts_agree(m.compiled, m.state)
        assert m.accept_token(token)


def test_numpy_fallback_gives_the_same_masks(monkeypatch):
    grammar = Grammar.from_gbnf('root ::= "{" pair ("," pair)* "}"\n'
                                'pair ::= "\\"" [a-z]{1,12} "\\":" ( [0-9]+ | root )')
    from formcast.engine.vocab import Vocabulary

    vocab = Vocabulary.from_tokens([b""] + [bytes([c]) for c in b'{}",:ab09'] +
                                   [b'{"', b'":', b'",', b'"a', b'ab":', b"}}", b'0,"'],
                                   eos_ids=[0])
    native = Matcher(grammar, vocab)
    text = b'{"ab":{"a":0},"b":9}'
    masks = []
    for b in text:
        masks.append(native.next_token_mask().copy())
        assert native.accept_bytes(bytes([b]))
    monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    compiled = native.compiled
    compiled.masks = MaskCache(compiled.automaton, compiled.parser, compiled.table)
    fallback = Matcher(compiled)
    for b, want in zip(text, masks, strict=True):
        assert np.array_equal(fallback.next_token_mask(), want)
        assert fallback.accept_bytes(bytes([b]))


def _paths(flat) -> list[bytes]:
    """Each node's byte path, rebuilt from the preorder records (depth says the parent)."""
    nodes = flat.nodes.view(token_trie.NODE_DTYPE)
    paths: list[bytes] = []
    stack: list[bytes] = []
    for node in nodes:
        depth = int(node["depth"])
        del stack[depth:]
        path = (stack[-1] if stack else b"") + (bytes([int(node["byte"])]) if depth else b"")
        stack.append(path)
        paths.append(path)
    return paths


def test_flat_trie_is_a_preorder_with_subtree_ranges():
    """The C walk reads the nodes front to back and jumps over a refused subtree: a node's
    subtree must be exactly the nodes after it up to ``subtree_end``, its tokens the rows
    ``[row_lo, row_hi)``, and the tokens ending at it the first ``end_count`` of those."""
    tokens = [b"", b"a", b"ab", b"abc", b"abd", b"b", b"ba", b"\xff", b"\xff\x00", b"c", b"ab"]
    trie = token_trie.TokenTrie(tokens, len(tokens))
    flat = trie.flat()
    nodes = flat.nodes.view(token_trie.NODE_DTYPE)
    paths = _paths(flat)
    assert paths[0] == b"" and len(set(paths)) == len(paths) == flat.n_nodes
    assert paths == sorted(paths)  # preorder of a byte trie is the sorted order of its paths
    row_bytes = [tokens[t] for t in trie.ids]
    for i, node in enumerate(nodes):
        below = [p for p in paths[i + 1:] if p.startswith(paths[i])]
        assert paths[i + 1:int(node["subtree_end"])] == below
        rows = range(int(node["row_lo"]), int(node["row_hi"]))
        assert [r for r, b in enumerate(row_bytes) if b.startswith(paths[i])] == list(rows)
        ending = [r for r in rows if row_bytes[r] == paths[i]]
        assert ending == list(rows)[:int(node["end_count"])]
        assert flat.maxlen[i] == max((len(row_bytes[r]) for r in rows), default=0)


@needs_native
def test_c_walk_refuses_a_broken_trie_instead_of_reading_past_it():
    grammar = Grammar.from_regex("[a-c]+")
    from formcast.engine.vocab import Vocabulary

    vocab = Vocabulary.from_tokens([b""] + [b"a", b"ab", b"abc", b"b", b"ca"], eos_ids=[0])
    m = Matcher(grammar, vocab)
    flat = m.compiled.table.trie.flat()
    nodes = flat.nodes.view(token_trie.NODE_DTYPE)
    saved = int(nodes[1]["subtree_end"])
    nodes[1]["subtree_end"] = flat.n_nodes + 5  # past the end of the array
    try:
        with pytest.raises(IndexError, match="out of range"):
            m.next_token_mask()
    finally:
        nodes[1]["subtree_end"] = saved  # the table is shared by this vocabulary's matchers


@needs_native
def test_a_vocabulary_the_c_walk_cannot_hold_is_walked_with_numpy():
    """300 tokens with the same bytes do not fit the C walk's 8-bit count: masks still come,
    from the numpy walk, and they are right."""
    from formcast.engine.vocab import Vocabulary

    tokens = [b""] + [b"a"] * 300 + [b"b", b"ab", b"c"]
    vocab = Vocabulary.from_tokens(tokens, eos_ids=[0])
    m = Matcher(Grammar.from_regex("a+b?"), vocab)
    assert not m.compiled.table.walkable
    mask = m.next_token_mask()
    assert mask[1:301].all() and mask[302] and not mask[301] and not mask[303]
    assert m.accept_token(302) and m.is_accepting()


def _nested_json_matcher():
    """A recursive grammar over a small vocabulary, advanced three levels deep, so its state
    is a stack of several frames whose rows the walk has to build."""
    from formcast.engine.vocab import Vocabulary

    grammar = Grammar.from_gbnf('root ::= "[" ( value ( "," value )* )? "]"\n'
                                'value ::= root | [0-9]+ | "\\"" [a-z ]* "\\""')
    vocab = Vocabulary.from_tokens([b""] + [bytes([c]) for c in b'[],"0123456789ab '] +
                                   [b'["', b'",', b'"]', b"]]", b"],", b"12", b' a', b'[[',
                                    b'"a"]', b'1]]'], eos_ids=[0])
    m = Matcher(grammar, vocab)
    assert m.accept_bytes(b"[[1,[")
    return m


@needs_native
def test_c_walk_builds_several_frame_states_without_python(monkeypatch):
    """The walk builds every parser state it meets in C (through the DenseStates context);
    handing each back to Python made a deep JSON state cost a millisecond."""
    m = _nested_json_matcher()
    assert max(len(stack) for stack in m.state) > 1
    calls = []
    original = DenseStates.ensure_rows

    def counting(self, ids):
        calls.append(ids)
        return original(self, ids)

    monkeypatch.setattr(DenseStates, "ensure_rows", counting)
    dense = DenseStates(m.compiled.parser)
    got = classify_tokens_native(dense, m.compiled.table, dense.intern(m.state))
    assert calls == []
    monkeypatch.undo()
    roomy = DenseStates(m.compiled.parser)
    want = classify_tokens_numpy(roomy, m.compiled.table, roomy.intern(m.state))
    assert np.array_equal(got.allowed, want.allowed)
    assert np.array_equal(np.sort(got.needs_context), np.sort(want.needs_context))


@needs_native
def test_c_walk_hands_states_back_when_the_table_must_grow():
    """A table too small for the states a row numbers: the walk stops there, Python grows
    the table and fills the row, the walk resumes, and the verdict is the same."""
    m = _nested_json_matcher()
    parser = m.compiled.parser
    roomy = DenseStates(parser)
    want = classify_tokens_numpy(roomy, m.compiled.table, roomy.intern(m.state))
    # Tables that run out of room at different points: at the walk's first state (the slice
    # chain's), or in the middle of the walk (the C walk needs room for 257 more states).
    for capacity in range(500, 530, 2):
        small = DenseStates(parser, capacity=capacity)
        got = classify_tokens_native(small, m.compiled.table, small.intern(m.state))
        assert small.table.shape[0] > capacity  # it grew on the way
        assert np.array_equal(got.allowed, want.allowed), capacity
        assert np.array_equal(np.sort(got.needs_context), np.sort(want.needs_context)), capacity


@needs_native
def test_a_mask_inside_a_long_string_of_a_called_rule_builds_few_states(smollm2_vocab):
    """The walk from the whole stack, for the few tokens that close the string mid-token,
    follows the slice chain only as far as those tokens reach: going to the vocabulary's
    longest token built one several-frame state per string position (~700 states, 5 ms in a
    14-way anyOf of tool calls)."""
    grammar = Grammar.from_gbnf(
        'root ::= "[" item "]"\n'
        'item ::= "\\"" char{0,300} "\\"" | "[" item "]"\n'
        'char ::= [^"\\\\] | "\\\\" ["\\\\/bfnrt]\n')
    m = Matcher(grammar, smollm2_vocab)
    assert m.accept_bytes(b'["')
    assert max(len(stack) for stack in m.state) == 2
    dense_before = len(m.compiled.masks.dense)
    mask = m.next_token_mask()
    built = len(m.compiled.masks.dense) - dense_before
    assert built < 100, built
    closing = [t for t, b in enumerate(smollm2_vocab.token_bytes[:smollm2_vocab.size])
               if b in (b'"', b'"]', b'a"]')]
    assert closing and all(mask[t] for t in closing)


@needs_native
@pytest.mark.parametrize("gbnf, prefix", [
    # a JSON string's characters: the slice is the same from the first byte on
    ('root ::= "{\\"" [^"\\\\]* "\\": 1}"', b'{"'),
    # a digit may follow a letter but not start the name: "1a" is no token of the slice
    ('root ::= "(" ([a-zA-Z_] [a-zA-Z0-9_]* | [0-9]+) ")"', b"("),
])
def test_tokens_a_whole_slice_admits_are_shared_across_grammars(smollm2_vocab, gbnf, prefix):
    """The tokens of a looping slice chain are computed once per vocabulary and byte sets,
    then marked at once by every walk with that slice: the masks stay those of the numpy
    walk, and a second grammar with the same slice reuses the entry."""
    memo = None
    for extra in ("", "?"):  # two grammars with the same slice
        m = Matcher(Grammar.from_gbnf(gbnf + extra), smollm2_vocab)
        assert m.accept_bytes(prefix)
        if memo is None:
            memo = m.compiled.table.trie.flat().slice_tokens
            memo.clear()
        before = dict(memo)
        _verdicts_agree(m.compiled, m.state)
        assert len(memo) == 1, "the slice was not premarked"
        if before:
            assert memo.keys() == before.keys()  # reused, not computed again


def _poisoned_tables(monkeypatch) -> np.ndarray:
    """A pool holding one released set of parser-state arrays whose first rows all point to
    state 2, a real state, and whose flags say filled and finishing up to the last owner's
    mark: a row read before it is written, or a flag left set, would send a walk somewhere
    wrong."""
    from formcast.engine import arrays

    monkeypatch.setattr(arrays, "_recycled", arrays._Pool(keep=2))
    capacity = 1 << 16  # DenseStates' default
    table = arrays.reserved_rows(capacity, 256)
    table[:4096] = 2
    finishes = np.ones(capacity, dtype=bool)
    filled = np.ones(capacity, dtype=bool)
    filled[4096:] = finishes[4096:] = False  # the last owner numbered 4096 states
    views = (filled.view(np.uint8), finishes.view(np.uint8))
    arrays.recycle(("parser states", capacity), (table, finishes, filled, views, 4096))
    return table


@pytest.mark.model
@pytest.mark.parametrize("pure_python", [False, True], ids=["c-walk", "numpy-walk"])
@pytest.mark.parametrize("name", ["json.gbnf", "any_of.schema.json", "c_like.gbnf"])
def test_a_recycled_table_gives_the_same_masks(smollm2_vocab, smollm2_tokenize, monkeypatch,
                                               name, pure_python):
    """A new parser-state table reuses the memory of a released one, rows and all (its pages
    are then committed already): every row is written before it is read, so the masks are
    those of a table fresh from the OS."""
    if pure_python:
        monkeypatch.setenv("FORMCAST_PURE_PYTHON", "1")
    path = next(p for p in GRAMMAR_PATHS if p.name == name)
    samples = path.with_name(path.name.split(".")[0] + ".samples.txt").read_text()
    lines = [line for line in samples.splitlines() if not line.startswith("%% ")]
    tokens = smollm2_tokenize("\n".join(lines).split("\n%%\n")[0].strip("\n"))[:60]
    compiled = Matcher(load_grammar(path), smollm2_vocab).compiled

    def masks() -> list[np.ndarray]:
        compiled.masks = MaskCache(compiled.automaton, compiled.parser, compiled.table)
        m = Matcher(compiled)
        out = []
        for token in tokens:
            out.append(m.next_token_mask().copy())
            assert m.accept_token(token)
        return out

    fresh = masks()
    table = _poisoned_tables(monkeypatch)
    recycled = masks()
    assert compiled.masks.dense.table is table  # it did take the released arrays
    for step, (want, got) in enumerate(zip(fresh, recycled, strict=True)):
        assert np.array_equal(want, got), step


@pytest.mark.model
def test_dropped_parser_states_give_back_arrays_with_every_flag_cleared(smollm2_vocab,
                                                                      monkeypatch):
    """The flags a dropped table's owner set are cleared up to its highest state number when
    the next owner takes the arrays: every set flag must lie below that mark."""
    from formcast.engine import arrays

    path = next(p for p in GRAMMAR_PATHS if p.name == "tree.schema.json")
    compiled = Matcher(load_grammar(path), smollm2_vocab).compiled
    dense = DenseStates(compiled.parser)
    compiled.masks.dense = dense
    monkeypatch.setattr(arrays, "_recycled", arrays._Pool(keep=2))  # for dense's arrays only
    m = Matcher(compiled)
    for piece in ['{"title": "A", "root": {"heading": "B", "kind": "part", "children": [',
                  '{"heading": "C", "kind": "note", "children": []}]}}']:
        for byte in piece.encode():
            m.next_token_mask()
            assert m.accept_bytes(bytes([byte]))
    flags = dense.filled.copy(), dense.finishes.copy()
    assert flags[0].any() and flags[1].any()
    compiled.masks.dense = None
    del dense
    table, finishes, filled, _views, used = arrays.take_recycled(("parser states", 1 << 16))
    assert not filled[used:].any() and not finishes[used:].any()
    assert np.array_equal(filled, flags[0]) and np.array_equal(finishes, flags[1])


@needs_native
def test_tokens_needing_context_come_as_sorted_trie_rows():
    """Both walks report the tokens that return below a frame as sorted trie rows (not ids):
    the exact walk that decides them takes rows, and a conversion per cold mask cost numpy
    calls."""
    m = _nested_json_matcher()
    (kernel,) = [k for k in m.state if len(k) > 1][:1]
    table = m.compiled.table
    dense_a, dense_b = DenseStates(m.compiled.parser), DenseStates(m.compiled.parser)
    top = kernel[-1]
    got = classify_tokens_native(dense_a, table, dense_a.plain_id(top))
    want = classify_tokens_numpy(dense_b, table, dense_b.plain_id(top))
    assert got.needs_context.size  # "]]" and "]," leave the innermost list
    assert np.array_equal(got.needs_context, want.needs_context)
    assert np.all(np.diff(got.needs_context) > 0)
    tokens = {table.token_bytes[t] for t in table.trie.ids[got.needs_context]}
    assert {b"]]", b"],"} <= tokens


@needs_native
def test_a_walk_into_a_mask_keeps_its_bits():
    """The exact walk of a several-frame state's context tokens may set its bits in the mask
    being built: the result is that mask's bits or the walk's, nothing cleared."""
    m = _nested_json_matcher()
    table = m.compiled.table
    (kernel,) = [k for k in m.state if len(k) > 1][:1]
    probe = DenseStates(m.compiled.parser)
    rows = classify_tokens_native(probe, table, probe.plain_id(kernel[-1])).needs_context
    fresh = DenseStates(m.compiled.parser)
    alone = classify_tokens_native(fresh, table, fresh.intern(m.state), only_rows=rows,
                                   follow=mask_cache._NO_BYTES)
    before = np.zeros(table.packed_bytes, dtype=np.uint8)
    before[0] = 0b1010_0101  # bits the walk would not set on its own
    into = before.copy()
    again = DenseStates(m.compiled.parser)
    got = classify_tokens_native(again, table, again.intern(m.state), only_rows=rows,
                                 follow=mask_cache._NO_BYTES, into=into)
    assert got.allowed is into
    assert np.array_equal(into, before | alone.allowed)
    assert alone.allowed.any()
