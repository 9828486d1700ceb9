"""Bounded retries: the error summary reaches the next prompt, budgets hold exactly, and the
latency-derived attempt count follows chapter X (P99 ~= N*T + B)."""

from __future__ import annotations

import pytest
from pipeline_scripted import FakeClock, ScriptedGenerator

from formcast.errors import BudgetExhaustedError, PolicyError
from formcast.observe import PipelineMetrics
from formcast.pipeline import rules
from formcast.pipeline.pipeline import FEEDBACK_HEADER, Pipeline
from formcast.pipeline.retry import (
    RetryBudget,
    RetryPolicy,
    attempts_for_latency,
    backoff_delay,
    expected_attempts,
    total_backoff,
    worst_case_latency,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": {
            "type": "object", "properties": {"amount": {"type": "number"}},
            "required": ["amount"]}},
        "total": {"type": "number"},
    },
    "required": ["items", "total"],
}
RULES = [rules.equals_sum("/total", "/items/*/amount")]
WRONG_SUM = '{"items": [{"amount": 100.5}, {"amount": 32.25}], "total": 132.7}'
RIGHT_SUM = '{"items": [{"amount": 100.5}, {"amount": 32.25}], "total": 132.75}'


def make_pipeline(gen: ScriptedGenerator, clock: FakeClock | None = None, **policy: object,
                  ) -> Pipeline:
    clock = clock or FakeClock()
    return Pipeline(gen, policy=RetryPolicy(**policy), metrics=PipelineMetrics(), log=False,
                    clock=clock, sleep=clock.sleep)


# ----------------------------------------------------------------------------- feedback


def test_error_summary_reaches_the_next_prompt_but_not_the_failed_output() -> None:
    gen = ScriptedGenerator([WRONG_SUM, RIGHT_SUM])
    result = make_pipeline(gen).generate("Extract it.", schema=SCHEMA, rules=RULES)
    assert result.valid and result.layer_used == "retry" and result.attempts == 2
    first, second = gen.prompts
    assert FEEDBACK_HEADER not in first
    assert "- /total: 132.7 is not equal to the sum of /items/*/amount (132.75)" in second
    assert WRONG_SUM not in second  # the summary, not the whole failed output
    assert second.startswith(first)  # same instructions and task, with the summary added


def test_feedback_lists_at_most_the_configured_number_of_errors() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    gen = ScriptedGenerator(['["a", "b", "c", "d"]', "[1]"])
    make_pipeline(gen, feedback_errors=2).generate("Numbers.", schema=schema)
    second = gen.prompts[1]
    assert "- /0: expected integer" in second and "- /1: expected integer" in second
    assert "/2:" not in second and "... and 2 more" in second


def test_each_retry_sees_only_the_latest_errors() -> None:
    gen = ScriptedGenerator(["not json at all", WRONG_SUM, RIGHT_SUM])
    make_pipeline(gen).generate("Extract it.", schema=SCHEMA, rules=RULES)
    assert "not valid JSON" in gen.prompts[1]
    assert "not valid JSON" not in gen.prompts[2] and "/total:" in gen.prompts[2]


# ----------------------------------------------------------------------------- budgets


def test_attempt_cap_holds_exactly() -> None:
    gen = ScriptedGenerator([WRONG_SUM] * 5)
    with pytest.raises(BudgetExhaustedError) as info:
        make_pipeline(gen, max_attempts=3).generate("x", schema=SCHEMA, rules=RULES)
    assert len(gen.prompts) == 3
    err = info.value
    assert (err.budget, err.attempts) == ("attempts", 3)
    assert err.last_output == WRONG_SUM
    assert [str(e) for e in err.errors] == [
        "/total: 132.7 is not equal to the sum of /items/*/amount (132.75)"]
    assert "attempt cap of 3" in str(err) and "3 attempt(s)" in str(err)


def test_token_budget_holds_exactly() -> None:
    # Each attempt may use 40 tokens and does; the budget of 100 allows 40 + 40 + 20.
    gen = ScriptedGenerator([(WRONG_SUM, 40)] * 5)
    with pytest.raises(BudgetExhaustedError) as info:
        make_pipeline(gen, max_attempts=10, token_budget=100, max_tokens=40).generate(
            "x", schema=SCHEMA, rules=RULES)
    assert gen.max_tokens == [40, 40, 20]
    assert (info.value.budget, info.value.attempts, info.value.tokens) == ("tokens", 3, 100)


def test_output_cut_by_the_token_limit_is_not_accepted_and_says_why() -> None:
    cut = '{"items": [{"amount": 100.5}], "total": 100.5, "note": "abc'  # would validate if closed
    gen = ScriptedGenerator([(cut, 20), RIGHT_SUM])
    result = make_pipeline(gen, max_tokens=20).generate("x", schema=SCHEMA, rules=RULES)
    assert result.layer_used == "retry"
    assert "cut off by the token limit" in gen.prompts[1]


def test_backoff_waits_between_attempts_only() -> None:
    clock = FakeClock()
    gen = ScriptedGenerator([WRONG_SUM] * 3)
    with pytest.raises(BudgetExhaustedError):
        make_pipeline(gen, clock, max_attempts=3, backoff_s=0.5).generate(
            "x", schema=SCHEMA, rules=RULES)
    assert clock.sleeps == [0.5, 1.0]  # after attempts 1 and 2, none after the last


