"""Grammar clean-up after a compile: drop unreachable rules, inline single-use helpers.

Rules a reader should see (definitions, named properties, shared primitives such as ``ws``
and ``string``) are kept; helper rules used once and aliases are folded into their user. The
engine inlines non-recursive rules anyway, so this is about readable GBNF and honest rule
counts, not speed.

Inlining goes one rule at a time (the alphabetically first candidate), because each step can
change the reference counts that decide the next one. Expressions are immutable and shared, so
the reference counts under each node and the re-normalised form of each node are memoised by
node: a step only rebuilds the paths that lead to the inlined reference.
"""

from __future__ import annotations

from collections.abc import Mapping

from formcast.grammar.ir import Choice, Expr, Literal, Ref, Repeat, Seq, repeat, seq
from formcast.grammar.json_text import MemoUnion

PRIMITIVES = frozenset({"ws", "string", "number", "integer", "char", "unicode-escape", "value",
                        "object", "array"})
_NO_REFS: Mapping[str, int] = {}


def prune_rules(rules: dict[str, Expr], keep: set[str]) -> dict[str, Expr]:
    """Drop unreachable rules and inline helper rules used once (and not recursive)."""
    return _Pruner(keep).run(dict(rules))


class _Pruner:
    def __init__(self, keep: set[str]) -> None:
        self.keep = keep
        # id(node) -> (node, value): the node is held so that its id cannot be reused
        self._refs: dict[int, tuple[Expr, Mapping[str, int]]] = {}
        self._normal: dict[int, tuple[Expr, Expr]] = {}
        # union with memoised structural hashes: a rule's alternatives are rebuilt again and
        # again as helpers are inlined into it
        self._union = MemoUnion()

    def run(self, rules: dict[str, Expr]) -> dict[str, Expr]:
        # Invariant at the top of the loop: ``rules`` holds only rules reachable from root and
        # ``counts`` the references among them (a name's count, what one pass over every body
        # would give). Both are updated from the rules that change instead of recomputed.
        counts: dict[str, int] = {}
        for body in rules.values():
            _add(counts, self.refs(body), 1)
        self._drop_unreachable(rules, counts)
        recursive: dict[str, bool] = {}  # valid while no reference disappears
        while True:
            candidates = sorted(
                name for name, n in counts.items()
                if n > 0 and (n == 1 or isinstance(rules[name], Ref | Literal)
                              and name not in self.keep)
                and name not in self.keep and name not in PRIMITIVES and name != "root"
                and not name.startswith(("value-d", "object-d", "array-d")))
            name = None
            for candidate in candidates:
                loops = recursive.get(candidate)
                if loops is None:
                    loops = recursive[candidate] = candidate in self._reachable_from_body(
                        rules, candidate)
                if not loops:
                    name = candidate
                    break
            if name is None:
                return rules
            body = rules.pop(name)
            body_refs = self.refs(body)
            _add(counts, body_refs, -1)
            lost = False
            for k, v in rules.items():
                old = self.refs(v)
                if name in old:
                    rules[k] = self._substitute(v, name, body, {})
                    new = self.refs(rules[k])
                    _add(counts, old, -1)
                    _add(counts, new, 1)
                    # substituting keeps every reference unless the IR constructors drop one
                    # (a duplicate alternative, a sequence with an impossible part)
                    lost = lost or new.keys() != (old.keys() - {name}) | body_refs.keys()
            if lost:
                self._drop_unreachable(rules, counts)
                recursive.clear()

    def _drop_unreachable(self, rules: dict[str, Expr], counts: dict[str, int]) -> None:
        live = self._reachable(rules, "root")
        for name in [k for k in rules if k not in live]:
            _add(counts, self.refs(rules.pop(name)), -1)

    # -- reference counts per node (occurrences, as a tree walk counts them)

    def refs(self, expr: Expr) -> Mapping[str, int]:
        got = self._refs.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, Ref):
            out: Mapping[str, int] = {expr.name: 1}
        elif isinstance(expr, Seq | Choice):
            merged: dict[str, int] = {}
            for item in expr.items:
                for k, n in self.refs(item).items():
                    merged[k] = merged.get(k, 0) + n
            out = merged or _NO_REFS
        elif isinstance(expr, Repeat):
            out = self.refs(expr.item)
        else:
            out = _NO_REFS
        self._refs[id(expr)] = (expr, out)
        return out

    def _reachable(self, rules: dict[str, Expr], start: str) -> set[str]:
        seen = {start}
        stack = [start]
        while stack:
            for ref_name in self.refs(rules[stack.pop()]):
                if ref_name not in seen:
                    seen.add(ref_name)
                    stack.append(ref_name)
        return seen

    def _reachable_from_body(self, rules: dict[str, Expr], name: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self.refs(rules[name]))
        while stack:
            r = stack.pop()
            if r not in seen:
                seen.add(r)
                stack.extend(self.refs(rules[r]))
        return seen

    # -- rebuilding

    def _normalised(self, expr: Expr) -> Expr:
        """``expr`` rebuilt through the IR constructors (what substituting a name that does
        not occur in it gives); the node itself when that changes nothing."""
        got = self._normal.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, Seq | Choice):
            items = [self._normalised(x) for x in expr.items]
            out = seq(*items) if isinstance(expr, Seq) else self._union(items)
        elif isinstance(expr, Repeat):
            out = repeat(self._normalised(expr.item), expr.min, expr.max)
        else:
            out = expr
        if out is not expr and out == expr:
            out = expr
        self._normal[id(expr)] = (expr, out)
        return out

    def _substitute(self, expr: Expr, name: str, body: Expr,
                    memo: dict[int, tuple[Expr, Expr]]) -> Expr:
        if name not in self.refs(expr):
            return self._normalised(expr)
        got = memo.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, Ref):
            out = body
        elif isinstance(expr, Seq):
            out = seq(*(self._substitute(x, name, body, memo) for x in expr.items))
        elif isinstance(expr, Choice):
            out = self._union([self._substitute(x, name, body, memo) for x in expr.items])
        else:
            assert isinstance(expr, Repeat)
            out = repeat(self._substitute(expr.item, name, body, memo), expr.min, expr.max)
        memo[id(expr)] = (expr, out)
        return out


def _add(counts: dict[str, int], refs: Mapping[str, int], sign: int) -> None:
    for name, n in refs.items():
        counts[name] = counts.get(name, 0) + sign * n

