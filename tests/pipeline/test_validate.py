"""Schema validation: pointer-addressed reasons, formats checked, strict integers on request."""

from __future__ import annotations

import pytest

from formcast.errors import SchemaError
from formcast.pipeline.validate import Validator

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "placed_at": {"type": "string", "format": "date-time"},
        "email": {"type": "string", "format": "email"},
        "status": {"enum": ["open", "shipped"]},
        "qty": {"type": "integer", "minimum": 1},
        "lines": {"type": "array", "minItems": 1,
                  "items": {"$ref": "#/$defs/line"}},
    },
    "required": ["id", "status", "qty", "lines"],
    "additionalProperties": False,
    "$defs": {"line": {"type": "object", "properties": {"sku": {"type": "string",
                                                                  "pattern": "^[A-Z]{2}-\\d+$"}},
                       "required": ["sku"]}},
}
GOOD = {"id": "0b8e4a52-6f0e-4c1e-9a38-3f0f7f1d2c11", "placed_at": "2024-03-14T09:30:00Z",
        "email": "a@b.example", "status": "open", "qty": 2, "lines": [{"sku": "AB-12"}]}


def test_valid_value_has_no_violations() -> None:
    assert Validator(ORDER).validate(GOOD) == []


def test_every_error_is_a_pointer_and_a_reason_sorted_by_location() -> None:
    bad = {**GOOD, "status": "lost", "qty": 0, "lines": [{"sku": "ab12"}, {}], "extra": 1}
    bad.pop("id")
    found = [str(v) for v in Validator(ORDER).validate(bad)]
    assert found == [
        '/extra: is not an allowed property (additionalProperties is false)',
        '/id: is required but missing',
        '/lines/0/sku: "ab12" does not match the pattern ^[A-Z]{2}-\\d+$',
        '/lines/1/sku: is required but missing',
        '/qty: 0 is less than the minimum 1',
        '/status: "lost" is not one of ["open", "shipped"]',
    ]


def test_errors_are_capped() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    found = Validator(schema, max_errors=3).validate(["a", "b", "c", "d", "e"])
    assert [v.pointer for v in found] == ["/0", "/1", "/2"]


def test_array_indices_sort_numerically() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    found = Validator(schema).validate(["x"] * 12)
    assert [v.pointer for v in found][:3] == ["/0", "/1", "/2"]
    assert found[-1].pointer == "/9"  # capped at 10, in numeric order (not /10, /11)


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    ("date-time", "2024-03-14T09:30:00+01:00", "2024-13-14T09:30:00Z"),
    ("date-time", "2024-03-14T09:30:00.5Z", "2024-03-14 09:30"),
    ("date", "2024-02-29", "2023-02-29"),
    ("time", "23:59:60Z", "24:00:00Z"),
    ("email", "x@y.example", "not an email"),
    ("uuid", "0b8e4a52-6f0e-4c1e-9a38-3f0f7f1d2c11", "0b8e4a52"),
    ("uri", "https://example.com/a?b=c", "no scheme here"),
    ("ipv4", "192.168.0.1", "999.1.1.1"),
    ("duration", "P3DT4H", "P"),
    ("hostname", "api.example.com", "-bad-.example"),
])
def test_formats_are_checked(fmt: str, good: str, bad: str) -> None:
    validator = Validator({"type": "string", "format": fmt})
    assert validator.validate(good) == []
    (violation,) = validator.validate(bad)
    assert violation.kind == "format" and violation.keyword == "format"
    assert violation.message == f'"{bad}" is not a valid {fmt}'


def test_integer_one_point_zero_only_refused_when_strict() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert Validator(schema).validate({"n": 1.0}) == []
    (violation,) = Validator(schema, strict_integers=True).validate({"n": 1.0})
    assert str(violation) == "/n: expected integer, got number 1.0"
    assert Validator(schema, strict_integers=True).validate({"n": True}) != []


def test_messages_use_json_not_python() -> None:
    (v,) = Validator({"const": None}).validate(True)
    assert v.message == "true is not null"


def test_one_of_reports_the_closest_alternative() -> None:
    schema = {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                         "required": ["a"]},
                        {"type": "string"}]}
    (v,) = Validator(schema).validate({"a": "x"})
    assert v.pointer == "" and "closest: /a: expected integer" in v.message


def test_dependent_required_points_at_the_missing_field() -> None:
    schema = {"type": "object", "dependentRequired": {"card": ["expiry"]}}
    (v,) = Validator(schema).validate({"card": "4111"})
    assert str(v) == '/expiry: is required when "card" is present'


def test_pointer_escapes_slash_and_tilde() -> None:
    schema = {"type": "object", "properties": {"a/b": {"type": "integer"},
                                               "c~d": {"type": "integer"}}}
    found = Validator(schema).validate({"a/b": "x", "c~d": "y"})
    assert [v.pointer for v in found] == ["/a~1b", "/c~0d"]


def test_invalid_schema_names_where() -> None:
    with pytest.raises(SchemaError) as info:
        Validator({"type": "object", "properties": {"a": {"type": "strin"}}})
    assert info.value.pointer == "/properties/a/type"


def test_schema_must_be_object_or_boolean() -> None:
    with pytest.raises(SchemaError):
        Validator(["not", "a", "schema"])


def test_multiple_of_uses_decimal_arithmetic():
    # 2609.95 / 0.01 is 260994.99999999997 in binary floats; JSON numbers are decimal.
    v = Validator({"type": "number", "multipleOf": 0.01})
    assert v.validate(2609.95) == []
    assert v.validate(19.99) == []
    errors = v.validate(2609.955)
    assert errors and "multiple of" in errors[0].message
