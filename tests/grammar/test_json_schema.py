"""The JSON Schema compiler: what users rely on, checked with the reference IR recognizer.

The official suite (test_schema_suite.py) covers keyword semantics broadly; these tests pin
the compiler's own promises: the report, strict mode, whitespace bounds, property order,
rule naming and sharing, recursion, the cache, and clear errors.
"""

from __future__ import annotations

import json
import os
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formcast.errors import (
    FormcastError,
    SchemaError,
    SchemaSyntaxError,
    UnsupportedSchemaError,
)
from formcast.grammar.cache import CompileCache, schema_hash
from formcast.grammar.ir import Choice, Grammar, Literal, Ref, Repeat, Seq, iter_refs
from formcast.grammar.json_schema import COMPILER_VERSION, compile_json_schema
from formcast.grammar.recognize import recognizes


def accepts(grammar: Grammar, value) -> bool:
    """Whether the grammar accepts ``value`` as ``json.dumps`` writes it."""
    return takes(grammar, json.dumps(value))


def takes(grammar: Grammar, text: str) -> bool:
    """Whether the grammar accepts exactly this JSON text."""
    return recognizes(grammar, text.encode("utf-8"))


def compile_(schema, **kw) -> Grammar:
    kw.setdefault("cache", None)
    return compile_json_schema(schema, **kw)


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name"],
    "additionalProperties": False,
}


# ----------------------------------------------------------------------------- basics


ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1},
        "ship_to": {"$ref": "#/$defs/address"},
        "bill_to": {"$ref": "#/$defs/address"},
    },
    "required": ["id", "lines"],
    "additionalProperties": False,
    "$defs": {
        "line": {"type": "object", "properties": {
            "sku": {"type": "string", "maxLength": 8},
            "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
            "required": ["sku", "qty"], "additionalProperties": False},
        "address": {"type": "object", "properties": {
            "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city"], "additionalProperties": False},
    },
}
ORDER_VALUES = [
    ({"id": "AB-123", "lines": [{"sku": "x1", "qty": 3}]}, True),
    ({"id": "AB-123", "lines": [{"sku": "x1", "qty": 3}, {"sku": "", "qty": 99}],
      "ship_to": {"city": "Lyon", "zip": "69001"}, "bill_to": {"city": "Ys"}}, True),
    ({"id": "AB-12", "lines": [{"sku": "x1", "qty": 3}]}, False),
    ({"id": "AB-123", "lines": []}, False),
    ({"id": "AB-123", "lines": [{"sku": "x1", "qty": 100}]}, False),
    ({"id": "AB-123", "lines": [{"sku": "123456789", "qty": 1}]}, False),
    ({"id": "AB-123", "lines": [{"sku": "x", "qty": 1}], "bill_to": {"zip": "69001"}}, False),
]


def test_engine_compiles_the_rules_as_built_and_readers_get_them_tidied() -> None:
    """Folding single-use helper rules back in is for people (GBNF, rule counts): a matcher
    compiles the rules as the compiler built them, which must be the same language, and
    never pays for the tidying."""
    from formcast.engine.matcher import Matcher
    from formcast.engine.vocab import Vocabulary

    g = Grammar.from_json_schema(ORDER, cache=None)
    readable = g.report.readable_rules
    vocab = Vocabulary.from_tokens([b""] + [bytes([c]) for c in range(32, 127)], eos_ids=[0])
    for value, valid in ORDER_VALUES:
        m = Matcher(g, vocab)
        assert (m.accept_bytes(json.dumps(value).encode()) and m.is_accepting()) == valid, value
    assert readable._rules is None  # a matcher was compiled and nothing was tidied
    built, printed = Grammar(g.engine_rules), Grammar.from_gbnf(g.to_gbnf())
    for value, valid in ORDER_VALUES:
        assert accepts(built, value) == accepts(g, value) == accepts(printed, value) == valid
    assert len(g.rules) < len(g.engine_rules)
    assert g.report.rule_count == len(g.rules)


def test_schema_grammars_are_named_by_schema_version_and_options() -> None:
    """A schema grammar's fingerprint (the engine's cache key) comes from its input, not
    from hashing every rule: equal inputs, equal grammars; any change, another name."""
    first = Grammar.from_json_schema(ORDER, cache=None)
    again = Grammar.from_json_schema(json.loads(json.dumps(ORDER)), cache=None)
    assert first is not again and first == again and first.fingerprint == again.fingerprint
    assert dict(first.engine_rules) == dict(again.engine_rules)
    compact = Grammar.from_json_schema(ORDER, whitespace="compact", cache=None)
    other = Grammar.from_json_schema({**ORDER, "required": ["id"]}, cache=None)
    names = {first.fingerprint, compact.fingerprint, other.fingerprint,
             Grammar(first.engine_rules).fingerprint}
    assert len(names) == 4


