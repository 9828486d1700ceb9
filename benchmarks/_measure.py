"""Timing one engine on one workload: fresh compiles, then cold and warm passes over the samples.

A pass walks every sample token by token with a new matcher: before each token it times the
call that fills the packed bitmask, checks that the mask allows the token, and accepts it; after
the last token it times one more mask and checks that the matcher accepts. The cold pass is the
first over a freshly compiled grammar; the warm pass repeats it with new matchers of the same
compiled grammar, so engines that memoise masks across matchers show it there.
"""

from __future__ import annotations

import gc
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from _engines import CompileFailed, Engine
from _workloads import Workload


@dataclass
class PassResult:
    """Step times of one pass and what went wrong in it."""

    times_ns: list[int] = field(default_factory=list)
    mask_digests: list[bytes] = field(default_factory=list)  # cold pass only, for agreement
    problems: list[str] = field(default_factory=list)

    def absorb(self, other: PassResult) -> None:
        """Pool another pass of the same kind into this one."""
        self.times_ns.extend(other.times_ns)
        self.mask_digests.extend(other.mask_digests)
        self.problems.extend(p for p in other.problems if p not in self.problems)

    def percentile_us(self, q: float) -> float | None:
        if not self.times_ns:
            return None
        return float(np.percentile(np.asarray(self.times_ns, dtype=np.float64), q)) / 1000.0


@dataclass
class RunResult:
    """Everything measured for one (workload, engine) pair."""

    workload: str
    section: str
    engine: str
    na_reason: str | None = None
    compile_ms: list[float] = field(default_factory=list)
    cold: PassResult | None = None
    warm: PassResult | None = None
    agreement: float | None = None  # share of cold steps whose mask equals the baseline's

    @property
    def steps(self) -> int:
        """Mask steps in one pass over the samples."""
        return len(self.warm.times_ns) if self.warm else 0

    @property
    def compile_p50_ms(self) -> float | None:
        return float(np.median(self.compile_ms)) if self.compile_ms else None

    @property
    def problems(self) -> list[str]:
        found: list[str] = []
        for p in (self.cold, self.warm):
            if p is not None:
                found.extend(x for x in p.problems if x not in found)
        return found


def _token_allowed(row: np.ndarray, token_id: int) -> bool:
    return bool((int(row[token_id >> 5]) >> (token_id & 31)) & 1)


def _digest(row: np.ndarray, keep: np.ndarray | None) -> bytes:
    data = row if keep is None else row & keep
    return hashlib.blake2b(data.tobytes(), digest_size=8).digest()


def _run_pass(engine: Engine, compiled: Any, workload: Workload, record_digests: bool,
              keep: np.ndarray | None = None) -> PassResult:
    result = PassResult()
    bitmask = engine.allocate()
    row = engine.as_numpy(bitmask)[0]
    fill = engine.fill_mask
    clock = time.perf_counter_ns
    for index, tokens in enumerate(workload.tokens):
        label = f"sample {index + 1}"
        matcher = engine.new_matcher(compiled)
        for step, token_id in enumerate(tokens):
            t0 = clock()
            fill(matcher, bitmask)
            result.times_ns.append(clock() - t0)
            if record_digests:
                result.mask_digests.append(_digest(row, keep))
            if not _token_allowed(row, token_id):
                result.problems.append(f"{label}: mask excludes token {step} (id {token_id})")
            try:
                ok = engine.accept(matcher, token_id)
            except Exception as exc:  # noqa: BLE001 - an engine error is a finding, not a crash
                result.problems.append(f"{label}: accepting token {step} raised {type(exc).__name__}: {exc}")
                ok = False
            if not ok:
                result.problems.append(f"{label}: token {step} (id {token_id}) rejected")
                break
        else:
            t0 = clock()
            fill(matcher, bitmask)
            result.times_ns.append(clock() - t0)
            if record_digests:
                result.mask_digests.append(_digest(row, keep))
            if not engine.is_accepting(matcher):
                result.problems.append(f"{label}: not accepting after the last token")
    return result


def keep_mask(n_words: int, ignored_ids: list[int]) -> np.ndarray:
    """An int32 row with the bits of ``ignored_ids`` cleared (used before comparing masks)."""
    keep = np.full(n_words, 0xFFFFFFFF, dtype=np.uint32)
    for tid in ignored_ids:
        keep[tid >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (tid & 31)))
    return keep.view(np.int32)


