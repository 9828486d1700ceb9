"""Semantic rules: cross-field checks JSON Schema cannot express, reported with pointers."""

from __future__ import annotations

import pytest

from formcast.errors import RuleError
from formcast.pipeline import rules
from formcast.pipeline.result import Violation
from formcast.pipeline.rules import check_rules, resolve

INVOICE = {
    "status": "rejected",
    "issued": "2024-03-14",
    "due": "2024-04-13",
    "customer_id": "C-17",
    "items": [{"amount": 100.5, "start": 1, "end": 3}, {"amount": 32.25, "start": 5, "end": 4}],
    "total": 132.7,
}


def test_equals_sum_reports_the_total_and_the_sum() -> None:
    (v,) = rules.equals_sum("/total", "/items/*/amount").check(INVOICE)
    assert str(v) == "/total: 132.7 is not equal to the sum of /items/*/amount (132.75)"
    assert v.kind == "semantic" and v.keyword == "equals_sum"


def test_equals_sum_tolerates_float_noise_and_a_chosen_tolerance() -> None:
    doc = {"items": [{"amount": 0.1}, {"amount": 0.2}], "total": 0.3}
    assert rules.equals_sum("/total", "/items/*/amount").check(doc) == []
    assert rules.equals_sum("/total", "/items/*/amount").check({**doc, "total": 0.31}) != []
    assert rules.equals_sum("/total", "/items/*/amount", tolerance=0.01).check(
        {**doc, "total": 0.305}) == []


def test_equals_sum_per_group_pairs_wildcards() -> None:
    doc = {"orders": [{"total": 3, "lines": [{"n": 1}, {"n": 2}]},
                      {"total": 9, "lines": [{"n": 4}]}]}
    (v,) = rules.equals_sum("/orders/*/total", "/orders/*/lines/*/n").check(doc)
    assert v.pointer == "/orders/1/total" and "(4)" in v.message


def test_equals_sum_names_a_non_number() -> None:
    doc = {"items": [{"amount": 1}, {"amount": "2"}], "total": 3}
    (v,) = rules.equals_sum("/total", "/items/*/amount").check(doc)
    assert "/items/1/amount is not a number" in v.message


def test_equals_sum_skips_when_the_total_is_absent() -> None:
    assert rules.equals_sum("/total", "/items/*/amount").check({"items": []}) == []


def test_requires_when() -> None:
    rule = rules.requires_when("/status", "rejected", "/reason")
    (v,) = rule.check(INVOICE)
    assert str(v) == '/reason: is required when /status is "rejected"'
    assert rule.check({**INVOICE, "reason": "duplicate"}) == []
    assert rule.check({**INVOICE, "reason": "  "}) != []  # blank is not a reason
    assert rule.check({**INVOICE, "status": "accepted"}) == []


def test_requires_when_with_predicate_and_wildcards() -> None:
    doc = {"items": [{"kind": "discount"}, {"kind": "goods"}, {"kind": "discount", "code": "X"}]}
    rule = rules.requires_when("/items/*/kind", lambda k: k == "discount", "/items/*/code")
    (v,) = rule.check(doc)
    assert v.pointer == "/items/0/code"


def test_compare_pointers_dates_and_constants() -> None:
    assert rules.compare("/issued", "<=", "/due").check(INVOICE) == []
    (v,) = rules.compare("/due", "<", "/issued").check(INVOICE)
    assert str(v) == '/due: "2024-04-13" must be < /issued ("2024-03-14")'
    (v,) = rules.compare("/items/*/start", "<=", "/items/*/end").check(INVOICE)
    assert v.pointer == "/items/1/start"
    (v,) = rules.compare("/total", ">=", value=1000).check(INVOICE)
    assert str(v) == "/total: 132.7 must be >= 1000"


def test_compare_refuses_mixed_kinds() -> None:
    (v,) = rules.compare("/a", "<", "/b").check({"a": 1, "b": "x"})
    assert "cannot be compared" in v.message


def test_compare_dates_with_times() -> None:
    doc = {"start": "2024-03-14T10:00:00+00:00", "end": "2024-03-14T09:00:00+00:00"}
    assert rules.compare("/start", "<=", "/end").check(doc) != []


def test_compare_needs_one_right_hand_side() -> None:
    with pytest.raises(ValueError):
        rules.compare("/a", "<")
    with pytest.raises(ValueError):
        rules.compare("/a", "~", "/b")


def test_reference_uses_the_callers_lookup() -> None:
    known = {"C-1", "C-2"}
    (v,) = rules.reference("/customer_id", known.__contains__).check(INVOICE)
    assert str(v) == '/customer_id: "C-17" does not refer to a known record'
    assert rules.reference("/customer_id", {"C-17"}.__contains__).check(INVOICE) == []


def test_reference_lookup_failure_is_a_rule_error_not_a_violation() -> None:
    def broken(_: object) -> bool:
        raise ConnectionError("db down")

    with pytest.raises(RuleError) as info:
        rules.reference("/customer_id", broken).check(INVOICE)
    assert info.value.rule == "reference" and info.value.pointer == "/customer_id"


def test_custom_rule_results() -> None:
    assert rules.custom(lambda d: True).check(INVOICE) == []
    (v,) = rules.custom(lambda d: False, "/total", message="too small").check(INVOICE)
    assert str(v) == "/total: too small"
    (v,) = rules.custom(lambda d: "bad currency", "/currency").check(INVOICE)
    assert v.kind == "semantic"
    found = rules.custom(lambda d: [("/a", "x"), Violation("/b", "y")]).check(INVOICE)
    assert [(v.pointer, v.kind) for v in found] == [("/a", "semantic"), ("/b", "semantic")]


def test_check_rules_accepts_plain_callables() -> None:
    found = check_rules(INVOICE, [rules.equals_sum("/total", "/items/*/amount"),
                                  lambda d: "always wrong"])
    assert [v.keyword for v in found] == ["equals_sum", "custom"]


def test_resolve_wildcards() -> None:
    got = [(m.pointer, m.value) for m in resolve(INVOICE, "/items/*/amount")]
    assert got == [("/items/0/amount", 100.5), ("/items/1/amount", 32.25)]
    assert resolve(INVOICE, "/missing/*") == []
    assert [m.pointer for m in resolve({"a": {"x": 1, "y": 2}}, "/a/*")] == ["/a/x", "/a/y"]
