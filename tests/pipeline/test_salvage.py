"""Salvage (layer 3): only trusted fields, never guessed, never passed off as a success."""

from __future__ import annotations

import pytest
from pipeline_scripted import FakeClock, ScriptedGenerator

from formcast.errors import BudgetExhaustedError
from formcast.observe import PipelineMetrics
from formcast.pipeline import rules
from formcast.pipeline.pipeline import Pipeline
from formcast.pipeline.repair import repair_json
from formcast.pipeline.result import Violation
from formcast.pipeline.retry import RetryPolicy
from formcast.pipeline.salvage import salvage
from formcast.pipeline.validate import Validator

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "email": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 0},
        "address": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "zip": {"type": "string",
                                                             "pattern": "^\\d{5}$"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "email", "age", "address", "tags"],
}
VALIDATOR = Validator(SCHEMA)


def run_salvage(text: str):
    repaired = repair_json(text)
    return salvage(text, check=VALIDATOR.validate, violations=VALIDATOR.validate(repaired.value),
                   repaired=repaired, known_keys=list(SCHEMA["properties"]))


def test_fields_with_errors_are_dropped_and_the_rest_kept() -> None:
    text = ('{"name": "Ana", "email": "not-an-email", "age": 31, '
            '"address": {"city": "Lyon", "zip": "69A"}, "tags": ["a", 3]}')
    got = run_salvage(text)
    assert got.value == {"name": "Ana", "age": 31, "address": {"city": "Lyon"}}
    assert set(got.dropped) == {"/email", "/address/zip", "/tags"}
    assert 0 < got.confidence < 1


def test_an_array_with_a_bad_item_is_dropped_whole() -> None:
    got = run_salvage('{"name": "Ana", "tags": ["a", 3, "c"]}')
    assert "tags" not in got.value  # ["a", "c"] would be a claim the model never made


def test_truncated_output_keeps_complete_fields_only() -> None:
    got = run_salvage('{"name": "Ana", "age": 31, "tags": ["x", "y"], "email": "ana@exa')
    # The email was cut mid-string and the tags list may have been longer: neither is kept.
    assert got.value == {"name": "Ana", "age": 31, "tags": ["x", "y"]} or \
        got.value == {"name": "Ana", "age": 31}
    assert "email" not in got.value
    assert got.source == "lossy"


def test_truncated_array_is_not_trusted() -> None:
    got = run_salvage('{"name": "Ana", "age": 31, "tags": ["x", "y"')
    assert got.value == {"name": "Ana", "age": 31}


def test_missing_values_are_never_filled_in() -> None:
    got = run_salvage('{"name": "Ana"}')
    assert got.value == {"name": "Ana"}
    assert got.confidence < 0.5  # four required fields of five are missing


def test_unparseable_text_falls_back_to_a_scan_of_known_keys() -> None:
    text = 'name: x -- "name": "Ana", "age": 31, "unknown": 5, "age": "thirty'
    got = salvage(text, check=VALIDATOR.validate, known_keys=list(SCHEMA["properties"]))
    # "unknown" is not a schema key; "age" appears twice (once cut off), so it is ambiguous.
    assert got is not None and got.value == {"name": "Ana"} and got.source == "scan"


def test_brackets_that_yield_nothing_fall_back_to_the_scan() -> None:
    text = 'Result -> "name": "Ana", "age": 31 {{{ "ag'
    got = salvage(text, check=VALIDATOR.validate, known_keys=list(SCHEMA["properties"]))
    assert got is not None and got.value == {"name": "Ana", "age": 31} and got.source == "scan"


def test_nothing_trustworthy_gives_none() -> None:
    assert salvage("no data here", check=VALIDATOR.validate, known_keys=["name"]) is None
    repaired = repair_json('{"age": "old"}')
    assert salvage('{"age": "old"}', check=VALIDATOR.validate,
                   violations=VALIDATOR.validate(repaired.value), repaired=repaired) is None


def test_semantic_violation_drops_the_field_it_points_at() -> None:
    text = '{"start": 5, "end": 3, "label": "x"}'
    repaired = repair_json(text)
    violations = [Violation("/start", "must be <= /end", "semantic", "compare")]
    got = salvage(text, violations=violations, repaired=repaired)
    assert got.value == {"end": 3, "label": "x"}


# ----------------------------------------------------------------------------- through the pipeline

BAD = ('{"name": "Ana", "email": "ana@example.com", "age": -4, "address": {"city": "Lyon"}, '
       '"tags": []}')


def pipeline(script: list, **policy: object) -> Pipeline:
    clock = FakeClock()
    return Pipeline(ScriptedGenerator(script), policy=RetryPolicy(max_attempts=2, **policy),
                    metrics=PipelineMetrics(), log=False, clock=clock, sleep=clock.sleep)


def test_salvage_is_off_by_default() -> None:
    with pytest.raises(BudgetExhaustedError):
        pipeline([BAD, BAD]).generate("x", schema=SCHEMA)


def test_salvaged_result_cannot_be_mistaken_for_success() -> None:
    p = pipeline([BAD, BAD], salvage=True)
    result = p.generate("x", schema=SCHEMA)
    assert result.value is None and not result.valid
    assert result.degraded and result.layer_used == "salvage"
    assert 0 < result.confidence < 1
    assert result.salvaged == {"name": "Ana", "email": "ana@example.com",
                               "address": {"city": "Lyon"}, "tags": []}
    assert [str(e) for e in result.errors] == ["/age: -4 is less than the minimum 0"]
    assert result.attempts == 2
    assert p.metrics.summary()["degraded"] == 1


def test_salvage_with_a_rule_violation() -> None:
    schema = {"type": "object", "properties": {"status": {"type": "string"},
                                               "reason": {"type": "string"},
                                               "total": {"type": "number"}},
              "required": ["status", "total"]}
    out = '{"status": "rejected", "total": 12}'
    result = pipeline([out, out], salvage=True).generate(
        "x", schema=schema, rules=[rules.requires_when("/status", "rejected", "/reason")])
    assert result.salvaged == {"status": "rejected", "total": 12}
    assert result.errors[0].kind == "semantic"


def test_nothing_to_salvage_still_raises() -> None:
    with pytest.raises(BudgetExhaustedError):
        pipeline(["I cannot help with that.", "Sorry."], salvage=True).generate("x", schema=SCHEMA)