def turn_order(n_engines: int, round_index: int) -> list[int]:
    """The order in which the engines take their turns in round ``round_index``.

    Even rounds go 0, 1, ..., n-1 and odd rounds 0, n-1, ..., 1. For two or three engines
    every engine then follows every other equally often over two rounds (with three:
    0 1 2 | 0 2 1 | 0 1 2 ... meets each of the six ordered pairs once). The time a compile
    takes depends on what ran just before it: a compile right after xgrammar's (which
    sweeps the CPU caches) was 5-10% slower in a fixed order; a fixed order gave that
    penalty to one engine only.
    """
    order = list(range(n_engines))
    if round_index % 2 and n_engines > 2:
        order[1:] = reversed(order[1:])
    return order


def measure(engines: list[Engine], workload: Workload, repeats: int,
            keep: np.ndarray | None = None) -> list[RunResult]:
    """``repeats`` rounds in which each engine in turn does a fresh compile (timed) and a
    cold pass; then one warm pass each. One result per engine, in the order given.

    Taking turns round by round puts every engine's cold steps in the same stretches of time,
    so a burst of machine noise (this machine shares its cores) lands on all of them rather
    than on whichever engine it happened to meet. Cold step times are pooled over the rounds,
    so their p99 does not hang on one run. ``keep`` clears bits (special tokens the engines
    treat differently) before the first cold pass's masks are digested for the agreement
    figure; it does not touch what is timed.
    """
    results = [RunResult(workload.name, workload.section, e.name, cold=PassResult())
               for e in engines]
    last: list[Any] = [None] * len(engines)
    compiled: Any = None
    gc.collect()
    gc.disable()
    try:
        for repeat in range(max(1, repeats)):
            for i in turn_order(len(engines), repeat):
                engine = engines[i]
                out = results[i]
                if out.na_reason is not None:
                    continue
                # The previous compile is dropped before the next is timed (not freed inside it).
                last[i] = compiled = None
                try:
                    engine.before_compile()
                    t0 = time.perf_counter_ns()
                    compiled = engine.compile(workload)
                    out.compile_ms.append((time.perf_counter_ns() - t0) / 1e6)
                    cold = _run_pass(engine, compiled, workload, record_digests=repeat == 0,
                                     keep=keep)
                except Exception as exc:  # noqa: BLE001 - report and move on
                    out.na_reason = _failure(exc)
                    continue
                assert out.cold is not None
                out.cold.absorb(cold)
                last[i] = compiled
        for i, engine in enumerate(engines):
            if results[i].na_reason is None:
                try:
                    results[i].warm = _run_pass(engine, last[i], workload, record_digests=False)
                except Exception as exc:  # noqa: BLE001
                    results[i].na_reason = _failure(exc)
    finally:
        gc.enable()
    return results


def _failure(exc: Exception) -> str:
    if isinstance(exc, CompileFailed):
        return f"compile failed: {exc}"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"


def interleaved_compiles(engines: list[Engine], workload: Workload,
                         rounds: int) -> dict[str, list[float]]:
    """Compile times (ms) of ``rounds`` fresh compiles per engine, the engines taking turns
    within each round: a burst of machine noise then slows every engine alike, so the ratio
    of their medians holds still where separate timing windows made it wander by 30%.
    Engines that cannot compile the workload are left out (``measure`` reports why)."""
    times: dict[str, list[float]] = {e.name: [] for e in engines}
    failed: set[str] = set()
    gc.collect()
    gc.disable()
    try:
        for round_index in range(max(1, rounds)):
            for i in turn_order(len(engines), round_index):
                engine = engines[i]
                if engine.name in failed:
                    continue
                compiled: Any = None
                engine.before_compile()
                t0 = time.perf_counter_ns()
                try:
                    compiled = engine.compile(workload)
                except Exception:  # noqa: BLE001 - measure() reports the failure
                    failed.add(engine.name)
                    continue
                times[engine.name].append((time.perf_counter_ns() - t0) / 1e6)
                del compiled
    finally:
        gc.enable()
    return {name: ts for name, ts in times.items() if name not in failed}


def warm_up(engine: Engine, workload: Workload) -> str | None:
    """Pay one-time process costs (thread pools, lazy tables) before anything is timed."""
    try:
        engine.before_compile()
        compiled = engine.compile(workload)
        bitmask = engine.allocate()
        matcher = engine.new_matcher(compiled)
        for token_id in workload.tokens[0]:
            engine.fill_mask(matcher, bitmask)
            engine.accept(matcher, token_id)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


def set_agreement(results: list[RunResult], baseline: str) -> None:
    """Share of cold-pass steps where each engine's mask equals the baseline engine's mask."""
    by_workload: dict[str, RunResult] = {r.workload: r for r in results if r.engine == baseline}
    for r in results:
        base = by_workload.get(r.workload)
        if base is None or base.cold is None or r.cold is None:
            continue
        a, b = r.cold.mask_digests, base.cold.mask_digests
        if a and len(a) == len(b):
            r.agreement = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