def test_readable_rules_are_made_once_whichever_threads_ask() -> None:
    g = Grammar.from_json_schema(ORDER, cache=None)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(g.rules)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(rules is seen[0] for rules in seen)



def test_from_json_schema_returns_grammar_with_report() -> None:
    g = Grammar.from_json_schema(PERSON, cache=None)
    assert g.report is not None and g.report.exact
    assert g.report.compiled["required"] == 1
    assert g.report.compiler_version == COMPILER_VERSION
    assert g.report.rule_count == len(g.rules)
    assert g.report.compile_seconds > 0
    assert accepts(g, {"name": "Ada", "age": 36, "email": "ada@example.org"})
    assert accepts(g, {"name": "Ada"})
    for bad in [{}, {"name": ""}, {"name": "Ada", "age": -1}, {"name": "Ada", "age": 151},
                {"name": "Ada", "age": 3.5}, {"name": "Ada", "email": "not-an-email"},
                {"name": "Ada", "nickname": "A"}, ["name"], "Ada"]:
        assert not accepts(g, bad), bad


def test_schema_text_is_accepted_and_bad_text_names_line_and_column() -> None:
    g = compile_('{"type": "integer"}')
    assert takes(g, "42") and not takes(g, "4.2")
    with pytest.raises(SchemaSyntaxError) as err:
        compile_('{"type": "integer",\n  "minimum": }')
    assert (err.value.line, err.value.column) == (2, 14)
    assert "line 2, column 14" in str(err.value)


def test_invalid_schema_error_names_the_pointer() -> None:
    with pytest.raises(SchemaError) as err:
        compile_({"properties": {"age": {"type": "integr"}}})
    assert err.value.pointer == "/properties/age/type"
    with pytest.raises(SchemaError) as err:
        compile_({"type": "string", "pattern": "a(b"})
    assert err.value.pointer == "/pattern"
    with pytest.raises(SchemaError, match="unknown \\$schema"):
        compile_({"$schema": "http://example.com/my-meta", "type": "string"})


@pytest.mark.parametrize("schema, good, bad", [
    ({"type": ["string", "null"]}, ["x", None], [1, True, {}]),
    ({"enum": [1, "a", None, [1, 2], {"k": False}]}, [1, "a", None, [1, 2], {"k": False}],
     [2, "b", [2, 1], {"k": True}, {}]),
    ({"const": {"a": [1, {"b": None}]}}, [{"a": [1, {"b": None}]}], [{"a": [1]}]),
    (True, [1, "x", None, {"a": [1, {}]}], []),
    (False, [], [1, "x", None, {}]),
    ({"enum": ["a", "b"], "minLength": 2}, [], ["a", "b"]),  # enum filtered by the rest
    ({"type": "integer", "enum": [1, 2.5, "x", 3.0]}, [1, 3], [2.5, "x"]),
])
def test_types_enum_const_boolean_schemas(schema, good, bad) -> None:
    g = compile_(schema)
    for v in good:
        assert accepts(g, v), v
    for v in bad:
        assert not accepts(g, v), v


# ----------------------------------------------------------------------------- report, strict


TAGS = {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    "id": {"not": {"items": {"type": "string"}}},
}}


def test_report_lists_unenforced_keywords_with_pointers() -> None:
    g = compile_(TAGS, strict=False)
    report = g.report
    assert report is not None and not report.exact
    pointers = {u.pointer: u for u in report.unenforced}
    assert set(pointers) == {"/properties/tags/uniqueItems", "/properties/id/not"}
    assert pointers["/properties/tags/uniqueItems"].keyword == "uniqueItems"
    assert "validator" in pointers["/properties/tags/uniqueItems"].reason
    assert report.unenforced_keywords == ["not", "uniqueItems"]
    text = report.format()
    assert "/properties/tags/uniqueItems" in text and "NOT enforced" in text
    assert report.to_dict()["unenforced"][0]["pointer"] == "/properties/id/not"
    # over-approximation: a duplicate item is still accepted by the grammar
    assert accepts(g, {"tags": ["a", "a"], "id": ["x"]})


def test_strict_raises_once_listing_every_unenforced_keyword() -> None:
    with pytest.raises(UnsupportedSchemaError) as err:
        compile_(TAGS)
    assert [item[:2] for item in err.value.items] == [
        ("/properties/id/not", "not"), ("/properties/tags/uniqueItems", "uniqueItems")]
    assert "/properties/tags/uniqueItems" in str(err.value)


