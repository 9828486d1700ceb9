"""A schema compile leaves no reference cycles behind: everything it built and did not hand
over is freed when the last reference goes, not whenever the cyclic collector next runs (a
server compiling many schemas would otherwise hold each compiler, with its schema index, until
then)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from formcast.grammar.json_schema import compile_json_schema

ROOT = Path(__file__).resolve().parents[2]
PATHS = sorted(ROOT.glob("examples/**/*.json")) + sorted(
    ROOT.glob("benchmarks/grammars/schema/*.schema.json"))
CASES: list[tuple[str, Any, dict]] = [(p.stem, json.loads(p.read_text()), {}) for p in PATHS] + [
    # the rarer routes: counted and any-order members, distinct items, contains, negation
    ("counted", {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                 "additionalProperties": {"type": "boolean"}, "minProperties": 1,
                 "maxProperties": 3, "dependentRequired": {"a": ["b"]}}, {}),
    ("any_order", {"type": "object", "properties": {"a": {"type": "string"}, "b": {"const": 1}},
                   "required": ["a"]}, {"property_order": "any"}),
    ("distinct", {"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True}, {}),
    ("contains", {"type": "array", "contains": {"type": "integer", "minimum": 3},
                  "minContains": 2}, {}),
    ("patterns", {"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "string"}},
                  "propertyNames": {"maxLength": 8},
                  "properties": {"when": {"type": "string", "format": "date-time"},
                                 "not_xy": {"not": {"enum": ["x", "y"]}, "type": "string"}}},
     {}),
]


@pytest.mark.parametrize(("schema", "options"), [(s, o) for _, s, o in CASES],
                         ids=[name for name, _, _ in CASES])
def test_compile_leaves_no_cyclic_garbage(schema: Any, options: dict, cyclic_leftovers) -> None:
    compile_json_schema(schema, strict=False, cache=None, **options)  # module memos filled

    def compile_and_drop() -> None:
        assert compile_json_schema(schema, strict=False, cache=None, **options).to_gbnf()

    kinds = cyclic_leftovers(compile_and_drop)
    assert not kinds, f"the compile left cycles: {kinds.most_common(8)}"
