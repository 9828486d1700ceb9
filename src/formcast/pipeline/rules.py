"""Semantic rules: the business checks JSON Schema cannot express.

Each rule is built by one short call and reads like the requirement it checks::

    from formcast.pipeline import rules
    invoice_rules = [
        rules.equals_sum("/total", "/items/*/amount", tolerance=0.005),
        rules.requires_when("/status", "rejected", "/reason"),
        rules.compare("/issued", "<=", "/due"),
        rules.reference("/customer_id", customers.__contains__),
        rules.custom(lambda inv: inv["currency"] != "XXX", "/currency", message="no test currency"),
    ]

Pointers are JSON pointers; ``*`` matches every array item or object member. When two
pointers in one rule both use ``*``, they are paired item by item (``/items/*/start`` with
``/items/*/end``). A rule whose operands are absent is skipped: presence is the schema's
``required``. Every violation is ``kind="semantic"``, so metrics keep it apart from format
errors. A rule whose own callback raises is reported as ``RuleError`` (not the model's fault).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from formcast.errors import RuleError
from formcast.pipeline.result import (
    Violation,
    display_pointer,
    json_pointer,
    pointer_parts,
)
from formcast.pipeline.result import show_value as _show

_MISSING: Any = object()
WILDCARD = "*"


# ----------------------------------------------------------------------------- pointer matching


@dataclass(frozen=True)
class Match:
    """A concrete location that a (possibly wildcard) pointer reached, and its value."""

    pointer: str
    value: Any
    bindings: tuple[str | int, ...] = ()


def resolve(document: Any, pattern: str) -> list[Match]:
    """Every location ``pattern`` reaches in ``document``; ``*`` fans out over items/members."""
    matches = [Match("", document)]
    for part in pointer_parts(pattern):
        step: list[Match] = []
        for m in matches:
            parent, path = m.value, pointer_parts(m.pointer)
            if part == WILDCARD:
                if isinstance(parent, list):
                    children: Iterable[tuple[str | int, Any]] = enumerate(parent)
                elif isinstance(parent, dict):
                    children = parent.items()
                else:
                    children = ()
                step.extend(Match(json_pointer([*path, k]), v, (*m.bindings, k))
                            for k, v in children)
            elif isinstance(parent, dict) and part in parent:
                step.append(Match(json_pointer([*path, part]), parent[part], m.bindings))
            elif isinstance(parent, list) and part.isdigit() and int(part) < len(parent):
                step.append(Match(json_pointer([*path, int(part)]), parent[int(part)], m.bindings))
        matches = step
    return matches


def _paired(document: Any, pattern: str, bindings: tuple[str | int, ...]) -> list[Match]:
    """Matches of ``pattern`` whose leading wildcards agree with ``bindings``."""
    width = min(len(bindings), pattern.count(WILDCARD))
    return [m for m in resolve(document, pattern) if m.bindings[:width] == bindings[:width]]


# ----------------------------------------------------------------------------- rule base


class Rule:
    """A semantic check. Subclasses implement ``check(document) -> list[Violation]``."""

    name: str = "rule"
    pointer: str = ""

    def check(self, document: Any) -> list[Violation]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _violation(self, pointer: str, message: str) -> Violation:
        return Violation(pointer, message, "semantic", self.name)

    def __call__(self, document: Any) -> list[Violation]:
        return self.check(document)


def check_rules(document: Any, rules: Sequence[Rule | Callable[[Any], Any]]) -> list[Violation]:
    """Run every rule on ``document``; plain callables are treated as ``custom(fn)``."""
    found: list[Violation] = []
    for rule in rules:
        rule_obj = rule if isinstance(rule, Rule) else custom(rule)
        found.extend(rule_obj.check(document))
    return found


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fmt_number(value: float) -> str:
    """Numbers as people write them: no float noise such as 132.75000000000003."""
    if isinstance(value, float):
        value = round(value, 10)
        return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    return str(value)


# ----------------------------------------------------------------------------- equals_sum


class _EqualsSum(Rule):
    name = "equals_sum"

    def __init__(self, total: str, items: str, tolerance: float, message: str | None) -> None:
        self.pointer, self.items, self.tolerance, self.message = total, items, tolerance, message

    def check(self, document: Any) -> list[Violation]:
        out: list[Violation] = []
        for total in resolve(document, self.pointer):
            parts = _paired(document, self.items, total.bindings)
            bad = [p for p in parts if not _is_number(p.value)]
            if not _is_number(total.value) or bad:
                where = total.pointer if not _is_number(total.value) else bad[0].pointer
                out.append(self._violation(total.pointer, f"cannot check the sum: "
                                           f"{display_pointer(where)} is not a number"))
                continue
            expected = math.fsum(p.value for p in parts)
            if not math.isclose(total.value, expected, rel_tol=1e-9, abs_tol=self.tolerance):
                out.append(self._violation(total.pointer, self.message or (
                    f"{_fmt_number(total.value)} is not equal to the sum of {self.items} "
                    f"({_fmt_number(expected)})")))
        return out

    def __repr__(self) -> str:
        return f"equals_sum({self.pointer!r}, {self.items!r}, tolerance={self.tolerance})"


def equals_sum(total: str, items: str, *, tolerance: float = 1e-6,
               message: str | None = None) -> Rule:
    """``total`` must equal the sum of the numbers at ``items`` (within ``tolerance``)."""
    return _EqualsSum(total, items, tolerance, message)


# ----------------------------------------------------------------------------- requires_when


def _is_blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class _RequiresWhen(Rule):
    name = "requires_when"

    def __init__(self, when: str, equals: Any, required: Sequence[str]) -> None:
        self.pointer, self.equals, self.required = when, equals, tuple(required)

    def _triggered(self, value: Any) -> bool:
        if callable(self.equals):
            return bool(self.equals(value))
        return value == self.equals and type(value) is type(self.equals)

    def check(self, document: Any) -> list[Violation]:
        out: list[Violation] = []
        condition = ("meets the condition" if callable(self.equals)
                     else f"is {_show(self.equals)}")
        for trigger in resolve(document, self.pointer):
            if not self._triggered(trigger.value):
                continue
            for pattern in self.required:
                found = _paired(document, pattern, trigger.bindings)
                if not found or all(_is_blank(m.value) for m in found):
                    where = _fill_wildcards(pattern, trigger.bindings)
                    out.append(self._violation(where, f"is required when "
                                               f"{display_pointer(trigger.pointer)} {condition}"))
        return out

    def __repr__(self) -> str:
        return f"requires_when({self.pointer!r}, {self.equals!r}, {list(self.required)!r})"


def _fill_wildcards(pattern: str, bindings: tuple[str | int, ...]) -> str:
    parts = pointer_parts(pattern)
    filled: list[str | int] = []
    queue = list(bindings)
    for part in parts:
        filled.append(queue.pop(0) if part == WILDCARD and queue else part)
    return json_pointer(filled)


def requires_when(when: str, equals: Any, required: str | Sequence[str]) -> Rule:
    """When the value at ``when`` equals ``equals`` (or ``equals(value)`` is true), every
    pointer in ``required`` must be present and not null or blank."""
    return _RequiresWhen(when, equals, [required] if isinstance(required, str) else required)


# ----------------------------------------------------------------------------- compare

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">=": operator.ge, ">": operator.gt,
}


def _comparable(value: Any) -> tuple[str, Any]:
    """(kind, value): numbers as numbers, ISO dates and date-times parsed, other strings as is."""
    if value is None or isinstance(value, bool):
        return ("literal", value)
    if _is_number(value):
        return ("number", value)
    if isinstance(value, str):
        for kind, parse in (("date", date.fromisoformat), ("datetime", datetime.fromisoformat)):
            try:
                return (kind, parse(value))
            except ValueError:
                continue
        return ("string", value)
    return ("other", value)


def _compare_values(op: str, left: Any, right: Any) -> bool | None:
    """The comparison's outcome, or None when the two values cannot be compared."""
    (ka, a), (kb, b) = _comparable(left), _comparable(right)
    if {ka, kb} == {"date", "datetime"}:  # a date against a date-time: compare the days
        ka = kb = "date"
        a, b = _as_date(a), _as_date(b)
    if op not in ("==", "!=") and ("literal" in (ka, kb) or "other" in (ka, kb)):
        return None
    if ka != kb:
        return False if op == "==" else True if op == "!=" else None
    try:
        return bool(_OPS[op](a, b))
    except TypeError:  # e.g. a date-time with a zone against one without
        return None


