"""The entry point: which layer answered, what a caller can rely on, and what gets recorded."""

from __future__ import annotations

import json
import logging

import pytest
from pipeline_scripted import FakeClock, ScriptedGenerator, ScriptedRuntime

from formcast.errors import BudgetExhaustedError, FormcastError, GenerationError, RuleError
from formcast.grammar.cache import CompileCache
from formcast.observe import PipelineMetrics
from formcast.pipeline import rules
from formcast.pipeline.pipeline import (
    Pipeline,
    check_output,
    field_completeness,
    generate,
)
from formcast.pipeline.retry import RetryPolicy
from formcast.pipeline.validate import Validator
from formcast.runtime.base import GenerationResult

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "status": {"enum": ["active", "rejected"]},
        "reason": {"type": "string"},
    },
    "required": ["name", "age", "status"],
}
GOOD = '{"name": "Ana", "age": 31, "status": "active"}'
RULES = [rules.requires_when("/status", "rejected", "/reason")]


def make(model, **policy: object) -> Pipeline:
    clock = FakeClock()
    return Pipeline(model, policy=RetryPolicy(**policy), metrics=PipelineMetrics(), log=False,
                    clock=clock, sleep=clock.sleep)


# ----------------------------------------------------------------------------- layer_used


def test_valid_first_output_is_layer_constrain() -> None:
    result = make(ScriptedGenerator([GOOD])).generate("x", schema=SCHEMA, rules=RULES)
    assert (result.valid, result.layer_used, result.attempts) == (True, "constrain", 1)
    assert result.value == {"name": "Ana", "age": 31, "status": "active"}
    assert result.errors == () and not result.degraded and result.confidence == 1.0


def test_repaired_first_output_is_layer_repair_and_lists_the_repairs() -> None:
    result = make(ScriptedGenerator(["```json\n{'name': 'Ana', 'age': 31, 'status': 'active',}\n```"])
                  ).generate("x", schema=SCHEMA)
    assert (result.valid, result.layer_used) == (True, "repair")
    assert {"strip_fence", "single_quotes", "trailing_comma"} <= {r.kind for r in result.repairs}


def test_repaired_value_that_fails_validation_is_never_valid() -> None:
    broken = "{'name': 'Ana', 'age': -3, 'status': 'active',}"  # repairs fine, then fails
    gen = ScriptedGenerator([broken, broken])
    with pytest.raises(BudgetExhaustedError) as info:
        make(gen, max_attempts=2).generate("x", schema=SCHEMA)
    assert [str(e) for e in info.value.errors] == ["/age: -3 is less than the minimum 0"]


def test_check_output_never_calls_a_repaired_invalid_value_valid() -> None:
    check = check_output('{"name": "Ana", "age": 1.5, "status": "active",}', Validator(SCHEMA))
    assert check.parsed and not check.parsed_as_is
    assert not check.valid and not check.format_ok and not check.semantic_ok


def test_lossy_repair_is_an_error_unless_the_policy_accepts_it() -> None:
    cut = '{"name": "Ana", "age": 31, "status": "active", "reason": "none giv'
    gen = ScriptedGenerator([cut, GOOD])
    result = make(gen).generate("x", schema=SCHEMA)
    assert result.layer_used == "retry"
    assert "/reason: the output ended inside this string" in gen.prompts[1]
    accepted = make(ScriptedGenerator([cut]), accept_lossy_repairs=True).generate("x",
                                                                                 schema=SCHEMA)
    assert accepted.valid and accepted.layer_used == "repair"
    assert accepted.value["reason"] == "none giv"
    assert any(r.lossy for r in accepted.repairs)  # accepted, but still on record


def test_semantic_error_triggers_retry() -> None:
    gen = ScriptedGenerator(['{"name": "Ana", "age": 31, "status": "rejected"}',
                             '{"name": "Ana", "age": 31, "status": "rejected", "reason": "dup"}'])
    result = make(gen).generate("x", schema=SCHEMA, rules=RULES)
    assert result.layer_used == "retry" and result.value["reason"] == "dup"
    assert result.history[0].errors[0].kind == "semantic"


def test_rules_only_see_schema_valid_values() -> None:
    seen = []
    rule = rules.custom(lambda d: seen.append(d["age"]) or True)  # would KeyError on {}
    gen = ScriptedGenerator(["{}", GOOD])
    make(gen).generate("x", schema=SCHEMA, rules=[rule])
    assert seen == [31]


def test_a_failing_rule_callback_is_not_blamed_on_the_model() -> None:
    def lookup(_: object) -> bool:
        raise ConnectionError("customer db down")

    with pytest.raises(RuleError):
        make(ScriptedGenerator([GOOD])).generate(
            "x", schema=SCHEMA, rules=[rules.reference("/name", lookup)])


def test_generator_returning_garbage_type_is_a_clear_error() -> None:
    with pytest.raises(FormcastError, match="returned int"):
        make(lambda prompt, max_tokens: 42).generate("x", schema=SCHEMA)


def test_generator_may_return_a_generation_result() -> None:
    def gen(prompt: str, max_tokens: int) -> GenerationResult:
        return GenerationResult(text=GOOD, finish_reason="eos", tokens_generated=17)

    result = make(gen).generate("x", schema=SCHEMA)
    assert result.valid and result.tokens == 17 and result.metrics.tokens == 17


# ----------------------------------------------------------------------------- runtimes


