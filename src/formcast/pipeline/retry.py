"""Bounded retries: the caller sets the budgets, the library keeps them exactly.

"Retry until it works" burns tokens and latency on errors the model cannot fix, so every
retry loop here runs inside a ``RetryPolicy``: a cap on attempts (the first one included), a
token budget across all attempts, a backoff schedule, and optionally a latency budget from
which the number of attempts is derived (chapter X: ``P99 ~= N*T + B``, so ``N`` is the
largest count whose worst case ``N*T + B(N)`` fits the budget).

``RetryBudget`` is the running account of one call: it hands out ``max_tokens`` per attempt so
the total never exceeds the budget, and raises ``BudgetExhaustedError`` naming the budget that
ran out, after how many attempts and tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from formcast.errors import BudgetExhaustedError, PolicyError


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one ``generate`` call may try. Every limit is explicit.

    - ``max_attempts``: attempts including the first.
    - ``token_budget``: generated tokens summed over all attempts (``None``: no budget).
    - ``max_tokens``: the most tokens one attempt may generate.
    - ``backoff_s`` / ``backoff_factor`` / ``backoff_max_s``: wait ``backoff_s * factor**(k-1)``
      (capped) after failed attempt ``k``; 0 by default, since a local model is not overloaded.
    - ``latency_budget_s`` with ``attempt_time_s``: the worst-case time the caller accepts and
      the expected time of one attempt; attempts are capped so ``N*T + B(N)`` fits, and a
      retry is not started when the time already spent says it would overrun.
    - ``salvage``: allow layer 3 (a degraded, partial result) when the budgets run out.
    - ``accept_lossy_repairs``: accept a value whose repair may have changed its meaning
      (a string closed at the end of a cut-off output, json_repair guesses). Off by default.
    - ``accept_truncated``: accept an output cut off by ``max_tokens`` once its brackets are
      closed (its arrays may be short). Off by default.
    - ``feedback_errors``: how many errors a retry prompt lists.
    """

    max_attempts: int = 3
    token_budget: int | None = 4000
    max_tokens: int = 1024
    backoff_s: float = 0.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 30.0
    latency_budget_s: float | None = None
    attempt_time_s: float | None = None
    salvage: bool = False
    accept_lossy_repairs: bool = False
    accept_truncated: bool = False
    feedback_errors: int = 5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise PolicyError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.token_budget is not None and self.token_budget < 1:
            raise PolicyError(f"token_budget must be positive or None, got {self.token_budget}")
        if self.max_tokens < 1:
            raise PolicyError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.backoff_s < 0 or self.backoff_factor < 1 or self.backoff_max_s < 0:
            raise PolicyError("backoff_s and backoff_max_s must be >= 0 and backoff_factor >= 1")
        if self.latency_budget_s is not None:
            if self.attempt_time_s is None or self.attempt_time_s <= 0:
                raise PolicyError("a latency budget needs attempt_time_s, the expected time of "
                                  "one attempt, to derive the number of attempts")
            attempts_for_latency(self.latency_budget_s, self.attempt_time_s,
                                 backoff_s=self.backoff_s, backoff_factor=self.backoff_factor,
                                 backoff_max_s=self.backoff_max_s)

    @classmethod
    def from_latency_budget(cls, p99_s: float, attempt_time_s: float, **options: object,
                            ) -> RetryPolicy:
        """A policy whose attempt cap is derived from a worst-case latency budget."""
        probe = cls(**{**options, "max_attempts": 1})  # type: ignore[arg-type]
        n = attempts_for_latency(p99_s, attempt_time_s, backoff_s=probe.backoff_s,
                                 backoff_factor=probe.backoff_factor,
                                 backoff_max_s=probe.backoff_max_s)
        return replace(probe, max_attempts=n, latency_budget_s=p99_s,
                       attempt_time_s=attempt_time_s)

    @property
    def effective_max_attempts(self) -> int:
        """``max_attempts``, lowered to what the latency budget allows when one is set."""
        if self.latency_budget_s is None or self.attempt_time_s is None:
            return self.max_attempts
        return min(self.max_attempts, attempts_for_latency(
            self.latency_budget_s, self.attempt_time_s, backoff_s=self.backoff_s,
            backoff_factor=self.backoff_factor, backoff_max_s=self.backoff_max_s))

    def backoff_after(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return backoff_delay(attempt, self.backoff_s, self.backoff_factor, self.backoff_max_s)


def backoff_delay(attempt: int, base_s: float, factor: float = 2.0, max_s: float = 30.0) -> float:
    """Exponential backoff after attempt ``attempt``: ``base * factor**(attempt-1)``, capped."""
    if base_s <= 0:
        return 0.0
    return min(max_s, base_s * factor ** (attempt - 1))


def total_backoff(attempts: int, base_s: float, factor: float = 2.0, max_s: float = 30.0) -> float:
    """``B(N)``: the waits between ``attempts`` attempts (there are ``attempts - 1`` of them)."""
    return sum(backoff_delay(k, base_s, factor, max_s) for k in range(1, attempts))


def attempts_for_latency(p99_s: float, attempt_time_s: float, *, backoff_s: float = 0.0,
                         backoff_factor: float = 2.0, backoff_max_s: float = 30.0,
                         limit: int = 100) -> int:
    """The largest ``N`` with ``N*T + B(N) <= P99`` (chapter X, solved for N).

    Raises ``PolicyError`` when not even one attempt fits: the budget cannot be met, and
    saying so beats silently overrunning it.
    """
    if attempt_time_s <= 0:
        raise PolicyError(f"attempt_time_s must be positive, got {attempt_time_s}")
    if p99_s < attempt_time_s:
        raise PolicyError(f"the latency budget {p99_s:g} s is shorter than one attempt "
                          f"({attempt_time_s:g} s)")
    n = 1
    while n < limit and worst_case_latency(n + 1, attempt_time_s, backoff_s=backoff_s,
                                           backoff_factor=backoff_factor,
                                           backoff_max_s=backoff_max_s) <= p99_s + 1e-12:
        n += 1
    return n


def worst_case_latency(attempts: int, attempt_time_s: float, *, backoff_s: float = 0.0,
                       backoff_factor: float = 2.0, backoff_max_s: float = 30.0) -> float:
    """``N*T + B(N)``: the P99 estimate of chapter X when every attempt is used."""
    return attempts * attempt_time_s + total_backoff(attempts, backoff_s, backoff_factor,
                                                     backoff_max_s)


def expected_attempts(success_rate: float, max_attempts: int) -> float:
    """Mean attempts per call when each attempt succeeds independently with ``success_rate``:
    ``sum_{k<N} (1-p)^k`` (attempt k+1 happens only if the first k all failed)."""
    if not 0.0 <= success_rate <= 1.0:
        raise PolicyError(f"success_rate must lie in [0, 1], got {success_rate}")
    fail = 1.0 - success_rate
    return math.fsum(fail ** k for k in range(max_attempts))


class RetryBudget:
    """The running account of one call against a ``RetryPolicy``.

    ``start_attempt()`` returns the ``max_tokens`` for the next attempt or raises
    ``BudgetExhaustedError``; ``record(tokens, seconds)`` books what the attempt used. The clock
    and sleep are injectable so tests never wait.
    """

    def __init__(self, policy: RetryPolicy, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.policy = policy
        self.clock = clock
        self.sleep = sleep
        self.attempts = 0
        self.tokens = 0
        self.attempt_seconds: list[float] = []
        self.started = clock()
        self.max_attempts = policy.effective_max_attempts

    @property
    def tokens_left(self) -> int | None:
        budget = self.policy.token_budget
        return None if budget is None else max(0, budget - self.tokens)

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def exhausted_budget(self) -> str | None:
        """Which budget forbids another attempt now ("attempts", "tokens", "latency"), if any."""
        if self.attempts >= self.max_attempts:
            return "attempts"
        left = self.tokens_left
        if left is not None and left <= 0:
            return "tokens"
        if self.attempts and self.policy.latency_budget_s is not None:
            wait = self.policy.backoff_after(self.attempts)
            if self.elapsed + wait + self._expected_attempt_time() > self.policy.latency_budget_s:
                return "latency"
        return None

    def _expected_attempt_time(self) -> float:
        observed = (sum(self.attempt_seconds) / len(self.attempt_seconds)
                    if self.attempt_seconds else 0.0)
        return max(self.policy.attempt_time_s or 0.0, observed)

    def start_attempt(self, errors: list | None = None, last_output: str | None = None) -> int:
        """Wait out the backoff, then open the next attempt; returns its ``max_tokens``."""
        budget = self.exhausted_budget()
        if budget is not None:
            raise self.exhausted(budget, errors, last_output)
        if self.attempts:
            wait = self.policy.backoff_after(self.attempts)
            if wait > 0:
                self.sleep(wait)
        self.attempts += 1
        left = self.tokens_left
        return self.policy.max_tokens if left is None else min(self.policy.max_tokens, left)

    def record(self, tokens: int, seconds: float) -> None:
        self.tokens += max(0, int(tokens))
        self.attempt_seconds.append(max(0.0, seconds))

    def exhausted(self, budget: str, errors: list | None = None,
                  last_output: str | None = None) -> BudgetExhaustedError:
        """The error for running out of ``budget``, with the figures a caller needs."""
        limits = {
            "attempts": f"the attempt cap of {self.max_attempts}",
            "tokens": f"the token budget of {self.policy.token_budget}",
            "latency": f"the latency budget of {self.policy.latency_budget_s:g} s"
            if self.policy.latency_budget_s is not None else "the latency budget",
        }
        message = (f"no valid result within {limits[budget]}: {self.attempts} attempt(s), "
                   f"{self.tokens} token(s), {self.elapsed:.2f} s")
        if errors:
            shown = "; ".join(str(e) for e in errors[:3])
            more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
            message += f"; last errors: {shown}{more}"
        return BudgetExhaustedError(message, budget=budget, attempts=self.attempts,
                                    tokens=self.tokens, errors=errors, last_output=last_output)