class _Compare(Rule):
    name = "compare"

    def __init__(self, left: str, op: str, right: str | None, constant: Any) -> None:
        if op not in _OPS:
            raise ValueError(f"unknown comparison {op!r}; use one of {', '.join(_OPS)}")
        if (right is None) == (constant is _MISSING):
            raise ValueError("compare needs exactly one of a right-hand pointer or value=")
        self.pointer, self.op, self.right, self.constant = left, op, right, constant

    def check(self, document: Any) -> list[Violation]:
        out: list[Violation] = []
        for left in resolve(document, self.pointer):
            if self.right is None:
                pairs = [(self.constant, _show(self.constant))]
            else:
                pairs = [(m.value, f"{display_pointer(m.pointer)} ({_show(m.value)})")
                         for m in _paired(document, self.right, left.bindings)]
            for right_value, right_text in pairs:
                if self.op not in ("==", "!=") and (left.value is None or right_value is None):
                    continue  # null means "not given": the schema decides whether that is allowed
                outcome = _compare_values(self.op, left.value, right_value)
                if outcome is None:
                    out.append(self._violation(left.pointer, f"{_show(left.value)} cannot be "
                                               f"compared with {right_text}"))
                elif not outcome:
                    out.append(self._violation(left.pointer, f"{_show(left.value)} must be "
                                               f"{self.op} {right_text}"))
        return out

    def __repr__(self) -> str:
        rhs = repr(self.right) if self.right is not None else f"value={self.constant!r}"
        return f"compare({self.pointer!r}, {self.op!r}, {rhs})"