def test_annotations_are_not_unenforced() -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:x",
              "title": "T", "description": "d", "examples": [1], "default": 1,
              "$comment": "c", "deprecated": True, "readOnly": True, "type": "integer"}
    g = compile_(schema)
    assert g.report is not None and g.report.exact
    assert dict(g.report.compiled) == {"type": 1}


# ----------------------------------------------------------------------------- whitespace


def test_flexible_whitespace_is_bounded() -> None:
    g = compile_(PERSON)
    value = {"name": "Ada", "age": 3}
    assert takes(g, json.dumps(value))
    assert takes(g, json.dumps(value, separators=(",", ":")))
    assert takes(g, json.dumps(value, indent=2))
    assert takes(g, json.dumps(value, indent="\t"))
    assert takes(g, '{' + " " * 20 + '"name": "Ada"}')
    assert not takes(g, '{' + " " * 21 + '"name": "Ada"}')  # a model stuck on spaces stops
    assert not takes(g, '{\n\n"name": "Ada"}')
    assert not takes(g, ' {"name": "Ada"}')  # nothing before the value


def test_compact_and_custom_whitespace() -> None:
    compact = compile_(PERSON, whitespace="compact")
    assert takes(compact, '{"name":"Ada","age":3}')
    assert not takes(compact, '{"name": "Ada"}')
    one_space = compile_(PERSON, whitespace=" ?")
    assert takes(one_space, '{"name": "Ada", "age": 3}')
    assert not takes(one_space, '{"name":  "Ada"}')
    with pytest.raises(FormcastError, match="other than space"):
        compile_(PERSON, whitespace="[ a]*")
    with pytest.raises(FormcastError):
        compile_(PERSON, whitespace="(")


# ----------------------------------------------------------------------------- objects


def test_properties_come_in_schema_order_so_reasoning_precedes_label() -> None:
    schema = {"type": "object", "properties": {"reasoning": {"type": "string"},
                                               "label": {"enum": ["yes", "no"]}},
              "required": ["reasoning", "label"], "additionalProperties": False}
    g = compile_(schema)
    assert takes(g, '{"reasoning": "because", "label": "yes"}')
    assert not takes(g, '{"label": "yes", "reasoning": "because"}')
    assert any("order of 'properties'" in n for n in g.report.notes)


@pytest.mark.parametrize("required", [["c"], ["a", "c"], ["d"], ["b", "d"], []])
@pytest.mark.parametrize("additional", [False, {"type": "integer"}])
def test_optional_members_accept_exactly_the_valid_key_subsets(required, additional) -> None:
    import itertools

    import jsonschema

    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcd"},
              "required": required, "additionalProperties": additional}
    g = compile_(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for r in range(5):
        for keys in itertools.combinations("abcd", r):
            for extra in ([], ["z"]):
                value = {k: 1 for k in (*keys, *extra)}
                assert accepts(g, value) == validator.is_valid(value), value
    # Optional members before the first required one do not copy the rest of the object
    # into each branch: every key is spelled once.
    if required:
        assert all(g.to_gbnf().count(f'"\\"{k}\\""') == 1 for k in "abcd")


def test_property_order_any_accepts_every_permutation() -> None:
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abc"},
              "required": ["a", "c"], "additionalProperties": False}
    g = compile_(schema, property_order="any")
    for text in ['{"a": 1, "c": 3}', '{"c": 3, "a": 1}', '{"b": 2, "c": 3, "a": 1}',
                 '{"c": 3, "b": 2, "a": 1}']:
        assert takes(g, text), text
    assert not takes(g, '{"a": 1, "b": 2}')
    assert not takes(g, '{"a": 1, "a": 1, "c": 3}')
    many = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdefg"}}
    g = compile_(many, property_order="any")
    assert any("at most 5" in n for n in g.report.notes)
    assert takes(g, '{"a": 1, "g": 2}') and not takes(g, '{"g": 2, "a": 1}')


def test_additional_keys_cannot_shadow_named_properties() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    g = compile_(schema)
    assert accepts(g, {"id": 1, "other": "x"})
    assert accepts(g, {"other": "x"})
    assert not takes(g, '{"id": 1, "id": "x"}')  # duplicate would bypass the id schema
    assert not takes(g, '{"other": "x", "id": "x"}')


def test_pattern_properties_and_additional_properties() -> None:
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "string"}},
              "additionalProperties": {"type": "integer"}}
    g = compile_(schema)
    assert g.report.exact
    assert accepts(g, {"x-trace": "abc", "count": 3})
    assert not accepts(g, {"x-trace": 3})
    assert not accepts(g, {"count": "3"})


