"""``formcast eval``: constrained and unconstrained side by side, chapter 12's three rates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pipeline_scripted import ScriptedRuntime

from formcast import cli
from formcast.errors import FormcastError
from formcast.pipeline import rules
from formcast.pipeline.pipeline import Pipeline, evaluate
from formcast.runtime.base import GenerationResult

SCHEMA = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": {
            "type": "object", "properties": {"amount": {"type": "number"}},
            "required": ["amount"]}},
        "total": {"type": "number"},
        "note": {"type": "string"},
    },
    "required": ["items", "total", "note"],
}
RULES = [rules.equals_sum("/total", "/items/*/amount")]
CONSTRAINED = [
    '{"items": [{"amount": 1}, {"amount": 2}], "total": 3, "note": "a"}',
    '{"items": [{"amount": 1}], "total": 5, "note": "b"}',  # well-formed, wrong total
]
UNCONSTRAINED = [
    'Here you go: {"items": [{"amount": 1}, {"amount": 2}], "total": 3, "note": "a"}',
    '{"items": [{"amount": 1}], "total": 1}',  # the note is missing
]


def needs_compiler() -> None:
    pytest.importorskip("formcast.grammar.json_schema")


def test_evaluate_reports_the_three_rates_per_arm() -> None:
    needs_compiler()
    runtime = ScriptedRuntime(CONSTRAINED + UNCONSTRAINED)
    report = evaluate(Pipeline(runtime, log=False), SCHEMA, ["p1", "p2"], rules=RULES)
    assert [g is not None for g in runtime.grammars] == [True, True, False, False]
    c, u = report.constrained, report.unconstrained
    assert (c.format_first_pass, c.post_repair_pass, c.semantic_pass) == (1.0, 1.0, 0.5)
    assert (u.format_first_pass, u.post_repair_pass, u.semantic_pass) == (0.0, 0.5, 0.5)
    assert u.repair_rate == 0.5 and c.repair_rate == 0.0
    assert c.field_completeness == 1.0
    assert u.field_completeness == pytest.approx((1.0 + 3 / 4) / 2)
    assert c.clipped_mass_avg == pytest.approx(0.2) and u.clipped_mass_avg is None
    table = report.table()
    assert "first-pass format" in table and "semantic validity" in table
    assert "clipped mass (avg)" in table and "field completeness" in table


def test_evaluate_counts_truncated_outputs_as_failures() -> None:
    needs_compiler()
    cut = GenerationResult(text='{"items": [{"amount": 1}], "total": 1, "note": "ab',
                           finish_reason="length", tokens_generated=8)
    runtime = ScriptedRuntime([cut, cut])
    report = evaluate(Pipeline(runtime, log=False), SCHEMA, ["p"], max_tokens=8)
    assert report.constrained.post_repair_pass == 0.0
    assert "cut off" in report.constrained.samples[0].errors[0]


def test_evaluate_needs_a_runtime() -> None:
    with pytest.raises(FormcastError, match="needs a Runtime"):
        evaluate(Pipeline(lambda p, n: "{}", log=False), SCHEMA, ["p"])


# ----------------------------------------------------------------------------- the command


def test_prompt_files_in_three_formats(tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('"first"\n\n{"prompt": "second"}\n', encoding="utf-8")
    assert cli._eval_prompts(str(jsonl)) == ["first", "second"]
    js = tmp_path / "p.json"
    js.write_text('["a", {"prompt": "b"}]', encoding="utf-8")
    assert cli._eval_prompts(str(js)) == ["a", "b"]
    txt = tmp_path / "p.txt"
    txt.write_text("line one\nline two\n---\nsecond prompt\n", encoding="utf-8")
    assert cli._eval_prompts(str(txt)) == ["line one\nline two", "second prompt"]


def test_bad_prompt_file_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "p.jsonl"
    bad.write_text('"ok"\n{"prompt": \n', encoding="utf-8")
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    assert cli.main(["eval", "--schema", str(schema), "--prompts", str(bad)]) == 2
    assert f"{bad}:2:" in capsys.readouterr().err


def test_eval_command_prints_the_side_by_side_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    needs_compiler()
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    prompts = tmp_path / "p.txt"
    prompts.write_text("first\n---\nsecond\n", encoding="utf-8")
    runtime = ScriptedRuntime(CONSTRAINED + UNCONSTRAINED)
    monkeypatch.setattr(cli, "_eval_runtime", lambda model: runtime)
    code = cli.main(["eval", "--schema", str(schema), "--prompts", str(prompts), "-q",
                     "--rules", "test_eval:RULES"])
    out = capsys.readouterr().out
    assert code == 0
    lines = {line.split("  ")[0]: line.split() for line in out.splitlines()}
    assert lines["first-pass format"][-2:] == ["100.0%", "0.0%"]
    assert lines["semantic validity"][-2:] == ["50.0%", "50.0%"]


def test_eval_command_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture) -> None:
    needs_compiler()
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    prompts = tmp_path / "p.json"
    prompts.write_text('["one", "two"]', encoding="utf-8")
    monkeypatch.setattr(cli, "_eval_runtime",
                        lambda model: ScriptedRuntime(CONSTRAINED + UNCONSTRAINED))
    assert cli.main(["eval", "--schema", str(schema), "--prompts", str(prompts), "-q",
                     "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["constrained"]["format_first_pass"] == 1.0
    assert data["unconstrained"]["samples"][1]["errors"] == ["/note: is required but missing"]


def test_rules_spec_must_name_module_and_attribute() -> None:
    with pytest.raises(FormcastError, match="module:attribute"):
        cli._eval_rules("no_colon")