def _as_date(value: date) -> date:
    return value.date() if isinstance(value, datetime) else value


def compare(left: str, op: str, right: str | None = None, *, value: Any = _MISSING) -> Rule:
    """``left op right`` for two pointers, or ``left op value`` for a constant.

    ``op`` is one of ``< <= == != >= >``. Numbers compare as numbers, ISO dates and date-times
    as dates, other strings as strings; values of different kinds are reported as violations.
    """
    return _Compare(left, op, right, value)


# ----------------------------------------------------------------------------- custom / reference


class _Custom(Rule):
    def __init__(self, fn: Callable[[Any], Any], pointer: str, name: str | None,
                 message: str | None) -> None:
        self.fn, self.pointer, self.message = fn, pointer, message
        self.name = name or getattr(fn, "__name__", "custom")
        if self.name == "<lambda>":
            self.name = "custom"

    def check(self, document: Any) -> list[Violation]:
        try:
            verdict = self.fn(document)
        except Exception as exc:  # noqa: BLE001 - any callback failure is reported the same way
            raise RuleError(f"the callback raised {exc!r}", rule=self.name,
                            pointer=self.pointer) from exc
        if verdict is True or verdict is None:
            return []
        if verdict is False:
            return [self._violation(self.pointer, self.message or f"fails the rule {self.name}")]
        if isinstance(verdict, str):
            return [self._violation(self.pointer, verdict)]
        out: list[Violation] = []
        for item in verdict:
            if isinstance(item, Violation):
                out.append(Violation(item.pointer, item.message, "semantic",
                                     item.keyword or self.name))
            elif isinstance(item, tuple) and len(item) == 2:
                out.append(self._violation(str(item[0]), str(item[1])))
            else:
                out.append(self._violation(self.pointer, str(item)))
        return out

    def __repr__(self) -> str:
        return f"custom({self.name}, {self.pointer!r})"


def custom(fn: Callable[[Any], Any], pointer: str = "", *, name: str | None = None,
           message: str | None = None) -> Rule:
    """Any check written as a function of the whole document.

    ``fn`` returns ``True``/``None`` (passes), ``False`` (fails; reported at ``pointer`` with
    ``message``), a string (the reason), or an iterable of reasons, ``(pointer, reason)`` pairs
    or ``Violation`` objects.
    """
    return _Custom(fn, pointer, name, message)


class _Reference(Rule):
    name = "reference"

    def __init__(self, pointer: str, lookup: Callable[[Any], Any], message: str | None) -> None:
        self.pointer, self.lookup, self.message = pointer, lookup, message

    def check(self, document: Any) -> list[Violation]:
        out: list[Violation] = []
        for m in resolve(document, self.pointer):
            try:
                verdict = self.lookup(m.value)
            except Exception as exc:  # noqa: BLE001 - a failing lookup is not the model's fault
                raise RuleError(f"the lookup raised {exc!r}", rule=self.name,
                                pointer=m.pointer) from exc
            if isinstance(verdict, str):
                out.append(self._violation(m.pointer, verdict))
            elif not verdict:
                out.append(self._violation(m.pointer, self.message or
                                           f"{_show(m.value)} does not refer to a known record"))
        return out

    def __repr__(self) -> str:
        return f"reference({self.pointer!r})"


def reference(pointer: str, lookup: Callable[[Any], Any], *, message: str | None = None) -> Rule:
    """The value(s) at ``pointer`` must be known to ``lookup`` (your database, a set's
    ``__contains__``...). ``lookup`` returns truthy for known, falsy or a reason otherwise."""
    return _Reference(pointer, lookup, message)
