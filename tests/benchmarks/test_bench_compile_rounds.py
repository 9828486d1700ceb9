"""The benchmark's compile figure: fresh compiles with the engines taking turns, so a burst of
machine noise slows every engine alike instead of one engine's whole timing window."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _engines import Engine  # noqa: E402
from _measure import interleaved_compiles  # noqa: E402
from _workloads import Workload  # noqa: E402


class _Recording(Engine):
    def __init__(self, name: str, log: list[str], fails: bool = False) -> None:
        self.name = name
        self.log = log
        self.fails = fails
        self.cleared = 0

    def before_compile(self) -> None:
        self.cleared += 1

    def compile(self, workload: Workload) -> Any:
        self.log.append(self.name)
        if self.fails:
            raise RuntimeError("cannot compile this")
        return object()


WORKLOAD = Workload("w", "w.regex", "regex", "[a-z]+", ["abc"])


def test_engines_take_turns_and_each_compile_starts_fresh() -> None:
    log: list[str] = []
    a, b = _Recording("a", log), _Recording("b", log)
    times = interleaved_compiles([a, b], WORKLOAD, rounds=4)
    assert log == ["a", "b"] * 4
    assert a.cleared == b.cleared == 4
    assert [len(times["a"]), len(times["b"])] == [4, 4]
    assert all(t >= 0 for t in times["a"] + times["b"])


def test_an_engine_that_cannot_compile_is_left_out_after_one_try() -> None:
    log: list[str] = []
    good, bad = _Recording("good", log), _Recording("bad", log, fails=True)
    times = interleaved_compiles([good, bad], WORKLOAD, rounds=3)
    assert set(times) == {"good"} and len(times["good"]) == 3
    assert log.count("bad") == 1


class _Walkable(_Recording):
    """Compiles to a list of masks; a pass fills each in turn (one token, id 0, always ok)."""

    def allocate(self) -> Any:
        import numpy as np

        return np.zeros((1, 1), dtype=np.int32)

    def new_matcher(self, compiled: Any) -> Any:
        return compiled

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        self.log.append(f"{self.name}:mask")
        bitmask[0, 0] = 1

    def accept(self, matcher: Any, token_id: int) -> bool:
        return True

    def is_accepting(self, matcher: Any) -> bool:
        return True


def test_cold_passes_take_turns_and_a_failing_engine_is_reported() -> None:
    from _measure import measure

    log: list[str] = []
    workload = Workload("w", "w.regex", "regex", "[a-z]+", ["abc"])
    workload.tokens = [[0]]
    a, b, bad = _Walkable("a", log), _Walkable("b", log), _Walkable("bad", log, fails=True)
    results = measure([a, b, bad], workload, repeats=2)
    assert [r.engine for r in results] == ["a", "b", "bad"]
    # each round: a compiles and walks, then b, then bad fails (once, then it is skipped)
    assert log[:7] == ["a", "a:mask", "a:mask", "b", "b:mask", "b:mask", "bad"]
    assert log[7:13] == ["a", "a:mask", "a:mask", "b", "b:mask", "b:mask"]
    assert [len(r.compile_ms) for r in results[:2]] == [2, 2]
    assert all(r.steps == 2 and not r.problems for r in results[:2])
    assert results[2].na_reason and "cannot compile this" in results[2].na_reason
