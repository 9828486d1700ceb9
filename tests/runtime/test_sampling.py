"""Mask application, clipped mass and seeded sampling (pure numpy, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from formcast.errors import GenerationError
from formcast.runtime.sampling import Sampler, choose, restrict, softmax

V = 4096


def _logits(seed: int = 0, n: int = V) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=n) * 3).astype(np.float32)


def _reference_clipped(logits: np.ndarray, mask: np.ndarray) -> float:
    p = np.exp(logits.astype(np.float64) - logits.max())
    p /= p.sum()
    return float(p[~mask].sum())


@pytest.mark.parametrize("allowed_share", [0.001, 0.3, 0.7, 0.999])
def test_clipped_mass_is_softmax_mass_of_banned_tokens(allowed_share):
    logits = _logits(1)
    mask = np.random.default_rng(2).random(V) < allowed_share
    mask[7] = True
    cands = restrict(logits, mask)
    assert cands.clipped_mass == pytest.approx(_reference_clipped(logits, mask), abs=1e-5)


def test_clipped_mass_is_zero_without_mask_and_for_full_mask():
    logits = _logits(3)
    assert restrict(logits, None).clipped_mass == 0.0
    assert restrict(logits, np.ones(V, dtype=bool)).clipped_mass == pytest.approx(0.0, abs=1e-7)


def test_clipped_mass_near_one_when_mask_removes_the_model_favourite():
    logits = np.zeros(V, dtype=np.float32)
    logits[10] = 30.0
    mask = np.ones(V, dtype=bool)
    mask[10] = False
    assert restrict(logits, mask).clipped_mass > 0.999


@pytest.mark.parametrize("allowed_share", [0.01, 0.9])
def test_greedy_picks_best_allowed_token_never_a_banned_one(allowed_share):
    logits = _logits(4)
    mask = np.random.default_rng(5).random(V) < allowed_share
    mask[int(np.argmax(logits))] = False  # the unconstrained favourite is banned
    token = choose(restrict(logits, mask), temperature=0.0)
    allowed_ids = np.flatnonzero(mask)
    assert mask[token]
    assert token == allowed_ids[int(np.argmax(logits[allowed_ids]))]


def test_restrict_does_not_modify_the_caller_logits():
    logits = _logits(6)
    before = logits.copy()
    mask = np.ones(V, dtype=bool)
    mask[::3] = False
    restrict(logits, mask)
    np.testing.assert_array_equal(logits, before)


def test_dead_end_mask_and_wrong_size_are_clear_errors():
    logits = _logits(7)
    with pytest.raises(GenerationError, match="allows no token"):
        restrict(logits, np.zeros(V, dtype=bool))
    with pytest.raises(GenerationError, match="different vocabulary"):
        restrict(logits, np.ones(V + 1, dtype=bool))


@pytest.mark.parametrize("allowed_share", [None, 0.02, 0.9])
def test_sampling_is_reproducible_with_a_seed_and_stays_in_the_mask(allowed_share):
    logits = _logits(8)
    mask = None if allowed_share is None else np.random.default_rng(9).random(V) < allowed_share
    runs = []
    for _ in range(2):
        sampler = Sampler(temperature=1.0, top_p=0.9, seed=1234)
        runs.append([sampler.sample(logits, mask)[0] for _ in range(50)])
    assert runs[0] == runs[1]
    if mask is not None:
        assert all(mask[t] for t in runs[0])


def test_temperature_sampling_follows_the_renormalised_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float64)).astype(np.float32)
    mask = np.array([True, True, False, True])
    sampler = Sampler(temperature=1.0, seed=0)
    draws = np.array([sampler.sample(logits, mask)[0] for _ in range(20000)])
    freq = np.bincount(draws, minlength=4) / len(draws)
    expected = np.array([0.5, 0.3, 0.0, 0.05]) / 0.85  # conditioning on the allowed set
    np.testing.assert_allclose(freq, expected, atol=0.015)


def test_low_temperature_approaches_greedy_and_high_flattens():
    logits = np.array([2.0, 1.0, 0.0], dtype=np.float32)
    cold = Sampler(temperature=0.05, seed=1)
    assert {cold.sample(logits)[0] for _ in range(200)} == {0}
    hot = Sampler(temperature=50.0, seed=1)
    freq = np.bincount([hot.sample(logits)[0] for _ in range(6000)], minlength=3) / 6000
    assert freq.min() > 0.28


@pytest.mark.parametrize("n", [50, 5000])  # below and above the top-p prefilter size
def test_top_p_samples_only_inside_the_nucleus(n):
    logits = _logits(10, n)
    probs = softmax(logits)
    order = np.argsort(probs)[::-1]
    cdf = np.cumsum(probs[order])
    nucleus = set(order[: int(np.searchsorted(cdf, 0.5)) + 1].tolist())
    sampler = Sampler(temperature=1.0, top_p=0.5, seed=3)
    picks = {sampler.sample(logits)[0] for _ in range(3000)}
    assert picks <= nucleus
    assert len(picks) == len(nucleus)  # every nucleus member is reachable


def test_flat_distribution_top_p_falls_back_to_full_sort():
    # 5000 equal logits: the best 256 hold only ~5% of the mass, so the prefilter cannot
    # answer and the full sort must be used; the nucleus is then ~4500 tokens.
    logits = np.zeros(5000, dtype=np.float32)
    sampler = Sampler(temperature=1.0, top_p=0.9, seed=4)
    picks = {sampler.sample(logits)[0] for _ in range(2000)}
    assert len(picks) > 1000


def test_invalid_settings_are_rejected():
    with pytest.raises(GenerationError, match="temperature"):
        Sampler(temperature=-1.0)
    with pytest.raises(GenerationError, match="top_p"):
        Sampler(temperature=1.0, top_p=0.0)
    with pytest.raises(GenerationError, match="1-D"):
        restrict(np.zeros((2, 3), dtype=np.float32), None)
