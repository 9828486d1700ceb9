"""The fast 2020-12 metaschema check never calls an invalid schema valid, and takes the fast
path for the real schemas (so compiles do not pay for ``jsonschema``'s metaschema walk)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from formcast.errors import SchemaError
from formcast.grammar.json_metacheck import certainly_valid_2020_12
from formcast.grammar.json_schema import compile_json_schema

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path("/work/shared/data/json-schema-test-suite/tests/draft2020-12")
META = Draft202012Validator(Draft202012Validator.META_SCHEMA)


def _corpus() -> list[Any]:
    paths = sorted(ROOT.glob("examples/**/*.json")) + sorted(
        ROOT.glob("benchmarks/grammars/schema/*.schema.json"))
    schemas = [json.loads(p.read_text()) for p in paths]
    if SUITE.is_dir():
        for p in sorted(SUITE.glob("*.json")):
            schemas += [case["schema"] for case in json.loads(p.read_text())]
    return [s for s in schemas if not isinstance(s, dict) or s.get("$schema") in (
        None, "https://json-schema.org/draft/2020-12/schema")]


CORPUS = _corpus()


def test_real_schemas_take_the_fast_path_exactly_when_valid() -> None:
    assert len(CORPUS) > 10
    for schema in CORPUS:
        assert certainly_valid_2020_12(schema) == META.is_valid(schema), json.dumps(schema)[:200]


@pytest.mark.parametrize("schema", [
    {"type": "strin"},
    {"type": ["string", "string"]},
    {"type": []},
    {"properties": {"a": {"minLength": -1}}},
    {"items": [{"type": "string"}]},  # the tuple form is not 2020-12
    {"anyOf": []},
    {"required": ["a", "a"]},
    {"multipleOf": 0},
    {"maxItems": 1.5},
    {"minimum": "1"},
    {"$anchor": "1abc"},
    {"$id": "https://example.com/s#frag"},
    {"dependencies": {"a": ["b", "b"]}},
    {"dependencies": {"a": 3}},
    {"dependentRequired": {"a": "b"}},
    {"$vocabulary": {"https://example.com": 1}},
    {"$defs": {"x": {"uniqueItems": "yes"}}},
    {"not": {"enum": 1}},
    {"$recursiveAnchor": True},  # a boolean in 2019-09, an anchor string in 2020-12
    {"uniqueItems": 1},
    {"deprecated": "no"},
    {"enum": {}},
    {"prefixItems": [{"maxContains": -2}]},
    {"contentSchema": 5},
    {"minLength": True},
])
def test_invalid_schemas_are_left_to_jsonschema(schema: dict) -> None:
    assert not META.is_valid(schema)
    assert not certainly_valid_2020_12(schema)
    with pytest.raises(SchemaError):
        compile_json_schema(schema, strict=False, cache=None)


def test_unsure_values_fall_back_but_still_compile() -> None:
    schema = {"type": "number", "maximum": float("inf")}
    assert META.is_valid(schema) and not certainly_valid_2020_12(schema)
    with pytest.raises(SchemaError):  # valid for the metaschema, not a JSON number
        compile_json_schema(schema, strict=False, cache=None)


KEYWORDS = ["type", "items", "properties", "required", "enum", "const", "minimum", "multipleOf",
            "maxLength", "minItems", "pattern", "$id", "$anchor", "$ref", "allOf", "anyOf",
            "prefixItems", "dependencies", "dependentRequired", "$vocabulary",
            "additionalProperties", "not", "if", "format", "uniqueItems", "examples", "$defs",
            "$recursiveAnchor", "contentSchema", "x-unknown", "$dynamicAnchor", "deprecated"]
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2, allow_nan=False)
    | st.sampled_from(["", "a", "#", "a#b", "_a", "1a", "string", "integer", "x\n"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["a", "b", "type", "minimum"]), inner, max_size=3),
    max_leaves=6)


def _schema_positions(node: Any, out: list[dict]) -> None:
    if isinstance(node, dict):
        out.append(node)
        for value in node.values():
            _schema_positions(value, out)
    elif isinstance(node, list):
        for value in node:
            _schema_positions(value, out)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_schemas_are_never_wrongly_valid(data: st.DataObject) -> None:
    schema = copy.deepcopy(data.draw(st.sampled_from([s for s in CORPUS if isinstance(s, dict)])))
    positions: list[dict] = []
    _schema_positions(schema, positions)
    for _ in range(data.draw(st.integers(1, 3))):
        node = data.draw(st.sampled_from(positions))
        node[data.draw(st.sampled_from(KEYWORDS))] = data.draw(VALUES)
    if certainly_valid_2020_12(schema):
        assert META.is_valid(schema), json.dumps(schema)[:300]
