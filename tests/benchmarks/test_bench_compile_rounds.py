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
