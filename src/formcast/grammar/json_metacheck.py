"""A fast proof that a schema is valid against the JSON Schema 2020-12 metaschema.

``jsonschema`` validates a schema against its metaschema faithfully but slowly (the 2020-12
metaschema is seven vocabularies glued by ``$dynamicRef``, resolved again at every subschema):
10-30 ms for a schema of a few hundred lines, more than the rest of the compile. This module
walks the schema once and checks what the metaschema asserts, keyword by keyword. It only ever
answers "valid" when the metaschema would: anything it is unsure of (another dialect, an
infinite number, a number type JSON does not produce) and every actual error returns False,
and the caller then asks ``jsonschema`` for the verdict and its error message.

The metaschema's ``format`` annotations (uri, uri-reference, regex) are not asserted: the
compiler validates without a format checker.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

SIMPLE_TYPES: Final = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})

# the metaschema's own patterns, applied as jsonschema applies them (re.search)
_ANCHOR_PATTERN: Final = re.compile(r"^[A-Za-z_][-A-Za-z0-9._]*$")
_ID_PATTERN: Final = re.compile(r"^[^#]*#?$")


def _string(value: Any) -> bool:
    return type(value) is str


def _number(value: Any) -> bool:
    kind = type(value)
    return kind is int or (kind is float and math.isfinite(value))


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def _count(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return value >= 0
    return kind is float and math.isfinite(value) and value.is_integer() and value >= 0


def _unique_strings(value: Any) -> bool:
    return (type(value) is list and all(type(v) is str for v in value)
            and len(set(value)) == len(value))


def _types(value: Any) -> bool:
    if type(value) is str:
        return value in SIMPLE_TYPES
    return (type(value) is list and bool(value)
            and all(type(v) is str and v in SIMPLE_TYPES for v in value)
            and len(set(value)) == len(value))


def _anchor(value: Any) -> bool:
    return type(value) is str and _ANCHOR_PATTERN.search(value) is not None


def _id(value: Any) -> bool:
    return type(value) is str and _ID_PATTERN.search(value) is not None


def _array(value: Any) -> bool:
    return type(value) is list


def _boolean(value: Any) -> bool:
    return type(value) is bool


def _dependent_required(value: Any) -> bool:
    return type(value) is dict and all(_unique_strings(v) for v in value.values())


def _vocabulary(value: Any) -> bool:
    return type(value) is dict and all(type(k) is str and type(v) is bool
                                       for k, v in value.items())


# What the metaschema asserts about each keyword's value; keywords it does not name (and
# "const", "default") are free. Keywords whose value holds subschemas are handled in the walk.
_LEAF_CHECKS: Final = {
    **dict.fromkeys(("$schema", "$ref", "$dynamicRef", "$recursiveRef", "$comment", "title",
                     "description", "format", "contentEncoding", "contentMediaType", "pattern"),
                    _string),
    **dict.fromkeys(("maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"), _number),
    **dict.fromkeys(("maxLength", "minLength", "maxItems", "minItems", "maxContains",
                     "minContains", "maxProperties", "minProperties"), _count),
    **dict.fromkeys(("$anchor", "$dynamicAnchor", "$recursiveAnchor"), _anchor),
    **dict.fromkeys(("deprecated", "readOnly", "writeOnly", "uniqueItems"), _boolean),
    **dict.fromkeys(("enum", "examples"), _array),
    "multipleOf": _positive,
    "type": _types,
    "required": _unique_strings,
    "$id": _id,
    "dependentRequired": _dependent_required,
    "$vocabulary": _vocabulary,
}
_SCHEMA: Final = frozenset({"items", "contains", "additionalProperties", "propertyNames", "if", "then",
                     "else", "not", "unevaluatedItems", "unevaluatedProperties", "contentSchema"})
_SCHEMA_ARRAY: Final = frozenset({"prefixItems", "allOf", "anyOf", "oneOf"})
_SCHEMA_MAP: Final = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs",
                         "definitions"})


def certainly_valid_2020_12(schema: Any) -> bool:
    """True only when ``schema`` validates against the 2020-12 metaschema; False when it does
    not or when this check cannot tell."""
    stack = [schema]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is bool:
            continue
        if kind is not dict:
            return False
        if id(node) in seen:
            continue
        seen.add(id(node))
        # Declared a dict (it is one: checked above) so mypyc iterates it natively; as Any,
        # .items() was a generic method call and every pair was unpacked through an iterator.
        mapping: dict[Any, Any] = node
        for key, value in mapping.items():
            check = _LEAF_CHECKS.get(key)
            if check is not None:
                if not check(value):
                    return False
            elif key in _SCHEMA:
                stack.append(value)
            elif key in _SCHEMA_MAP:
                if type(value) is not dict:
                    return False
                members: dict[Any, Any] = value
                for member in members.values():
                    stack.append(member)
            elif key in _SCHEMA_ARRAY:
                if type(value) is not list or not value:
                    return False
                stack.extend(value)
            elif key == "dependencies":  # each value: a schema or a stringArray
                if type(value) is not dict:
                    return False
                for dep in value.values():
                    if type(dep) is not list:
                        stack.append(dep)
                    elif not _unique_strings(dep):
                        return False
    return True
