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
from typing import Final

from formcast.grammar.cache import Memo
from formcast.grammar.ir import ByteSet, CharSet, Expr, Literal, repeat, seq
from formcast.grammar.ir_kinds import CHOICE, LITERAL, REF, REPEAT, SEQ
from formcast.grammar.json_text import MemoUnion

PRIMITIVES: Final = frozenset({"ws", "string", "number", "integer", "char", "unicode-escape", "value",
                        "object", "array"})
_NO_REFS: Final[Mapping[str, int]] = {}
_LEAVES: Final = frozenset({Literal, CharSet, ByteSet})  # no references, rebuilt as themselves
SHARED_BODY_NODES: Final = 500
# id(body) -> (body, refs) for large rule bodies; holding the body keeps its id its own
_SHARED_BODY_REFS: Final = Memo(64)


def prune_rules(rules: Mapping[str, Expr], keep: set[str]) -> dict[str, Expr]:
    """Drop unreachable rules and inline helper rules used once (and not recursive)."""
    return _Pruner(keep).run(dict(rules))


class _Pruner:
    def __init__(self, keep: set[str]) -> None:
        self.keep = keep
        # id(node) -> (node, value): the node is held so that its id cannot be reused
        self._refs: dict[int, tuple[Expr, Mapping[str, int]]] = {}
        self._normal: dict[int, tuple[Expr, Expr]] = {}
        self._drops: dict[int, tuple[Expr, bool]] = {}
        # union with memoised structural hashes: a rule's alternatives are rebuilt again and
        # again as helpers are inlined into it
        self._union = MemoUnion()

    def run(self, rules: dict[str, Expr]) -> dict[str, Expr]:
        # Invariant at the top of the loop: ``rules`` holds only rules reachable from root and
        # ``counts`` the references among them (a name's count, what one pass over every body
        # would give). Both are updated from the rules that change instead of recomputed.
        counts: dict[str, int] = {}
        for body in rules.values():
            _add(counts, self._body_refs(body), 1)
        self._drop_unreachable(rules, counts)
        recursive: dict[str, bool] = {}  # valid while no reference disappears
        while True:
            candidates = sorted(
                name for name, n in counts.items()
                if n > 0 and (n == 1 or isinstance(rules[name], REF | LITERAL)
                              and name not in self.keep)
                and self._may_inline(name))
            picks = self._next_picks(candidates, rules, counts, recursive)
            if not picks:
                return rules
            if len(picks) > 1 and self._inline_together(rules, counts, picks):
                continue
            name = picks[0]
            body = rules.pop(name)
            body_refs = self.refs(body)
            _add(counts, body_refs, -1)
            lost = False
            for k, v in rules.items():
                old = self.refs(v)
                if name in old:
                    rules[k] = self._substitute(v, {name: body}, {})
                    new = self.refs(rules[k])
                    _add(counts, old, -1)
                    _add(counts, new, 1)
                    # substituting keeps every reference unless the IR constructors drop one
                    # (a duplicate alternative, a sequence with an impossible part)
                    lost = lost or new.keys() != (old.keys() - {name}) | body_refs.keys()
            if lost:
                self._drop_unreachable(rules, counts)
                recursive.clear()

    def _may_inline(self, name: str) -> bool:
        return (name not in self.keep and name not in PRIMITIVES and name != "root"
                and not name.startswith(("value-d", "object-d", "array-d")))

    def _next_picks(self, candidates: list[str], rules: dict[str, Expr], counts: dict[str, int],
                    recursive: dict[str, bool]) -> list[str]:
        """The names one-at-a-time inlining takes next: the first non-recursive candidate, and
        after it the following ones as long as each step is sure to change nothing else that
        the choice depends on (a name used once, in a rule that is never inlined itself: the
        counts stay, no rule turns into an alias that could jump the queue)."""
        users: dict[str, list[str]] | None = None
        picks: list[str] = []
        for candidate in candidates:
            loops = recursive.get(candidate)
            if loops is None:
                loops = recursive[candidate] = candidate in self._reachable_from_body(
                    rules, candidate)
            if loops:
                continue
            if counts[candidate] == 1:
                if users is None:
                    users = {}
                    for k, v in rules.items():
                        for ref_name in self.refs(v):
                            users.setdefault(ref_name, []).append(k)
                user = users[candidate][0]
                if not self._may_inline(user):
                    picks.append(candidate)
                    continue
            return picks or [candidate]
        return picks

    def _inline_together(self, rules: dict[str, Expr], counts: dict[str, int],
                         picks: list[str]) -> bool:
        """Inline ``picks`` (each used once) in one rebuild per using rule; False (and nothing
        changed) when that could differ from inlining them one after the other.

        Substituting and normalising are confluent, so the two agree unless a step drops a
        reference: then one-at-a-time inlining recounts, and a helper whose reference went
        away is dropped instead of inlined. Only an impossible part (absorbing its sequence)
        or an empty repetition drops a subtree with its references, so rules containing one
        are left to the one-at-a-time path; a duplicate alternative that goes away takes
        references the kept one repeats, which the reference counts of the result show. One
        after the other, each inlined body but the last one of a rule is rebuilt again by the
        later steps: here it is normalised instead."""
        groups: dict[str, dict[str, Expr]] = {}
        for name in picks:
            user = next(k for k, v in rules.items() if name in self.refs(v))
            if self._drops_subtrees(rules[name]) or self._drops_subtrees(rules[user]):
                return False
            groups.setdefault(user, {})[name] = rules[name]
        rebuilt: dict[str, Expr] = {}
        for user, mapping in groups.items():
            expected = dict(self.refs(rules[user]))
            for name, body in mapping.items():
                expected[name] -= 1
                _add(expected, self.refs(body), 1)
            last = list(mapping)[-1]
            mapping = {name: body if name == last else self._normalised(body)
                       for name, body in mapping.items()}
            new = self._substitute(rules[user], mapping, {})
            if {k: n for k, n in expected.items() if n} != self.refs(new):
                return False
            rebuilt[user] = new
        rules.update(rebuilt)
        for name in picks:
            del rules[name]
            counts[name] -= 1
        return True

    def _drop_unreachable(self, rules: dict[str, Expr], counts: dict[str, int]) -> None:
        live = self._reachable(rules, "root")
        for name in [k for k in rules if k not in live]:
            _add(counts, self.refs(rules.pop(name)), -1)

    # -- reference counts per node (occurrences, as a tree walk counts them)

    def _body_refs(self, body: Expr) -> Mapping[str, int]:
        """``refs`` of a rule body, remembered across prunes for large bodies that compiles
        share (format rules: the date-time body has 8,000 nodes)."""
        got = _SHARED_BODY_REFS.get(id(body))
        if got is not None and got[0] is body:
            self._refs[id(body)] = got
            return got[1]
        before = len(self._refs)
        out = self.refs(body)
        if len(self._refs) - before >= SHARED_BODY_NODES:
            _SHARED_BODY_REFS.put(id(body), (body, out))
        return out

    def refs(self, expr: Expr) -> Mapping[str, int]:
        if type(expr) in _LEAVES:
            return _NO_REFS
        got = self._refs.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, REF):
            out: Mapping[str, int] = {expr.name: 1}
        elif isinstance(expr, SEQ | CHOICE):
            merged: dict[str, int] = {}
            for item in expr.items:
                if type(item) not in _LEAVES:
                    for k, n in self.refs(item).items():
                        merged[k] = merged.get(k, 0) + n
            out = merged or _NO_REFS
        elif isinstance(expr, REPEAT):
            out = self.refs(expr.item)
        else:
            out = _NO_REFS
        self._refs[id(expr)] = (expr, out)
        return out

    def _drops_subtrees(self, expr: Expr) -> bool:
        """Whether ``expr`` holds an impossible part (``CHOICE(())``) or a repetition of at
        most zero, which the IR constructors drop together with their surroundings."""
        if type(expr) in _LEAVES:
            return False
        got = self._drops.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, SEQ | CHOICE):
            out = not expr.items if isinstance(expr, CHOICE) else False
            out = out or any(self._drops_subtrees(x) for x in expr.items)
        elif isinstance(expr, REPEAT):
            out = expr.max == 0 or self._drops_subtrees(expr.item)
        else:
            out = False
        self._drops[id(expr)] = (expr, out)
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
        if type(expr) in _LEAVES:
            return expr
        got = self._normal.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, SEQ | CHOICE):
            items = [self._normalised(x) for x in expr.items]
            out = seq(*items) if isinstance(expr, SEQ) else self._union(items)
        elif isinstance(expr, REPEAT):
            out = repeat(self._normalised(expr.item), expr.min, expr.max)
        else:
            out = expr
        if out is not expr and out == expr:
            out = expr
        self._normal[id(expr)] = (expr, out)
        return out

    def _substitute(self, expr: Expr, bodies: Mapping[str, Expr],
                    memo: dict[int, tuple[Expr, Expr]]) -> Expr:
        """``expr`` with each reference to a name of ``bodies`` replaced by its body, rebuilt
        through the IR constructors."""
        if self.refs(expr).keys().isdisjoint(bodies):
            return self._normalised(expr)
        got = memo.get(id(expr))
        if got is not None:
            return got[1]
        if isinstance(expr, REF):
            out = bodies[expr.name]
        elif isinstance(expr, SEQ):
            out = seq(*(self._substitute(x, bodies, memo) for x in expr.items))
        elif isinstance(expr, CHOICE):
            out = self._union([self._substitute(x, bodies, memo) for x in expr.items])
        else:
            assert isinstance(expr, REPEAT)
            out = repeat(self._substitute(expr.item, bodies, memo), expr.min, expr.max)
        memo[id(expr)] = (expr, out)
        return out


def _add(counts: dict[str, int], refs: Mapping[str, int], sign: int) -> None:
    for name, n in refs.items():
        counts[name] = counts.get(name, 0) + sign * n

