"""Parse-repair: each broken output from the table repairs to the intended value, and the
repair log names what was changed (so the repair rate is observable)."""

from __future__ import annotations

import json

import pytest

from formcast.errors import RepairError
from formcast.pipeline.repair import faithfulness_gaps, repair_json

# name, model output, intended value, repair kinds that must be logged
FAITHFUL_REPAIRS = [
    ("wrapper prose",
     'Sure, here is the JSON you asked for:\n{"name": "Bob", "age": 3}\nHope this helps!',
     {"name": "Bob", "age": 3}, {"strip_prefix", "strip_suffix"}),
    ("markdown fence",
     'Here it is:\n```json\n{"name": "Bob", "tags": ["a"]}\n```\nAnything else?',
     {"name": "Bob", "tags": ["a"]}, {"strip_fence"}),
    ("fence without language",
     '```\n[1, 2, 3]\n```', [1, 2, 3], {"strip_fence"}),
    ("trailing commas",
     '{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}, {"trailing_comma"}),
    ("single quotes",
     "{'name': 'Bob', 'city': 'Paris'}", {"name": "Bob", "city": "Paris"}, {"single_quotes"}),
    ("single-quoted string holding a double quote",
     """{'quote': 'she said "yes"'}""", {"quote": 'she said "yes"'}, {"single_quotes"}),
    ("python literals",
     '{"ok": True, "done": False, "note": None}', {"ok": True, "done": False, "note": None},
     {"python_literal"}),
    ("full-width quotes, colon and comma",
     "{\u201cname\u201d\uff1a\u201c\u5f20\u4e09\u201d\uff0c\u201ccity\u201d\uff1a\u201c\u5317\u4eac\u201d}",
     {"name": "\u5f20\u4e09", "city": "\u5317\u4eac"},
     {"fullwidth_quotes", "fullwidth_punctuation"}),
    ("full-width single quotes",
     "{\u2018id\u2019: \u2018x-1\u2019}", {"id": "x-1"}, {"fullwidth_quotes"}),
    ("raw newline and tab inside a string",
     '{"text": "line one\nline\ttwo"}', {"text": "line one\nline\ttwo"}, {"escape_control_char"}),
    ("stray quotes inside a string",
     '{"a": "he said "hi" to me", "b": 1}', {"a": 'he said "hi" to me', "b": 1},
     {"escape_inner_quote"}),
    ("line and block comments",
     '{\n  // the name\n  "a": 1, /* the count */ "b": 2\n}', {"a": 1, "b": 2}, {"remove_comment"}),
    ("missing comma between members",
     '{"a": "x" "b": 2}', {"a": "x", "b": 2}, {"missing_comma"}),
    ("missing comma between string items",
     '["x" "y", "z"]', ["x", "y", "z"], {"missing_comma"}),
    ("bare keys",
     '{name: "Bob", age: 3}', {"name": "Bob", "age": 3}, {"quote_key"}),
    ("invalid escape",
     r'{"path": "C:\Users\me"}', {"path": "C:\\Users\\me"}, {"escape_backslash"}),
    ("several faults at once",
     "Answer:\n```json\n{'items': [{'sku': 'A1', 'qty': 2,},], 'paid': True}\n```",
     {"items": [{"sku": "A1", "qty": 2}], "paid": True},
     {"strip_fence", "single_quotes", "trailing_comma", "python_literal"}),
    ("model forgot the closing braces (values complete)",
     '{"a": [1, 2, {"b": "x"}', {"a": [1, 2, {"b": "x"}]}, {"close_brackets"}),
]

# Chinese content must pass through untouched: full-width punctuation inside strings is text.
CHINESE_UNTOUCHED = [
    '{"\u59d3\u540d": "\u674e\u96f7", "\u63cf\u8ff0": "\u4ed6\u8bf4\uff1a\u4f60\u597d\uff0c\u4e16\u754c"}',
    '{"title": "\u4ed6\u8bf4\u201c\u4f60\u597d\u201d\uff0c\u7136\u540e\u8d70\u4e86"}',
]


@pytest.mark.parametrize(("name", "broken", "expected", "kinds"), FAITHFUL_REPAIRS,
                         ids=[row[0] for row in FAITHFUL_REPAIRS])
def test_faithful_repairs(name: str, broken: str, expected: object, kinds: set[str]) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken)  # the table only holds outputs a strict parser refuses
    result = repair_json(broken)
    assert result.value == expected
    assert kinds <= set(result.kinds), result.repairs
    assert not result.lossy, result.repairs


@pytest.mark.parametrize("text", CHINESE_UNTOUCHED)
def test_chinese_text_needs_no_repair(text: str) -> None:
    result = repair_json(text)
    assert result.value == json.loads(text)
    assert result.repairs == ()


def test_chinese_content_with_fullwidth_structure() -> None:
    # Full-width punctuation as structure is repaired, the same characters inside strings stay.
    text = "{\u201c\u5907\u6ce8\u201d\uff1a\u201c\u5df2\u4ed8\u6b3e\uff0c\u8c22\u8c22\uff1a\u518d\u89c1\u201d\uff0c\u201c\u91d1\u989d\u201d\uff1a12}"
    result = repair_json(text)
    assert result.value == {"\u5907\u6ce8": "\u5df2\u4ed8\u6b3e\uff0c\u8c22\u8c22\uff1a\u518d\u89c1",
                            "\u91d1\u989d": 12}
    assert {"fullwidth_quotes", "fullwidth_punctuation"} <= set(result.kinds)