def test_property_names_and_property_counts() -> None:
    schema = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 3},
              "minProperties": 1, "maxProperties": 2}
    g = compile_(schema)
    assert g.report.exact
    assert accepts(g, {"ab": 1}) and accepts(g, {"ab": 1, "c": 2})
    for bad in [{}, {"ab": 1, "c": 2, "d": 3}, {"abcd": 1}, {"A": 1}]:
        assert not accepts(g, bad), bad
    counted = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"],
               "minProperties": 2, "maxProperties": 3}
    g = compile_(counted)
    assert accepts(g, {"a": 1, "b": 2}) and accepts(g, {"a": 1, "z": 2})
    assert accepts(g, {"a": 1, "b": 2, "z": 3})
    assert not accepts(g, {"a": 1}) and not accepts(g, {"a": 1, "b": 2, "y": 3, "z": 4})


# ----------------------------------------------------------------------------- arrays


def test_items_prefix_items_and_counts() -> None:
    schema = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
              "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}
    g = compile_(schema)
    for v in [["a"], ["a", 1], ["a", 1, True, False]]:
        assert accepts(g, v), v
    for v in [[], [1], ["a", "b"], ["a", 1, 2], ["a", 1, True, True, True]]:
        assert not accepts(g, v), v
    closed = compile_({"prefixItems": [{"const": 1}], "items": False})
    assert accepts(closed, [1]) and accepts(closed, []) and not accepts(closed, [1, 1])


def test_unique_items_from_a_small_value_set() -> None:
    g = compile_({"type": "array", "items": {"enum": ["red", "green", "blue", 7]},
                  "uniqueItems": True, "maxItems": 3})
    assert g.report.exact
    assert accepts(g, []) and accepts(g, ["blue", 7]) and accepts(g, [7, "red", "green"])
    for bad in [["red", "red"], [7, "blue", 7], ["red", "green", "blue", 7], ["pink"]]:
        assert not accepts(g, bad), bad


def test_contains_counts_matching_items() -> None:
    g = compile_({"type": "array", "items": {"type": "integer"},
                  "contains": {"minimum": 10}, "minContains": 2, "maxContains": 3})
    assert g.report.exact
    assert accepts(g, [10, 1, 11]) and accepts(g, [1, 10, 2, 10, 3, 10])
    for bad in [[], [10], [1, 2, 10], [10, 10, 10, 10], [10, 10, "x"]]:
        assert not accepts(g, bad), bad


# ----------------------------------------------------------------------------- strings


def test_string_lengths_count_characters_not_bytes_or_escapes() -> None:
    g = compile_({"type": "string", "minLength": 2, "maxLength": 2})
    for text in ['"ab"', '"é\\n"', '"\\u00e9\\""', '"😀x"', '"\\ud83d\\ude00x"']:
        assert takes(g, text), text
    for text in ['"a"', '"abc"', '"\\ud83d\\ude00"', '"\\ud83d"']:
        assert not takes(g, text), text


def test_strings_follow_rfc8259() -> None:
    g = compile_({"type": "string"})
    assert takes(g, '"tab\\there \\"quoted\\" \\\\ \\/ \\u0041 \\uD83D\\uDE00"')
    assert not takes(g, '"raw\ttab"')  # control characters must be escaped
    assert not takes(g, '"bad \\x41"')
    assert not takes(g, '"unterminated')


def test_pattern_is_an_unanchored_search_on_the_decoded_string() -> None:
    g = compile_({"type": "string", "pattern": "[0-9]{3}"})
    assert accepts(g, "abc123def") and not accepts(g, "ab12")
    anchored = compile_({"type": "string", "pattern": '^say "hi"$'})
    assert accepts(anchored, 'say "hi"')  # json.dumps escapes the quotes
    assert not accepts(anchored, 'say "hi"!')
    newline = compile_({"type": "string", "pattern": "^a\nb$"})
    assert accepts(newline, "a\nb") and takes(newline, '"a\\u000ab"')
    both = compile_({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3})
    assert both.report.exact
    assert accepts(both, "abc") and not accepts(both, "abcd") and not accepts(both, "ab1")


def test_unsupported_pattern_is_reported_not_dropped_silently() -> None:
    g = compile_({"type": "string", "pattern": "^(?!x)"}, strict=False)
    assert [u.pointer for u in g.report.unenforced] == ["/pattern"]
    assert accepts(g, "x")  # over-approximated


