"""Small array helpers of the engine: what they return must equal numpy's own routines."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from formcast.engine import token_trie
from formcast.engine.arrays import sorted_unique
from formcast.engine.token_trie import TokenTrie


@given(st.lists(st.integers(-5, 40), max_size=60))
def test_sorted_unique_is_numpy_unique(values):
    array = np.array(values, dtype=np.int64)
    assert np.array_equal(sorted_unique(array), np.unique(array))


@given(ids=st.lists(st.lists(st.integers(-3, 70), max_size=30), min_size=1, max_size=3))
def test_rows_of_sorts_few_ids_as_it_marks_many(ids):
    """``rows_of`` sorts a few token ids and marks many in an array: the same rows either way,
    sorted, without repeats, ids outside the vocabulary or the trie (empty tokens) dropped."""
    tokens = [b"", b"a", b"ab", b"b", b"ba", b"\xff", b"abc"] * 9  # ids 0, 7, ... are empty
    trie = TokenTrie(tokens, len(tokens))
    arrays = [np.array(part, dtype=np.int64) for part in ids]
    few = trie.rows_of(*arrays)
    saved = token_trie._FEW_ROWS
    token_trie._FEW_ROWS = -1  # every call marks
    try:
        many = trie.rows_of(*arrays)
    finally:
        token_trie._FEW_ROWS = saved
    assert np.array_equal(few, many)
    wanted = {t for part in ids for t in part if 0 <= t < len(tokens) and tokens[t]}
    assert sorted(trie.ids[few].tolist()) == sorted(wanted)
    assert np.all(np.diff(few) > 0)


@given(ids=st.lists(st.integers(0, 62), max_size=40))
def test_rows_of_walked_ids_are_rows_of_them(ids):
    """Token ids as a walk reports them (usually in trie order, confirmed instead of sorted):
    the rows ``rows_of`` gives, whatever their order, repeats or empty tokens."""
    tokens = [b"", b"a", b"ab", b"b", b"ba", b"\xff", b"abc"] * 9
    trie = TokenTrie(tokens, len(tokens))
    array = np.array(ids, dtype=np.int64)
    assert np.array_equal(trie.rows_of_walked(array), trie.rows_of(array))
    in_order = trie.ids[trie.rows_of(array)]  # the walk's own order
    assert np.array_equal(trie.rows_of_walked(in_order), trie.rows_of(in_order))
