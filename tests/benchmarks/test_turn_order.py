"""The benchmark's turn order: no engine always compiles right after the same other engine.

A compile's time depends on what ran just before it (xgrammar's compile sweeps the CPU caches),
so a fixed order would bill that to whichever engine follows it, every round.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _measure import turn_order  # noqa: E402


@pytest.mark.parametrize("n_engines", [2, 3])
def test_every_engine_follows_every_other_equally_often(n_engines: int) -> None:
    stream = [i for r in range(12) for i in turn_order(n_engines, r)]
    pairs = Counter(zip(stream, stream[1:], strict=False))
    assert all(a != b for a, b in pairs)  # never the same engine twice in a row
    expected = {(a, b) for a in range(n_engines) for b in range(n_engines) if a != b}
    assert set(pairs) == expected
    assert max(pairs.values()) - min(pairs.values()) <= 1


def test_each_round_is_every_engine_once() -> None:
    for r in range(4):
        assert sorted(turn_order(3, r)) == [0, 1, 2]
    assert turn_order(1, 1) == [0]
