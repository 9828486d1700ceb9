"""Structural validation against the same schema that built the grammar (JSON Schema 2020-12).

Why our own wrapper around ``jsonschema``: formats are checked (jsonschema skips them unless
asked, and several 2020-12 formats need optional packages, so the common ones are supplied
here), ``1.0`` can be refused as an integer, and every error comes out as a JSON pointer plus a
short reason written in JSON terms (not Python reprs), sorted by location and capped, so it can
go straight back to the model on retry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, time
from decimal import Decimal, InvalidOperation
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError as _JsError
from jsonschema.exceptions import best_match

from formcast.errors import SchemaError
from formcast.pipeline.result import Violation, json_pointer, show_value

# ----------------------------------------------------------------------------- formats

_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})\Z")
_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))\Z")
_DURATION = re.compile(
    r"P(?:\d+W|(?=\d|T\d)(?:\d+Y)?(?:\d+M)?(?:\d+D)?(?:T(?=\d)(?:\d+H)?(?:\d+M)?(?:\d+S)?)?)\Z")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"{}|\\^`]*\Z")
_URI_REFERENCE = re.compile(r"[^\s<>\"{}|\\^`]*\Z")
_HOSTNAME_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
_JSON_POINTER = re.compile(r"(?:/(?:[^~/]|~[01])*)*\Z")


def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    m = _DATE_TIME.match(value)
    if not m:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        date(year, month, day)
        time(hour, minute, min(second, 59))  # RFC 3339 allows a leap second (60)
    except ValueError:
        return False
    return second <= 60


def _is_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    m = _TIME.match(value)
    if not m:
        return False
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if m.group(6) is not None and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return hour <= 23 and minute <= 59 and second <= 60


def _is_hostname(value: object) -> bool:
    if not isinstance(value, str):
        return True
    name = value[:-1] if value.endswith(".") else value
    return 0 < len(name) <= 253 and all(_HOSTNAME_LABEL.match(lab) for lab in name.split("."))


def _regex_check(pattern: re.Pattern[str]):  # noqa: ANN202 - a tiny closure factory
    def check(value: object) -> bool:
        return not isinstance(value, str) or pattern.match(value) is not None
    return check


_EXTRA_FORMATS = {
    "date-time": _is_date_time,
    "time": _is_time,
    "duration": _regex_check(_DURATION),
    "uri": _regex_check(_URI),
    "iri": _regex_check(_URI),
    "uri-reference": _regex_check(_URI_REFERENCE),
    "iri-reference": _regex_check(_URI_REFERENCE),
    "hostname": _is_hostname,
    "json-pointer": _regex_check(_JSON_POINTER),
}


def format_checker() -> FormatChecker:
    """The 2020-12 format checker, completed with the formats jsonschema leaves to extras."""
    base = Draft202012Validator.FORMAT_CHECKER
    checker = FormatChecker(formats=base.checkers.keys())
    for name, func in _EXTRA_FORMATS.items():
        if name not in checker.checkers:
            checker.checks(name)(func)
    return checker


# ----------------------------------------------------------------------------- the validator


def _strict_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _decimal_multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[_JsError]:
    """``multipleOf`` in decimal arithmetic: JSON numbers are decimal, and binary floats
    wrongly refuse e.g. 2609.95 as a multiple of 0.01 (the grammar, exact, accepts it)."""
    if not validator.is_type(instance, "number"):
        return
    try:
        quotient = Decimal(repr(instance)) / Decimal(repr(divisor))
    except (InvalidOperation, ValueError):
        yield from _JSONSCHEMA_MULTIPLE_OF(validator, divisor, instance, schema)
        return
    if quotient != quotient.to_integral_value():
        yield _JsError(f"{instance!r} is not a multiple of {divisor!r}")


_JSONSCHEMA_MULTIPLE_OF = Draft202012Validator.VALIDATORS["multipleOf"]

_DecimalValidator = jsonschema.validators.extend(
    Draft202012Validator, {"multipleOf": _decimal_multiple_of})

_StrictIntegerValidator = jsonschema.validators.extend(
    _DecimalValidator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


class Validator:
    """Validates values against one JSON Schema and reports pointer-addressed violations.

    ``strict_integers``: refuse ``1.0`` where the schema says ``integer`` (JSON Schema itself
    accepts it, being numerically an integer). ``max_errors`` caps the list (sorted by pointer).
    """

    def __init__(self, schema: Any, *, strict_integers: bool = False, max_errors: int = 10,
                 check_formats: bool = True) -> None:
        if not isinstance(schema, dict | bool):
            raise SchemaError(f"a JSON Schema must be an object or a boolean, not "
                              f"{type(schema).__name__}")
        try:
            Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise SchemaError(f"invalid schema: {_clip(exc.message, 160)}",
                              pointer=json_pointer(exc.absolute_path)) from None
        cls = _StrictIntegerValidator if strict_integers else _DecimalValidator
        self.schema = schema
        self.strict_integers = strict_integers
        self.max_errors = max_errors
        self._validator = cls(schema, format_checker=format_checker() if check_formats else None)

    def validate(self, value: Any) -> list[Violation]:
        """All violations of the schema by ``value``, sorted by location, at most ``max_errors``."""
        found: dict[tuple[str, str | None, str], Violation] = {}
        for error in self._validator.iter_errors(value):
            for violation in _violations(error):
                found.setdefault((violation.pointer, violation.keyword, violation.message),
                                 violation)
        ordered = sorted(found.values(), key=_sort_key)
        return ordered[:self.max_errors]

    def is_valid(self, value: Any) -> bool:
        return self._validator.is_valid(value)


def _sort_key(v: Violation) -> tuple[Any, ...]:
    parts = v.pointer.split("/")[1:] if v.pointer else []
    return (tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts), v.keyword or "",
            v.message)


# ----------------------------------------------------------------------------- messages


def _violations(error: _JsError) -> Iterator[Violation]:
    path = list(error.absolute_path)
    pointer = json_pointer(path)
    keyword = str(error.validator)
    instance = error.instance
    value = error.validator_value
    kind = "format" if keyword == "format" else "schema"

    if keyword == "required" and isinstance(instance, dict):
        for name in value:
            if name not in instance:
                yield Violation(json_pointer([*path, name]), "is required but missing",
                                "schema", "required")
        return
    if keyword == "dependentRequired" and isinstance(instance, dict):
        for trigger, needed in value.items():
            if trigger in instance:
                for name in needed:
                    if name not in instance:
                        yield Violation(json_pointer([*path, name]),
                                        f"is required when {show_value(trigger)} is present",
                                        "schema", "dependentRequired")
        return
    if keyword == "additionalProperties" and value is False and isinstance(instance, dict):
        parent = error.schema  # the object schema that holds the failing keyword
        props = parent.get("properties", {}) if isinstance(parent, dict) else {}
        patterns = parent.get("patternProperties", {}) if isinstance(parent, dict) else {}
        for name in instance:
            if name not in props and not any(re.search(p, name) for p in patterns):
                yield Violation(json_pointer([*path, name]),
                                "is not an allowed property (additionalProperties is false)",
                                "schema", "additionalProperties")
        return
    yield Violation(pointer, _reason(error, keyword, instance, value), kind, keyword)


def _reason(error: _JsError, keyword: str, instance: Any, value: Any) -> str:
    shown = show_value(instance)
    if keyword == "type":
        expected = " or ".join(value) if isinstance(value, list) else str(value)
        return f"expected {expected}, got {_json_type(instance)} {shown}"
    if keyword == "enum":
        return f"{shown} is not one of {show_value(value)}"
    if keyword == "const":
        return f"{shown} is not {show_value(value)}"
    if keyword in _BOUNDS:
        return f"{shown} {_BOUNDS[keyword]} {show_value(value)}"
    if keyword == "multipleOf":
        return f"{shown} is not a multiple of {show_value(value)}"
    if keyword in ("minLength", "maxLength"):
        bound = "at least" if keyword == "minLength" else "at most"
        return f"has {len(instance)} characters; {bound} {value} allowed"
    if keyword in ("minItems", "maxItems"):
        bound = "at least" if keyword == "minItems" else "at most"
        return f"has {len(instance)} items; {bound} {value} required"
    if keyword in ("minProperties", "maxProperties"):
        bound = "at least" if keyword == "minProperties" else "at most"
        return f"has {len(instance)} properties; {bound} {value} required"
    if keyword == "uniqueItems":
        return "items must be unique but some repeat"
    if keyword == "pattern":
        return f"{shown} does not match the pattern {value}"
    if keyword == "format":
        return f"{shown} is not a valid {value}"
    if keyword == "oneOf" and not error.context:
        return f"{shown} matches more than one of the alternatives (oneOf needs exactly one)"
    if keyword in ("anyOf", "oneOf") and error.context:
        closest = _closest_alternative(error)
        where = json_pointer(closest.absolute_path)
        inner = _reason(closest, str(closest.validator), closest.instance, closest.validator_value)
        return f"matches none of the allowed alternatives (closest: {where or '/'}: {inner})"
    if keyword == "false":
        return "no value is allowed here"
    return _clip(error.message, 200)


def _closest_alternative(error: _JsError) -> _JsError:
    """The most telling error among the alternatives: from a branch whose type matched (the
    model picked that shape), the one with the fewest errors."""
    branches: dict[Any, list[_JsError]] = {}
    for sub in error.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    shaped = [errs for errs in branches.values()
              if not any(e.validator == "type" and not e.relative_path for e in errs)]
    pool = min(shaped, key=len) if shaped else list(error.context or ())
    return best_match(pool)


_BOUNDS = {
    "minimum": "is less than the minimum",
    "maximum": "is greater than the maximum",
    "exclusiveMinimum": "must be greater than",
    "exclusiveMaximum": "must be less than",
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
