"""Compiles share automata, spellings and number languages through process-wide memos: a compile
that finds them all memoised gives the same grammar as one that builds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from formcast.grammar.json_schema import clear_memos, compile_json_schema

ROOT = Path(__file__).resolve().parents[2]
PATHS = sorted(ROOT.glob("examples/**/*.json")) + sorted(
    ROOT.glob("benchmarks/grammars/schema/*.schema.json"))
SCHEMAS: list[tuple[str, Any]] = [(p.stem, json.loads(p.read_text())) for p in PATHS] + [
    ("keys", {"type": "object", "properties": {"a": {"type": "integer"}},
              "patternProperties": {"^x-": {"type": "string"}},
              "additionalProperties": {"type": "number", "minimum": 0, "multipleOf": 0.25},
              "propertyNames": {"maxLength": 8}}),
    ("strings", {"type": "array", "items": {"anyOf": [
        {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 12},
        {"type": "string", "format": "date-time"},
        {"type": "string", "not": {"enum": ["x", "y"]}, "minLength": 1}]}}),
    ("numbers", {"type": "object", "properties": {
        "n": {"type": "number", "exclusiveMinimum": -1.5, "maximum": 1000, "multipleOf": 0.5},
        "m": {"type": "integer", "minimum": 3, "not": {"const": 7}}}}),
]


def _compiled(schema: Any, **options: Any) -> tuple[str, dict]:
    grammar = compile_json_schema(schema, strict=False, cache=None, **options)
    assert grammar.report is not None
    report = grammar.report.to_dict()
    report.pop("compile_ms")
    return grammar.to_gbnf(), report


@pytest.mark.parametrize("options", [{}, {"whitespace": "compact", "property_order": "any"}],
                         ids=["default", "compact-any"])
@pytest.mark.parametrize("name, schema", SCHEMAS, ids=[n for n, _ in SCHEMAS])
def test_memoised_compile_equals_fresh_compile(name: str, schema: Any, options: dict) -> None:
    clear_memos()
    fresh = _compiled(schema, **options)
    assert _compiled(schema, **options) == fresh
