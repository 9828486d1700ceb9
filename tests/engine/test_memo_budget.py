"""The process-wide bound on memoised masks: many grammars share one budget."""

from __future__ import annotations

import numpy as np
import pytest

from formcast.engine import memo_budget
from formcast.engine.mask_cache import MaskCache, pack_bits, set_bits
from formcast.engine.matcher import Matcher
from formcast.engine.memo_budget import MemoBudget, MemoStore
from formcast.engine.vocab import Vocabulary
from formcast.grammar.ir import Grammar


def test_oldest_entries_of_any_store_are_evicted_beyond_the_limit():
    budget = MemoBudget(limit_bytes=120)
    first, second = MemoStore(), MemoStore()
    for i in range(3):
        first[i] = b"x"
        budget.charge(first, i, 30)
    second["a"] = b"y"
    budget.charge(second, "a", 30)
    assert budget.used_bytes == 120 and not budget.evictions
    second["b"] = b"z"
    budget.charge(second, "b", 30)
    assert list(first) == [1, 2] and list(second) == ["a", "b"]
    assert budget.used_bytes == 120 and budget.evictions == 1


def test_an_entry_larger_than_the_limit_is_kept_until_the_next_one():
    budget = MemoBudget(limit_bytes=10)
    store = MemoStore(big=1)
    budget.charge(store, "big", 1000)
    assert store == {"big": 1}
    store["next"] = 2
    budget.charge(store, "next", 5)
    assert store == {"next": 2} and budget.used_bytes == 5


def test_charging_a_key_again_replaces_its_size():
    budget = MemoBudget(limit_bytes=100)
    store = MemoStore(k=1)
    budget.charge(store, "k", 40)
    budget.charge(store, "k", 60)
    assert budget.used_bytes == 60 and store == {"k": 1}


def test_a_dropped_store_leaves_the_budget_at_once():
    budget = MemoBudget(limit_bytes=100)
    gone, kept = MemoStore(a=1, b=2), MemoStore(c=3)
    budget.charge(gone, "a", 40)
    budget.charge(gone, "b", 40)
    budget.charge(kept, "c", 10)
    del gone
    assert budget.used_bytes == 10
    for key in "defg":
        kept[key] = 0
        budget.charge(kept, key, 20)  # 90 bytes: nothing of the live store is evicted
    assert set(kept) == set("cdefg") and budget.evictions == 0


def test_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("FORMCAST_MASK_CACHE_MB", "2.5")
    assert MemoBudget().limit_bytes == int(2.5 * 2**20)
    monkeypatch.setenv("FORMCAST_MASK_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="FORMCAST_MASK_CACHE_MB"):
        MemoBudget()


def test_grammars_share_one_budget_and_evicted_masks_come_back_the_same():
    vocab = Vocabulary.from_tokens([b""] + [bytes([c]) for c in b"abc"] + [b"ab", b"ca"],
                                   eos_ids=[0])
    budget = MemoBudget(limit_bytes=3 * vocab.size)  # three masks in all
    caches, expected = [], []
    for pattern in ["a(b|c)*", "(ab|c)+a", "c?a{2,3}"]:
        compiled = Matcher(Grammar.from_regex(pattern), vocab).compiled
        cache = MaskCache(compiled.automaton, compiled.parser, compiled.table, budget=budget)
        states = [compiled.parser.initial, compiled.parser.advance(compiled.parser.initial, b"a")]
        masks = [cache.mask_for(s).copy() for s in states]
        caches.append((cache, states))
        expected.append(masks)
    assert budget.used_bytes <= 3 * vocab.size + 2 * vocab.size  # masks plus verdicts in flight
    assert budget.evictions > 0
    assert sum(len(cache._masks) for cache, _ in caches) <= 3
    for (cache, states), masks in zip(caches, expected, strict=True):
        for state, mask in zip(states, masks, strict=True):
            assert np.array_equal(cache.mask_for(state), mask)


def test_default_budget_is_shared_by_default():
    vocab = Vocabulary.from_tokens([b"", b"a"], eos_ids=[0])
    compiled = Matcher(Grammar.from_regex("a+"), vocab).compiled
    assert compiled.masks.budget is memo_budget.default_budget


@pytest.mark.parametrize("count", [1, 2, 15, 16, 300])
@pytest.mark.parametrize("value", [True, False])
def test_set_bits_matches_a_bool_mask(count: int, value: bool) -> None:
    """The EOS bits of an accepting state's mask (one or two ids, set one by one) and large
    id sets (set by numpy) land on the same bits a bool mask packs to, duplicates included."""
    rng = np.random.default_rng(count)
    size = 1000
    start = rng.random(size) < 0.5
    ids = rng.integers(0, size, count)
    ids = np.concatenate([ids, ids[:1]])  # a repeated id
    bits = pack_bits(start, 128)
    set_bits(bits, ids, value)
    expected = start.copy()
    expected[ids] = value
    assert np.array_equal(bits, pack_bits(expected, 128))