@pytest.mark.parametrize("fmt, good, bad", [
    ("date", ["2024-02-29", "2000-02-29"], ["2023-02-29", "1900-02-29", "2024-13-01"]),
    ("date-time", ["2024-01-01T12:00:00Z", "1998-12-31T15:59:60.5-08:00"],
     ["2024-01-01 12:00:00Z", "1998-12-31T15:59:60Z", "2024-01-01T24:00:00Z"]),
    ("uuid", ["2eb8aa08-aa98-11ea-b4aa-73b441d16380"], ["2eb8aa08aa9811eab4aa73b441d16380"]),
    ("ipv4", ["192.168.0.1"], ["256.1.1.1", "01.2.3.4"]),
    ("email", ["a.b@example.com"], ["a..b@example.com", "@x.com"]),
])
def test_formats(fmt, good, bad) -> None:
    g = compile_({"type": "string", "format": fmt})
    for v in good:
        assert accepts(g, v), v
    for v in bad:
        assert not accepts(g, v), v
    loose = compile_({"type": "string", "format": fmt}, formats="annotate")
    assert all(accepts(loose, v) for v in bad)


def test_loose_and_unknown_formats_are_reported() -> None:
    g = compile_({"type": "string", "format": "hostname"}, strict=False)
    assert [u.keyword for u in g.report.unenforced] == ["format"]
    g = compile_({"type": "string", "format": "int32-ish"})
    assert g.report.exact and any("int32-ish" in n for n in g.report.notes)


# ----------------------------------------------------------------------------- numbers


def test_integer_and_number_bounds_are_exact() -> None:
    g = compile_({"type": "integer", "minimum": -15, "exclusiveMaximum": 120})
    assert all(takes(g, str(i)) for i in (-15, -1, 0, 9, 119))
    assert not any(takes(g, s) for s in ("-16", "120", "1000", "1.5", "-0", "007"))
    n = compile_({"type": "number", "exclusiveMinimum": 0.5, "maximum": 2.25})
    assert all(takes(n, s) for s in ("0.51", "1", "2.25", "2.2499", "0.500001"))
    assert not any(takes(n, s) for s in ("0.5", "0.50", "2.2501", "3", "-1", "1e0"))


def test_multiple_of() -> None:
    g = compile_({"type": "integer", "multipleOf": 7, "minimum": 0})
    assert all(takes(g, str(i)) for i in (0, 7, 14, 700, 7007))
    assert not any(takes(g, str(i)) for i in (1, 8, 701, -7))
    money = compile_({"type": "number", "multipleOf": 0.01})
    assert takes(money, "19.99") and takes(money, "-3") and takes(money, "2609.95")
    assert not takes(money, "0.001")
    big = compile_({"type": "integer", "multipleOf": 123457}, strict=False)
    assert [u.keyword for u in big.report.unenforced] == ["multipleOf"]


# ----------------------------------------------------------------------------- composition


def test_all_of_merges_and_any_of_distributes() -> None:
    schema = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                         "required": ["a"]},
                        {"properties": {"a": {"minimum": 10}, "b": {"type": "string"}}}],
              "anyOf": [{"required": ["b"]}, {"properties": {"a": {"maximum": 20}}}]}
    g = compile_(schema)
    assert g.report.exact
    assert accepts(g, {"a": 15}) and accepts(g, {"a": 30, "b": "x"})
    assert not accepts(g, {"a": 5}) and not accepts(g, {"a": 30})


def test_one_of_exact_when_branches_are_disjoint() -> None:
    union = {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}
    assert compile_(union).report.exact
    overlapping = {"oneOf": [{"type": "integer"}, {"minimum": 3}]}
    g = compile_(overlapping, strict=False)
    assert [u.keyword for u in g.report.unenforced] == ["oneOf"]


def test_one_of_exact_by_negating_simple_branches() -> None:
    g = compile_({"oneOf": [{"type": "string"}, {"maxLength": 3}]})
    assert g.report.exact  # (string AND longer than 3) OR (not a string)
    assert accepts(g, "abcd") and accepts(g, 5) and accepts(g, None)
    assert not accepts(g, "ab")


def test_not_is_exact_for_simple_schemas() -> None:
    g = compile_({"not": {"type": ["string", "null"]}})
    assert g.report.exact and accepts(g, 1) and not accepts(g, "x")
    g = compile_({"not": {"enum": [3, "x", True]}})
    assert g.report.exact
    assert all(accepts(g, v) for v in (4, 3.5, "y", False, None, [3], {"x": 1}))
    assert not any(takes(g, t) for t in ("3", "3.0", "3.00", '"x"', "true"))
    g = compile_({"type": "object", "not": {"required": ["a", "b"]}})
    assert accepts(g, {"a": 1}) and accepts(g, {}) and not accepts(g, {"a": 1, "b": 2})
    g = compile_({"type": "string", "not": {"pattern": "^[0-9]+$"}})
    assert accepts(g, "12a") and not accepts(g, "123")


