"""The prompt is derived from the schema: fields, order, descriptions and allowed values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from formcast.errors import SchemaError
from formcast.pipeline.prompt import describe_schema, plain_messages, schema_messages

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str) -> tuple[dict, str]:
    schema = json.loads((EXAMPLES / f"{name}.schema.json").read_text())
    return schema, (EXAMPLES / f"{name}.prompt.txt").read_text()


def test_messages_are_system_description_then_user_task():
    schema, task = _example("invoice")
    messages = schema_messages(schema, task)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == task.strip()
    system = messages[0]["content"]
    assert "JSON" in system
    assert schema["description"] in system


def test_every_field_appears_in_schema_order_with_its_description():
    schema, _ = _example("invoice")
    text = describe_schema(schema)
    positions = [text.index(f'"{name}"') for name in schema["properties"]]
    assert positions == sorted(positions)
    for name, sub in schema["properties"].items():
        assert sub["description"] in text, name
    # nested fields of the array items are listed, indented under line_items
    item_line = next(line for line in text.splitlines() if '"unit_price"' in line)
    assert item_line.startswith("  - ")


def test_enum_values_and_required_flags_are_spelled_out():
    schema, _ = _example("ticket_triage")
    text = describe_schema(schema)
    category = next(line for line in text.splitlines() if '"category"' in line)
    for value in schema["properties"]["category"]["enum"]:
        assert json.dumps(value) in category
    assert "required" in category
    assert text.index('"reasoning"') < text.index('"category"')


def test_optional_fields_const_and_refs():
    schema = {
        "type": "object",
        "$defs": {"colour": {"enum": ["red", "green"], "description": "Paint colour."}},
        "properties": {
            "kind": {"const": "car"},
            "colour": {"$ref": "#/$defs/colour"},
            "seats": {"type": "integer", "minimum": 1, "maximum": 9},
        },
        "required": ["kind"],
    }
    lines = describe_schema(schema).splitlines()
    assert any('"kind"' in ln and 'exactly "car"' in ln and "required" in ln for ln in lines)
    assert any('"colour"' in ln and '"red", "green"' in ln and "Paint colour." in ln
               and "optional" in ln for ln in lines)
    assert any('"seats"' in ln and ">= 1" in ln and "<= 9" in ln for ln in lines)


def test_non_object_root_is_described_in_one_line():
    text = describe_schema({"type": "array", "items": {"type": "string"}})
    assert text == "The JSON value is list of strings."


def test_bad_refs_name_the_pointer():
    with pytest.raises(SchemaError) as err:
        describe_schema({"properties": {"a": {"$ref": "#/$defs/missing"}}})
    assert err.value.pointer == "/properties/a/$ref"
    with pytest.raises(SchemaError, match="only local"):
        describe_schema({"properties": {"a": {"$ref": "http://example.com/s.json"}}})
    with pytest.raises(SchemaError, match="must be a JSON object"):
        schema_messages(["not", "a", "schema"], "task")  # type: ignore[arg-type]


def test_recursive_schema_terminates():
    schema = {"$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string"}, "child": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node"}
    text = describe_schema(schema)
    assert text.count('"name"') >= 2


def test_plain_messages_for_grammar_constraints():
    assert plain_messages("  count to 3 ") == [{"role": "user", "content": "count to 3"}]
    assert plain_messages("x", system="be terse")[0] == {"role": "system", "content": "be terse"}
