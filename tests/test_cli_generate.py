"""``formcast generate`` and ``formcast demo``: output on stdout, report on stderr, clear errors."""

from __future__ import annotations

import re

import pytest

from formcast.cli import main


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
