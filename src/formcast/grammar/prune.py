"""Grammar clean-up after a compile: drop unreachable rules, inline single-use helpers.

Rules a reader should see (definitions, named properties, shared primitives such as ``ws``
and ``string``) are kept; helper rules used once and aliases are folded into their user. The
engine inlines non-recursive rules anyway, so this is about readable GBNF and honest rule
counts, not speed.
"""

from __future__ import annotations

from collections import Counter

from formcast.grammar.ir import Choice, Expr, Literal, Ref, Repeat, Seq, iter_refs, repeat, seq
from formcast.grammar.json_text import union


def prune_rules(rules: dict[str, Expr], keep: set[str]) -> dict[str, Expr]:
    """Drop unreachable rules and inline helper rules used once (and not recursive)."""
    prims = {"ws", "string", "number", "integer", "char", "unicode-escape", "value", "object",
             "array"}
    rules = dict(rules)
    while True:
        live = _reachable(rules, "root")
        rules = {k: v for k, v in rules.items() if k in live}
        counts: Counter[str] = Counter()
        for body in rules.values():
            counts.update(iter_refs(body))
        inline = {name for name, n in counts.items()
                  if (n == 1 or isinstance(rules[name], Ref | Literal) and name not in keep)
                  and name not in keep and name not in prims and name != "root"
                  and not name.startswith(("value-d", "object-d", "array-d"))
                  and name not in _reachable_from_body(rules, name)}
        if not inline:
            return rules
        name = sorted(inline)[0]
        body = rules.pop(name)
        rules = {k: (_substitute(v, name, body) if name in set(iter_refs(v)) else v)
                 for k, v in rules.items()}


def _reachable(rules: dict[str, Expr], start: str) -> set[str]:
    seen = {start}
    stack = [start]
    while stack:
        for ref_name in iter_refs(rules[stack.pop()]):
            if ref_name not in seen:
                seen.add(ref_name)
                stack.append(ref_name)
    return seen


def _reachable_from_body(rules: dict[str, Expr], name: str) -> set[str]:
    seen: set[str] = set()
    stack = list(iter_refs(rules[name]))
    while stack:
        r = stack.pop()
        if r not in seen:
            seen.add(r)
            stack.extend(iter_refs(rules[r]))
    return seen


def _substitute(expr: Expr, name: str, body: Expr) -> Expr:
    if isinstance(expr, Ref):
        return body if expr.name == name else expr
    if isinstance(expr, Seq):
        return seq(*(_substitute(x, name, body) for x in expr.items))
    if isinstance(expr, Choice):
        return union(_substitute(x, name, body) for x in expr.items)
    if isinstance(expr, Repeat):
        return repeat(_substitute(expr.item, name, body), expr.min, expr.max)
    return expr