def test_latency_budget_stops_before_an_attempt_that_would_overrun() -> None:
    clock = FakeClock()
    gen = ScriptedGenerator([WRONG_SUM] * 5, clock=clock, seconds=1.0)
    pipeline = make_pipeline(gen, clock, max_attempts=5, latency_budget_s=3.5,
                             attempt_time_s=0.8)
    with pytest.raises(BudgetExhaustedError) as info:
        pipeline.generate("x", schema=SCHEMA, rules=RULES)
    # Derived cap: 4 attempts of 0.8 s fit in 3.5 s, but each really takes 1.0 s, so after
    # three (3.0 s spent) a fourth would end at 4.0 s: it is not started.
    assert len(gen.prompts) == 3
    assert (info.value.budget, info.value.attempts) == ("latency", 3)


def test_generator_errors_cost_an_attempt_and_are_chained() -> None:
    gen = ScriptedGenerator([ConnectionError("endpoint down"), RIGHT_SUM])
    result = make_pipeline(gen).generate("x", schema=SCHEMA, rules=RULES)
    assert result.valid and result.attempts == 2
    assert result.history[0].errors[0].kind == "generation"

    gen = ScriptedGenerator([TimeoutError("slow")] * 2)
    with pytest.raises(BudgetExhaustedError) as info:
        make_pipeline(gen, max_attempts=2).generate("x", schema=SCHEMA)
    assert isinstance(info.value.__cause__, TimeoutError)
    assert "generation failed: slow" in str(info.value)


# ----------------------------------------------------------------------------- chapter X arithmetic


def test_attempts_from_latency_budget_follow_n_t_plus_b() -> None:
    # No backoff: N = floor(P99 / T).
    assert attempts_for_latency(3.0, 0.8) == 3
    assert attempts_for_latency(2.4, 0.8) == 3  # exactly on the budget still fits
    # With backoff 0.5 s doubling: B(2) = 0.5, B(3) = 1.5. 2*0.8+0.5 = 2.1 fits in 3 s,
    # 3*0.8+1.5 = 3.9 does not.
    assert total_backoff(3, 0.5) == pytest.approx(1.5)
    assert worst_case_latency(3, 0.8, backoff_s=0.5) == pytest.approx(3.9)
    assert attempts_for_latency(3.0, 0.8, backoff_s=0.5) == 2
    for p99, t, b in [(10.0, 0.7, 0.2), (5.0, 1.3, 0.0), (30.0, 2.0, 1.0)]:
        n = attempts_for_latency(p99, t, backoff_s=b)
        assert worst_case_latency(n, t, backoff_s=b) <= p99 < worst_case_latency(n + 1, t,
                                                                                 backoff_s=b)


def test_latency_budget_shorter_than_one_attempt_is_refused() -> None:
    with pytest.raises(PolicyError, match="shorter than one attempt"):
        attempts_for_latency(0.5, 0.8)
    with pytest.raises(PolicyError):
        RetryPolicy(latency_budget_s=0.5, attempt_time_s=0.8)
    with pytest.raises(PolicyError, match="attempt_time_s"):
        RetryPolicy(latency_budget_s=3.0)


def test_policy_from_latency_budget() -> None:
    policy = RetryPolicy.from_latency_budget(3.0, 0.8, backoff_s=0.5, token_budget=2000)
    assert policy.max_attempts == 2 and policy.token_budget == 2000
    assert RetryPolicy(max_attempts=9, latency_budget_s=3.0,
                       attempt_time_s=0.8).effective_max_attempts == 3


def test_backoff_schedule_is_capped() -> None:
    assert [backoff_delay(k, 0.5, 2.0, 3.0) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert backoff_delay(3, 0.0) == 0.0


def test_expected_attempts() -> None:
    # Attempt k+1 happens only after k failures: 1 + 0.08 + 0.0064 for p = 0.92, N = 3.
    assert expected_attempts(0.92, 3) == pytest.approx(1.0864)
    assert expected_attempts(1.0, 5) == 1.0
    assert expected_attempts(0.0, 4) == 4.0


def test_budget_account_without_a_model() -> None:
    clock = FakeClock()
    budget = RetryBudget(RetryPolicy(max_attempts=2, token_budget=50, max_tokens=30),
                         clock=clock, sleep=clock.sleep)
    assert budget.start_attempt() == 30
    budget.record(30, 0.1)
    assert budget.start_attempt() == 20
    budget.record(20, 0.1)
    assert budget.exhausted_budget() == "attempts"  # both limits are reached; attempts first
    with pytest.raises(BudgetExhaustedError):
        budget.start_attempt()


@pytest.mark.parametrize("bad", [dict(max_attempts=0), dict(token_budget=0), dict(max_tokens=0),
                                 dict(backoff_s=-1), dict(backoff_factor=0.5)])
def test_policy_validates_its_settings(bad: dict) -> None:
    with pytest.raises(PolicyError):
        RetryPolicy(**bad)