def test_valid_json_has_no_repairs() -> None:
    result = repair_json('{"a": [1, 2.5, "x"], "b": null}')
    assert result.value == {"a": [1, 2.5, "x"], "b": None}
    assert result.repairs == () and not result.repaired


def test_repeated_repairs_are_counted_not_repeated() -> None:
    result = repair_json("{'a': 'x', 'b': 'y', 'c': 'z'}")
    (quotes,) = [r for r in result.repairs if r.kind == "single_quotes"]
    assert quotes.count == 6  # three keys and three values
    assert len(result.repairs) == 1


def test_repairs_record_where_they_happened() -> None:
    result = repair_json('{"a": {"b": [1, 2,]}}')
    (comma,) = result.repairs
    assert comma.kind == "trailing_comma" and comma.pointer == "/a/b"


# ----------------------------------------------------------------------------- truncation


def test_truncated_string_is_closed_and_marked_lossy() -> None:
    result = repair_json('{"name": "Bob", "bio": "likes ca')
    assert result.value == {"name": "Bob", "bio": "likes ca"}
    assert result.ended_early
    (lossy,) = result.lossy_repairs
    assert lossy.kind == "close_string" and lossy.pointer == "/bio"
    assert "close_brackets" in result.kinds


def test_truncated_key_is_dropped_not_invented() -> None:
    result = repair_json('{"name": "Bob", "bi')
    assert result.value == {"name": "Bob"}
    assert [r.kind for r in result.lossy_repairs] == ["drop_incomplete"]


def test_truncated_literal_is_dropped_not_guessed() -> None:
    result = repair_json('{"a": 1, "ok": tr')
    assert result.value == {"a": 1}  # never guess that "tr" meant true
    (drop,) = result.lossy_repairs
    assert drop.kind == "drop_incomplete" and drop.pointer == "/ok"


def test_number_at_the_very_end_is_suspect() -> None:
    result = repair_json('{"name": "Bob", "total": 13')
    assert result.value == {"name": "Bob", "total": 13}
    (suspect,) = result.lossy_repairs
    assert suspect.kind == "number_at_end" and suspect.pointer == "/total"


def test_truncated_array_records_every_container_left_open() -> None:
    result = repair_json('{"order": {"items": [{"sku": "A", "qty": 1}, {"sku": "B"')
    assert result.value == {"order": {"items": [{"sku": "A", "qty": 1}, {"sku": "B"}]}}
    assert result.closed_at_end == ("/order/items/1", "/order/items", "/order", "")
    (close,) = [r for r in result.repairs if r.kind == "close_brackets"]
    assert "]}}" in close.detail


def test_truncated_chinese_string() -> None:
    result = repair_json('{"\u540d\u79f0": "\u5317\u4eac\u5e02\u6d77\u6dc0')
    assert result.value == {"\u540d\u79f0": "\u5317\u4eac\u5e02\u6d77\u6dc0"}
    assert [r.kind for r in result.lossy_repairs] == ["close_string"]


def test_second_document_after_the_first_is_flagged() -> None:
    result = repair_json('{"a": 1} {"a": 2}')
    assert result.value == {"a": 1}
    (suffix,) = result.repairs
    assert suffix.kind == "strip_suffix" and suffix.lossy


# ----------------------------------------------------------------------------- fallback and failure


def test_json_repair_fallback_is_recorded() -> None:
    pytest.importorskip("json_repair")
    result = repair_json('{"status": pending review}')  # an unquoted string value
    assert result.value == {"status": "pending review"}
    assert "json_repair" in result.kinds
    assert not result.lossy  # every value comes from the output


def test_json_repair_invention_is_never_silent() -> None:
    pytest.importorskip("json_repair")
    result = repair_json('{"a": , "b": 1}')  # json_repair fills the gap with ""
    assert result.lossy
    invented = [r for r in result.repairs if r.kind == "json_repair_invented"]
    assert invented and invented[0].pointer == "/a"


def test_faithfulness_gaps_finds_invented_and_dropped() -> None:
    invented, dropped = faithfulness_gaps('{"a": "he said ', {"a": "he said ", "b": 0})
    assert ("/b", "b") in invented and ("/b", 0) in invented
    invented, dropped = faithfulness_gaps('{"a": "x", "note": "keep me"}', {"a": "x"})
    assert {"note", "keep", "me"} <= set(dropped)


def test_prose_without_json_is_an_error_with_position() -> None:
    with pytest.raises(RepairError) as info:
        repair_json("I could not find an invoice in the text.")
    assert info.value.line == 1 and info.value.column is not None
    assert "no JSON" in str(info.value)


def test_unrepairable_structure_reports_line_and_column() -> None:
    with pytest.raises(RepairError) as info:
        repair_json('{\n  "a": 1,\n  "b": @@@\n}', use_json_repair=False)
    assert (info.value.line, info.value.column) == (3, 8)


def test_deep_nesting_is_refused_not_a_crash() -> None:
    with pytest.raises(RepairError):
        repair_json("[" * 5000, use_json_repair=False)


def test_nan_is_not_json() -> None:
    with pytest.raises(RepairError):
        repair_json('{"a": NaN}', use_json_repair=False)