def test_not_and_if_then_else_small_cases() -> None:
    g = compile_({"if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                  "then": {"required": ["x"]}, "else": {"required": ["y"]}})
    assert g.report.exact
    assert accepts(g, {"kind": "a", "x": 1}) and accepts(g, {"kind": "b", "y": 1})
    assert not accepts(g, {"kind": "a", "y": 1}) and not accepts(g, {"y": 2, "kind": "b"})
    g = compile_({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}})
    assert g.report.exact
    assert accepts(g, "ab") and accepts(g, 3)
    assert not accepts(g, "a") and not accepts(g, 1.5)


# ----------------------------------------------------------------------------- references


TREE = {
    "$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": False}},
    "type": "object",
    "properties": {"left": {"$ref": "#/$defs/node"}, "right": {"$ref": "#/$defs/node"}},
}


def test_shared_and_recursive_definitions_are_one_rule() -> None:
    g = compile_(TREE)
    assert "defs-node" in g.rules
    assert "defs-node" in set(iter_refs(g.rules["root"]))
    assert "defs-node" in set(iter_refs_deep(g, "defs-node"))  # recursive
    # the node's body (its "children" key) is written once, not copied per use
    assert sum(b'"children"' in lit.data for lit in literals(g)) == 1
    deep = {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}
    assert accepts(g, {"left": deep, "right": {"value": 0}})
    assert not accepts(g, {"left": {"value": 1, "children": [{"value": "x"}]}})


def literals(g: Grammar) -> list:
    out = []
    stack = list(g.rules.values())
    while stack:
        e = stack.pop()
        if isinstance(e, Literal):
            out.append(e)
        elif isinstance(e, Seq | Choice):
            stack.extend(e.items)
        elif isinstance(e, Repeat):
            stack.append(e.item)
    return out


def iter_refs_deep(g: Grammar, name: str) -> set[str]:
    seen: set[str] = set()
    stack = list(iter_refs(g.rules[name]))
    while stack:
        r = stack.pop()
        if r not in seen:
            seen.add(r)
            stack.extend(iter_refs(g.rules[r]))
    return seen


def test_root_recursion_and_pointer_escapes() -> None:
    g = compile_({"type": "object", "properties": {"next": {"$ref": "#"}},
                  "additionalProperties": False})
    assert accepts(g, {"next": {"next": {}}}) and not accepts(g, {"next": 1})
    escaped = {"$defs": {"a/b": {"type": "integer"}, "c~d": {"type": "string"},
                         "e%f": {"type": "null"}},
               "type": "array", "prefixItems": [{"$ref": "#/$defs/a~1b"},
                                                {"$ref": "#/$defs/c~0d"},
                                                {"$ref": "#/$defs/e%25f"}]}
    g = compile_(escaped)
    assert accepts(g, [1, "x", None]) and not accepts(g, ["x", 1, None])


def test_ref_with_sibling_keywords_and_definitions() -> None:
    schema = {"definitions": {"pos": {"type": "integer", "minimum": 1}},
              "properties": {"n": {"$ref": "#/definitions/pos", "maximum": 9}}}
    g = compile_(schema)
    assert accepts(g, {"n": 5}) and not accepts(g, {"n": 10}) and not accepts(g, {"n": 0})


def test_remote_ref_is_reported() -> None:
    g = compile_({"properties": {"x": {"$ref": "https://example.com/other.json"}}}, strict=False)
    assert [u.pointer for u in g.report.unenforced] == ["/properties/x/$ref"]


def test_max_depth_bounds_generic_values() -> None:
    unbounded = compile_(True)
    nested = [[[[[[1]]]]]]
    assert accepts(unbounded, nested)
    bounded = compile_(True, max_depth=2)
    assert accepts(bounded, [[1], {"a": 2}]) and accepts(bounded, 3)
    assert not accepts(bounded, [[[1]]])
    assert not accepts(compile_({"type": "object"}, max_depth=1), {"a": {"b": 1}})


def test_rule_names_follow_schema_paths_and_dead_rules_go() -> None:
    schema = {"type": "object", "properties": {
        "user": {"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 10},
            "address": {"$ref": "#/$defs/address"}}}},
        "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}}},
                  "unused": {"type": "object", "properties": {"z": {"type": "string"}}}}}
    g = compile_(schema)
    assert "root-properties-user" in g.rules
    assert "defs-address" in g.rules
    assert not any("unused" in name for name in g.rules)
    reachable = {"root"} | iter_refs_deep(g, "root")
    assert set(g.rules) == reachable
    assert isinstance(Ref("x"), Ref)


# ----------------------------------------------------------------------------- cache