def test_runtime_gets_its_chat_template_and_no_grammar_when_unconstrained() -> None:
    rt = ScriptedRuntime([GOOD])
    result = make(rt).generate("Extract Ana.", schema=SCHEMA, constrain=False)
    assert result.valid
    assert rt.grammars == [None]
    assert rt.prompts[0].startswith("<|system|>") and "Extract Ana." in rt.prompts[0]
    assert result.metrics.constrained is False


def test_runtime_generation_error_costs_an_attempt() -> None:
    rt = ScriptedRuntime([GenerationError("decode failed"), GOOD])
    result = make(rt).generate("x", schema=SCHEMA, constrain=False)
    assert result.attempts == 2 and result.valid


def test_other_runtime_exceptions_propagate() -> None:
    rt = ScriptedRuntime([ValueError("a bug in the runtime")])
    with pytest.raises(ValueError):
        make(rt).generate("x", schema=SCHEMA, constrain=False)


def test_grammar_is_compiled_once_and_reused_across_retries_and_calls() -> None:
    pytest.importorskip("formcast.grammar.json_schema")
    rt = ScriptedRuntime(['{"name": "Ana", "age": -1, "status": "active"}', GOOD, GOOD])
    cache = CompileCache()
    clock = FakeClock()
    pipeline = Pipeline(rt, metrics=PipelineMetrics(), grammar_cache=cache, log=False,
                        clock=clock, sleep=clock.sleep)
    first = pipeline.generate("x", schema=SCHEMA)
    second = pipeline.generate("y", schema=json.loads(json.dumps(SCHEMA)))  # an equal copy
    assert first.layer_used == "retry" and second.layer_used == "constrain"
    assert rt.grammars[0] is not None
    assert rt.grammars[0] is rt.grammars[1] is rt.grammars[2]
    assert cache.stats().misses == 1
    assert (first.metrics.grammar_cache_hit, second.metrics.grammar_cache_hit) == (False, True)
    assert first.metrics.clipped_mass_avg == pytest.approx(0.2)
    # Property order shapes the grammar, so the same properties in another order compile anew.
    reordered = dict(SCHEMA, properties=dict(reversed(list(SCHEMA["properties"].items()))))
    assert pipeline.compile(reordered).grammar is not rt.grammars[0]
    assert cache.stats().misses == 2
    assert pipeline.metrics.summary()["grammar_cache_hit_rate"] == 0.5


# ----------------------------------------------------------------------------- records and logs


def test_result_carries_its_metrics_record() -> None:
    gen = ScriptedGenerator(["{'name': 'Ana', 'age': 31, 'status': 'active'}"])
    pipeline = make(gen)
    result = pipeline.generate("x", schema=SCHEMA)
    record = result.metrics
    assert (record.layer_used, record.valid, record.attempts) == ("repair", True, 1)
    (out,) = record.outputs
    assert out.repaired and not out.format_as_is and out.format_after_repair and out.semantic_ok
    assert out.repair_kinds == ("single_quotes",)
    summary = pipeline.metrics.summary()
    assert summary["format_first_pass"] == 0.0 and summary["repair_rate"] == 1.0


def test_each_generation_is_one_json_log_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    pipeline = Pipeline(ScriptedGenerator(["nope", GOOD]), metrics=PipelineMetrics(),
                        clock=clock, sleep=clock.sleep)
    with caplog.at_level(logging.INFO, logger="formcast.generation"):
        pipeline.generate("x", schema=SCHEMA)
    (line,) = [r for r in caplog.records if r.name == "formcast.generation"]
    data = json.loads(line.getMessage())
    assert data["layer_used"] == "retry" and data["attempts"] == 2
    assert data["outputs"][0]["error_kinds"] == ["parse"]
    assert data["format_first_pass"] is False


def test_failures_are_recorded_before_raising(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    metrics = PipelineMetrics()
    pipeline = Pipeline(ScriptedGenerator(["nope"]), metrics=metrics,
                        policy=RetryPolicy(max_attempts=1), clock=clock, sleep=clock.sleep)
    with caplog.at_level(logging.INFO, logger="formcast.generation"), \
            pytest.raises(BudgetExhaustedError):
        pipeline.generate("x", schema=SCHEMA)
    assert metrics.summary()["budget_exhausted"] == 1
    (line,) = [r for r in caplog.records if r.name == "formcast.generation"]
    assert line.levelno == logging.WARNING
    assert json.loads(line.getMessage())["budget_exhausted"] == "attempts"


# ----------------------------------------------------------------------------- entry point


def test_module_generate_with_a_callable() -> None:
    result = generate("x", schema=SCHEMA, model=ScriptedGenerator([GOOD]), rules=RULES,
                      policy=RetryPolicy(max_attempts=1))
    assert result.valid and result.value["name"] == "Ana"


def test_bad_model_argument() -> None:
    with pytest.raises(FormcastError):
        Pipeline(42)  # type: ignore[arg-type]


def test_field_completeness_counts_required_fields_through_nesting() -> None:
    schema = {"type": "object", "required": ["a", "items"],
              "properties": {"a": {"type": "string"},
                             "items": {"type": "array", "items": {"$ref": "#/$defs/i"}}},
              "$defs": {"i": {"type": "object", "required": ["x", "y"],
                              "properties": {"x": {}, "y": {}}}}}
    assert field_completeness({"a": "v", "items": [{"x": 1, "y": 2}]}, schema) == 1.0
    assert field_completeness({"a": None, "items": [{"x": 1}]}, schema) == pytest.approx(2 / 4)
    assert field_completeness(None, schema) == 0.0
