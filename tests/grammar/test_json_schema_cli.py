"""``formcast compile``: GBNF on stdout, the report on stderr, clear errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

from formcast.cli import main
from formcast.grammar.ir import Grammar
from formcast.grammar.recognize import recognizes

SCHEMA = {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    "n": {"type": "integer", "minimum": 1}}, "required": ["n"], "additionalProperties": False}


def write(tmp_path: Path, text: str, name: str = "schema.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_compile_prints_gbnf_and_report(tmp_path, capsys) -> None:
    path = write(tmp_path, json.dumps(SCHEMA))
    assert main(["compile", "--schema", path]) == 0
    out, err = capsys.readouterr()
    grammar = Grammar.from_gbnf(out)  # stdout is pure GBNF
    assert recognizes(grammar, b'{"tags": ["a"], "n": 2}')
    assert not recognizes(grammar, b'{"tags": ["a"], "n": 0}')
    assert "compile report" in err
    assert "/properties/tags/uniqueItems" in err and "NOT enforced" in err


def test_compile_options_and_json_report(tmp_path, capsys) -> None:
    path = write(tmp_path, json.dumps(SCHEMA))
    assert main(["compile", "--schema", path, "--whitespace", "compact", "--report-json"]) == 0
    out, err = capsys.readouterr()
    grammar = Grammar.from_gbnf(out)
    assert recognizes(grammar, b'{"n":2}') and not recognizes(grammar, b'{"n": 2}')
    report = json.loads(err)
    assert report["unenforced"][0]["keyword"] == "uniqueItems"
    assert report["options"]["whitespace"] == "compact"


def test_strict_compile_fails_with_exit_2(tmp_path, capsys) -> None:
    path = write(tmp_path, json.dumps(SCHEMA))
    assert main(["compile", "--schema", path, "--strict"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "uniqueItems" in err and "Traceback" not in err


def test_bad_json_names_file_line_and_column(tmp_path, capsys) -> None:
    path = write(tmp_path, '{"type": "object",\n "properties": {,}}')
    assert main(["compile", "--schema", path]) == 2
    err = capsys.readouterr().err
    assert path in err and "line 2, column 17" in err and "Traceback" not in err


def test_invalid_schema_and_missing_file(tmp_path, capsys) -> None:
    path = write(tmp_path, '{"type": "object", "properties": {"a": {"minimum": "ten"}}}')
    assert main(["compile", "--schema", path]) == 2
    err = capsys.readouterr().err
    assert "/properties/a/minimum" in err
    assert main(["compile", "--schema", str(tmp_path / "missing.json")]) == 2
    assert "not found" in capsys.readouterr().err


def test_compile_regex_and_gbnf(tmp_path, capsys) -> None:
    assert main(["compile", "--regex", "[0-9]{2}"]) == 0
    out = capsys.readouterr().out
    assert recognizes(Grammar.from_gbnf(out), b"42")
    path = write(tmp_path, 'root ::= "a" b\nb ::= [0-9]+\n', "g.gbnf")
    assert main(["compile", "--gbnf", path]) == 0
    assert recognizes(Grammar.from_gbnf(capsys.readouterr().out), b"a12")