def test_cache_keys_on_schema_hash_version_and_options() -> None:
    cache = CompileCache(capacity=4)
    a = compile_json_schema(PERSON, cache=cache)
    b = compile_json_schema(json.loads(json.dumps(PERSON)), cache=cache)
    assert a is b
    c = compile_json_schema(PERSON, cache=cache, whitespace="compact")
    assert c is not a
    stats = cache.stats()
    assert (stats.hits, stats.misses) == (1, 2)
    assert schema_hash({"a": 1}) != schema_hash({"a": 1.5})


def test_cache_keeps_schemas_whose_property_order_differs_apart() -> None:
    # Property order shapes the grammar ("reasoning" before "label"), so a schema that
    # differs from a cached one only in key order must not be served the cached grammar.
    def labelled(*order: str) -> dict:
        return {"type": "object", "properties": {name: {"type": "string"} for name in order},
                "required": ["label", "reasoning"], "additionalProperties": False}

    cache = CompileCache(capacity=4)
    first = compile_json_schema(labelled("reasoning", "label"), cache=cache)
    second = compile_json_schema(labelled("label", "reasoning"), cache=cache)
    assert second is not first and cache.stats().misses == 2
    assert takes(second, '{"label": "a", "reasoning": "b"}')
    assert not takes(second, '{"reasoning": "b", "label": "a"}')
    assert takes(first, '{"reasoning": "b", "label": "a"}')


def test_cache_is_lru_and_strictness_does_not_split_it() -> None:
    cache = CompileCache(capacity=2)
    s1, s2, s3 = ({"type": "integer", "minimum": i} for i in range(3))
    compile_json_schema(s1, cache=cache)
    compile_json_schema(s2, cache=cache)
    compile_json_schema(s1, cache=cache)  # s1 becomes most recent
    compile_json_schema(s3, cache=cache)  # evicts s2
    assert cache.stats().size == 2
    compile_json_schema(s1, cache=cache)
    assert cache.stats().hits == 2
    compile_json_schema(s2, cache=cache)
    assert cache.stats().misses == 4
    compile_json_schema(TAGS, strict=False, cache=cache)
    with pytest.raises(UnsupportedSchemaError):
        compile_json_schema(TAGS, cache=cache)  # served from the cache, still strict
    assert cache.stats().misses == 5


def test_grammar_is_shared_safely_across_threads() -> None:
    cache = CompileCache()
    results: list[Grammar] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        results.append(compile_json_schema(TREE, cache=cache))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(g) for g in results}) == 1
    assert cache.stats().misses == 1 and cache.stats().hits == 7
    with pytest.raises(AttributeError):
        results[0].report = None  # type: ignore[misc]


def test_bad_options_are_refused() -> None:
    with pytest.raises(FormcastError, match="property_order"):
        compile_(PERSON, property_order="alphabetical")
    with pytest.raises(FormcastError, match="max_depth"):
        compile_(PERSON, max_depth=-1)


def test_report_lists_every_compile_option() -> None:
    # The report and the cache key name the options through CompileOptions.as_dict; an
    # option added to the dataclass but not there would silently share cache entries.
    from dataclasses import asdict

    from formcast.grammar.json_schema import CompileOptions

    options = CompileOptions(whitespace="compact", max_depth=3, property_order="any",
                             formats="annotate")
    assert options.as_dict() == asdict(options)
    grammar = compile_json_schema({"type": "string"}, whitespace="compact", max_depth=3,
                                  property_order="any", formats="annotate", cache=None)
    assert grammar.report.options == asdict(options)


def _reference_rule_base(pointer: str) -> str:
    from formcast.grammar.json_refs import split_pointer

    tokens = split_pointer(pointer)
    if tokens and tokens[0] in ("$defs", "definitions"):
        words = [tokens[0].lstrip("$")] + tokens[1:]
    else:
        words = ["root"] + tokens
    return "-".join(re.sub(r"[^A-Za-z0-9]+", "-", w).strip("-") or "x" for w in words)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["$defs", "definitions", "properties", "items", "0",
                                             "a_b", "~", "/", "é", "", "x y", "anyOf"]),
                          st.text(max_size=6)), max_size=6))
def test_rule_names_are_the_pointer_tokens_as_words(tokens):
    # _rule_base builds a name from its parent's (memoised per compile); it must equal the
    # name made from all the tokens at once, with an empty memo and with a filled one.
    from formcast.grammar.json_refs import join_pointer
    from formcast.grammar.json_schema import _rule_base

    pointer = join_pointer("", *tokens)
    memo: dict[str, str] = {}
    assert _rule_base(pointer, memo) == _reference_rule_base(pointer)
    assert _rule_base(pointer, memo) == _reference_rule_base(pointer)


# ----------------------------------------------------------------------------- conjunctions


