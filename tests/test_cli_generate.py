"""``formcast generate`` and ``formcast demo``: output on stdout, report on stderr, clear errors.

``generate --schema`` runs the pipeline: stdout holds a valid value or nothing (exit 1 names the
budget that ran out), or with ``--salvage`` a degraded partial value (exit 3); the layer report
on stderr says which layer produced the result and which pointers caused the retries.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest

from formcast.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TRIAGE_SCHEMA = str(EXAMPLES / "ticket_triage.schema.json")
TRIAGE_PROMPT = str(EXAMPLES / "ticket_triage.prompt.txt")

#: The routing part of the triage example: two enums, about ten tokens per answer.
ROUTING_SCHEMA = {
    "type": "object",
    "properties": {
        "category": {"enum": ["billing", "technical", "account", "shipping", "other"]},
        "urgency": {"enum": ["low", "medium", "high"]},
    },
    "required": ["category", "urgency"],
    "additionalProperties": False,
}

#: A rule no answer can pass: every urgency needs a sign-off that never comes.
SIGNOFF_RULES = """\
from formcast.pipeline import rules

RULES = [rules.custom(
    lambda doc: [("/urgency", "needs a human sign-off, which never comes")] if "urgency" in doc
    else True, "/urgency", name="human_signoff")]
"""


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, message", [
    (["--schema", "no/such/schema.json", "--prompt", "x"], "schema file not found: no/such/schema.json"),
    (["--gbnf", "no/such.gbnf", "--prompt", "x"], "GBNF file not found"),
    (["--regex", "[0-9]+", "--prompt-file", "no/such.txt"], "prompt file not found"),
    (["--regex", "[0-9]+", "--prompt", "   "], "the prompt is empty"),
    (["--regex", "[0-9]+", "--prompt", "x", "--model", "gpt-9"], "unknown model 'gpt-9'"),
    (["--regex", "[0-9]+", "--prompt", "x", "--model", "/no/such/model.gguf"],
     "model file not found: /no/such/model.gguf"),
])
def test_input_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = _run(capsys, "generate", *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("formcast generate: error: ")
    assert message in err
    assert "Traceback" not in err


def test_schema_file_that_is_not_json_names_line_and_column(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "type": "object",\n  "properties": {,}\n}\n')
    code, _, err = _run(capsys, "generate", "--schema", str(bad), "--prompt", "x")
    assert code == 2
    assert "is not valid JSON" in err and "line 3, column 18" in err


def test_bad_regex_and_gbnf_are_reported_with_position(capsys, tmp_path):
    code, _, err = _run(capsys, "generate", "--regex", "(unclosed", "--prompt", "x")
    assert code == 2 and "formcast generate: error:" in err
    gbnf = tmp_path / "g.gbnf"
    gbnf.write_text('root ::= "a" missing\n')
    code, _, err = _run(capsys, "generate", "--gbnf", str(gbnf), "--prompt", "x")
    assert code == 2 and "missing" in err


def test_unsupported_keywords_under_strict_and_invalid_schemas_are_named(capsys, tmp_path):
    unique = tmp_path / "unique.json"
    unique.write_text('{"type": "array", "items": {"type": "string"}, "uniqueItems": true}')
    code, _, err = _run(capsys, "generate", "--schema", str(unique), "--prompt", "x", "--strict")
    assert code == 2 and "/uniqueItems" in err and "cannot be enforced" in err
    invalid = tmp_path / "invalid.json"
    invalid.write_text('{"type": "object", "properties": {"a": {"type": 5}}}')
    code, _, err = _run(capsys, "generate", "--schema", str(invalid), "--prompt", "x")
    assert code == 2 and "/properties/a/type" in err


def test_constraint_and_prompt_are_required(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--prompt", "x"])
    assert exc.value.code == 2
    assert "one of the arguments --schema --gbnf --regex is required" in capsys.readouterr().err


@pytest.mark.model
def test_generate_with_regex_prints_the_match_and_a_report(capsys):
    pattern = r'\{"city": "[A-Z][a-z]{1,15}", "country": "[A-Z][a-z]{1,15}"\}'
    code, out, err = _run(capsys, "generate", "--regex", pattern, "--prompt",
                          "Name the capital of Italy and its country as JSON.",
                          "--max-tokens", "40")
    assert code == 0
    assert re.fullmatch(pattern, out.strip()), out
    assert re.search(r"formcast: \d+ tokens \(\d+ sampled, \d+ forced\)", err)
    assert re.search(r"clipped mass avg 0\.\d{3} max [01]\.\d{3}; mask p50 \d+ us p99 \d+ us", err)
    assert "layer 1 only: a regex constraint has no schema" in err


@pytest.mark.model
def test_generate_without_constraint_reports_unconstrained(capsys):
    code, out, err = _run(capsys, "generate", "--regex", "[0-9]+", "--no-constraint",
                          "--prompt", "Say hello.", "--max-tokens", "8", "--quiet")
    assert code == 0 and out.strip()
    assert err == ""


@pytest.mark.model
def test_demo_shows_both_outputs_with_verdicts(capsys):
    code, out, _ = _run(capsys, "demo", "--task", "ticket_triage", "--max-tokens", "120")
    assert code == 0
    assert "=== unconstrained ===" in out and "=== formcast (constrained) ===" in out
    constrained = out.split("=== formcast (constrained) ===", 1)[1]
    assert "--- schema-valid" in constrained
    assert "clipped mass avg" in constrained


# ----------------------------------------------------------------------------- generate --schema


def test_pipeline_flags_need_a_schema(capsys):
    code, out, err = _run(capsys, "generate", "--regex", "[0-9]+", "--prompt", "x",
                          "--salvage", "--max-attempts", "3", "--rules", "mod:RULES")
    assert code == 2 and out == ""
    assert "--max-attempts, --salvage, --rules need(s) --schema" in err


@pytest.mark.parametrize("argv, message", [
    (["--max-attempts", "0"], "--max-attempts must be at least 1, got 0"),
    (["--token-budget", "-5"], "--token-budget must be at least 1, got -5"),
    (["--rules", "no_colon"], "--rules expects module:attribute, got 'no_colon'"),
    (["--rules", "formcast_no_such_rules:RULES"],
     "cannot load rules formcast_no_such_rules:RULES: No module named"),
    (["--rules", "json:dumps"], "rules json:dumps: calling it to get the rules failed"),
    (["--rules", "json:decoder"], "rules json:decoder must be a list of rules"),
])
def test_bad_pipeline_options_fail_before_the_model_loads(capsys, argv, message):
    code, out, err = _run(capsys, "generate", "--schema", TRIAGE_SCHEMA, "--prompt", "x", *argv)
    assert code == 2 and out == ""
    assert message in err
    assert "loading" not in err and "Traceback" not in err


@pytest.fixture
def signoff(tmp_path, monkeypatch):
    """A routing schema file and a rules module in the working directory (how a user runs
    ``--rules signoff_rules:RULES`` from their project)."""
    schema = tmp_path / "routing.schema.json"
    schema.write_text(json.dumps(ROUTING_SCHEMA))
    (tmp_path / "signoff_rules.py").write_text(SIGNOFF_RULES)
    monkeypatch.chdir(tmp_path)
    yield str(schema)
    sys.modules.pop("signoff_rules", None)


@pytest.mark.model
def test_schema_output_is_valid_json_and_the_report_names_the_layer(capsys):
    code, out, err = _run(capsys, "generate", "--schema", TRIAGE_SCHEMA,
                          "--prompt-file", TRIAGE_PROMPT, "--max-tokens", "200")
    assert code == 0, err
    value = json.loads(out)
    jsonschema.validate(value, json.loads(Path(TRIAGE_SCHEMA).read_text()))
    assert re.search(r"formcast: attempt 1 of 2: \d+ tokens \(\d+ sampled, \d+ forced\) in "
                     r"[\d.]+ s", err), err
    assert re.search(r"clipped mass avg [01]\.\d{3} max [01]\.\d{3}; mask p50 \d+ us "
                     r"p99 \d+ us", err), err
    assert "accepted: schema-valid" in err
    assert re.search(r"formcast: layer: (constrain|repair|retry), valid", err), err


@pytest.mark.model
def test_unsatisfiable_rule_exhausts_the_attempts_and_names_the_pointer(capsys, signoff):
    code, out, err = _run(capsys, "generate", "--schema", signoff, "--prompt-file",
                          TRIAGE_PROMPT, "--rules", "signoff_rules:RULES", "--max-attempts", "2",
                          "--max-tokens", "40")
    assert code == 1
    assert out == ""  # an invalid value is never printed
    assert "rejected, fed back to attempt 2: /urgency: needs a human sign-off" in err
    assert "attempt 2 of 2:" in err
    assert "layer: none, no valid result: budget exhausted (attempts)" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("formcast generate: error: budget exhausted (attempts): ")
    assert "/urgency: needs a human sign-off" in last


@pytest.mark.model
def test_salvage_prints_the_trusted_fields_marked_degraded(capsys, signoff):
    code, out, err = _run(capsys, "generate", "--schema", signoff, "--prompt-file",
                          TRIAGE_PROMPT, "--rules", "signoff_rules:RULES", "--max-attempts", "2",
                          "--max-tokens", "40", "--salvage")
    assert code == 3
    partial = json.loads(out)
    assert set(partial) == {"category"}  # /urgency broke the rule, so it is not kept
    assert partial["category"] in ROUTING_SCHEMA["properties"]["category"]["enum"]
    assert re.search(r"layer: salvage, DEGRADED \(confidence 0\.\d\d, not valid\): budget "
                     r"exhausted \(attempts\)", err), err
    assert "kept /category; missing /urgency" in err
    assert "warning: degraded result" in err and "NOT schema-valid" in err


@pytest.mark.model
def test_token_budget_is_named_when_it_runs_out_first(capsys, signoff):
    code, out, err = _run(capsys, "generate", "--schema", signoff, "--prompt-file",
                          TRIAGE_PROMPT, "--rules", "signoff_rules:RULES", "--max-attempts", "5",
                          "--token-budget", "15", "--max-tokens", "40", "--quiet")
    assert code == 1 and out == ""
    assert err.startswith("formcast generate: error: budget exhausted (tokens): ")
    assert "the token budget of 15" in err
    assert len(err.strip().splitlines()) == 1  # --quiet keeps only the reason


@pytest.mark.model
def test_unconstrained_schema_run_goes_through_repair_and_validation(capsys, signoff):
    code, out, err = _run(capsys, "generate", "--schema", signoff, "--no-constraint",
                          "--prompt", "Route this support message: 'My parcel never arrived.' "
                          "Answer with JSON only.", "--max-tokens", "60", "--max-attempts", "1")
    assert "formcast: attempt 1 of 1:" in err and "  unconstrained" in err
    assert "clipped mass" not in err
    if code == 0:  # whatever the raw text was, what reaches stdout passed the schema
        jsonschema.validate(json.loads(out), ROUTING_SCHEMA)
        assert re.search(r"layer: (constrain|repair), valid", err), err
    else:
        assert code == 1 and out == ""
        assert "budget exhausted (attempts)" in err
