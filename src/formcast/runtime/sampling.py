"""Logits -> next token: apply a grammar mask, measure what it clipped, then sample.

Pure numpy and model-free, so every runtime (llama.cpp, transformers) shares one tested
implementation. Nothing here loops over the vocabulary in Python; the cost of a step is a few
vectorised passes over the logits.

Two facts shape the code:

* The clipped probability mass is defined on the *model's* distribution (softmax at
  temperature 1, before masking), so it is computed from the raw logits, not the sampled ones.
* Grammar masks are lopsided: inside structure almost everything is banned, inside a string
  almost everything is allowed. Gathering the allowed ids (or scattering ``-inf`` onto the banned
  ones), whichever set is smaller, keeps both cases cheap; ``np.where`` over the full vocabulary
  costs several times more on a 49k vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formcast.errors import GenerationError

# Above this many candidates, top-p first tries the best ``_TOP_P_PREFILTER`` by partition
# (O(n)) before falling back to a full sort.
_TOP_P_PREFILTER = 256


@dataclass(frozen=True)
class Candidates:
    """The tokens a step may choose from, with their logits.

    ``ids is None`` means "the whole vocabulary" and ``logits`` is then full length, with ``-inf``
    on banned tokens; otherwise ``logits[i]`` belongs to token ``ids[i]``.
    """

    ids: np.ndarray | None
    logits: np.ndarray
    clipped_mass: float

    def token_id(self, index: int) -> int:
        return int(index if self.ids is None else self.ids[index])


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over a 1-D array (``-inf`` entries get probability 0)."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - np.max(z))
    return e / e.sum()


def restrict(logits: np.ndarray, mask: np.ndarray | None) -> Candidates:
    """Apply ``mask`` (bool, True = allowed) to ``logits`` and measure the clipped mass.

    ``logits`` is never modified. Raises ``GenerationError`` when the mask allows nothing (the
    grammar reached a dead end, which a correct matcher never does before accepting).
    """
    logits = np.asarray(logits)
    if logits.ndim != 1:
        raise GenerationError(f"expected 1-D logits, got shape {logits.shape}")
    if mask is None:
        return Candidates(None, logits, 0.0)
    if mask.shape != logits.shape:
        raise GenerationError(
            f"mask has {mask.shape[0]} entries but the model has {logits.shape[0]} logits; "
            "the matcher was built for a different vocabulary")
    n_allowed = int(np.count_nonzero(mask))
    if n_allowed == 0:
        raise GenerationError("the grammar mask allows no token at this step (dead end)")

    # Unnormalised probabilities at temperature 1; float32 is plenty for a mass estimate.
    shifted = np.exp(logits - np.max(logits))
    total = float(shifted.sum())
    if n_allowed * 2 <= mask.shape[0]:
        ids = np.flatnonzero(mask)
        kept = float(shifted[ids].sum())
        clipped = max(0.0, 1.0 - kept / total)
        return Candidates(ids, logits[ids], clipped)
    banned = np.flatnonzero(~mask)
    clipped = min(1.0, float(shifted[banned].sum()) / total)
    masked = logits.copy()
    masked[banned] = -np.inf
    return Candidates(None, masked, clipped)


def choose(cands: Candidates, *, temperature: float = 0.0, top_p: float = 1.0,
           rng: np.random.Generator | None = None) -> int:
    """Pick a token id from ``cands``: greedy when ``temperature <= 0``, else temperature and
    nucleus (top-p) sampling with ``rng``."""
    logits = cands.logits
    if temperature <= 0.0:
        return cands.token_id(int(np.argmax(logits)))
    if not 0.0 < top_p <= 1.0:
        raise GenerationError(f"top_p must be in (0, 1], got {top_p}")
    if rng is None:
        rng = np.random.default_rng()
    probs = softmax(logits / temperature)
    order: np.ndarray | None = None
    if top_p < 1.0:
        order = _nucleus(probs, top_p)
        probs = probs[order]
    cdf = np.cumsum(probs)
    pick = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    pick = min(pick, len(cdf) - 1)
    index = int(order[pick]) if order is not None else pick
    return cands.token_id(index)


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the smallest most-probable set whose mass reaches ``top_p``, best first."""
    if probs.shape[0] > _TOP_P_PREFILTER:
        top = np.argpartition(probs, -_TOP_P_PREFILTER)[-_TOP_P_PREFILTER:]
        top = top[np.argsort(probs[top])[::-1]]
        cdf = np.cumsum(probs[top])
        if cdf[-1] >= top_p:
            return top[: int(np.searchsorted(cdf, top_p)) + 1]
    order = np.argsort(probs)[::-1]
    cdf = np.cumsum(probs[order])
    return order[: int(np.searchsorted(cdf, top_p)) + 1]


class Sampler:
    """Seeded sampling settings for one generation.

    The same seed, logits and masks always give the same tokens, so a constrained run can be
    replayed exactly.
    """

    def __init__(self, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None) -> None:
        if temperature < 0.0:
            raise GenerationError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise GenerationError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def sample(self, logits: np.ndarray, mask: np.ndarray | None = None) -> tuple[int, float]:
        """Return ``(token_id, clipped_mass)`` for one step."""
        cands = restrict(logits, mask)
        token = choose(cands, temperature=self.temperature, top_p=self.top_p, rng=self.rng)
        return token, cands.clipped_mass