def test_conj_fields_are_all_listed_and_clones_share_no_container() -> None:
    # Conj is a plain class (mypyc compiles its __init__); CONJ_FIELDS drives clone(),
    # negation and constrains_anything(), so a field missing from it would be dropped there.
    from formcast.grammar.json_conj import CONJ_FIELDS, Conj, field_items

    conj = Conj()
    attributes = {a for a in dir(conj) if not a.startswith("_") and not callable(getattr(conj, a))}
    assert attributes == set(CONJ_FIELDS)
    conj.required.append("id")
    conj.inlined.add("#/$defs/node")
    conj.max_len = 5
    copy = conj.clone()
    assert field_items(copy) == field_items(conj)
    for (name, mine), (_, theirs) in zip(field_items(conj), field_items(copy), strict=True):
        if isinstance(mine, list | set):
            assert mine is not theirs, name
    copy.required.append("name")
    assert conj.required == ["id"]
    assert copy.constrains_anything() and not Conj().constrains_anything()


def test_schema_text_for_the_hash_is_compact_json_and_refuses_what_json_cannot_hold() -> None:
    from formcast.errors import SchemaError
    from formcast.grammar.cache import canonical_json

    value = {"b": [1, 2.5, True, None, "é\"\n"], "a": {"c": 1e300, "d": -0.0}}
    assert canonical_json(value) == json.dumps(value, separators=(",", ":"),
                                               ensure_ascii=False)
    cyclic: dict = {"type": "object"}
    cyclic["properties"] = {"self": cyclic}
    for bad in ({"minimum": float("nan")}, {"default": object()}, cyclic):
        with pytest.raises(SchemaError, match="not a JSON value"):
            compile_(bad)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def _canonical_outcome(value, *, pure: bool):
    # The bytes, or the error, that hashing the value gives.
    from formcast.errors import SchemaError
    from formcast.grammar.cache import canonical_utf8

    old = os.environ.get("FORMCAST_PURE_PYTHON")
    os.environ["FORMCAST_PURE_PYTHON"] = "1" if pure else ""
    try:
        return canonical_utf8(value)
    except SchemaError as exc:
        return ("error", str(exc))
    finally:
        if old is None:
            del os.environ["FORMCAST_PURE_PYTHON"]
        else:
            os.environ["FORMCAST_PURE_PYTHON"] = old


@settings(max_examples=400, deadline=None)
@given(_JSON_VALUES)
def test_the_schema_hash_text_is_the_same_from_c_and_from_the_json_module(value) -> None:
    # The C encoder (_canonical.c) must write exactly the json module's text: the schema
    # hash keys the compile cache and appears in every report and record.
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert _canonical_outcome(value, pure=True) == expected
    assert _canonical_outcome(value, pure=False) == expected


def test_values_the_c_encoder_leaves_to_the_json_module_give_the_same_text_or_error() -> None:
    deep: list = []
    for _ in range(300):  # past the C encoder's depth, within Python's recursion limit
        deep = [deep]
    cyclic: dict = {}
    cyclic["self"] = cyclic
    for value in ({"a": (1, 2)}, {1: "x"}, {"t": float("inf")}, {"s": {1}}, "\ud800", 10**5000,
                  {"\udc00": 1}, {"k": True, "n": None, "big": 2**80}, deep, cyclic,
                  {"ctl": "\x00\x1f\x7f\u2028 \"\\"}):
        assert _canonical_outcome(value, pure=False) == _canonical_outcome(value, pure=True)
    assert _canonical_outcome("\ud800", pure=False)[0] == "error"
    assert _canonical_outcome(cyclic, pure=False)[0] == "error"


def test_a_format_under_a_length_bound_compiles_to_rules_not_an_exponential_tree() -> None:
    # format ∩ maxLength is an acyclic automaton with many paths into each state; spelled
    # as one nested expression it was exponential as a tree, and the NFA builder (a tree
    # walk) never finished. Shared large states now become rules.
    grammar = compile_({"type": "string", "format": "email", "maxLength": 40})
    cap = 2_000_000
    walked = 0
    for body in grammar.engine_rules.values():
        stack = [body]
        while stack and walked < cap:
            node = stack.pop()
            walked += 1
            if isinstance(node, Seq | Choice):
                stack.extend(node.items)
            elif isinstance(node, Repeat):
                stack.append(node.item)
    assert walked < cap
    assert takes(grammar, '"ana.lopez@example.com"')
    assert takes(grammar, '"' + "a" * 26 + '@example.com"')  # 38 characters
    assert not takes(grammar, '"' + "a" * 30 + '@example.com"')  # 42
    assert not takes(grammar, '"not an email"')
