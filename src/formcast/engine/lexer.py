"""Lazily determinised byte DFAs over a grammar's NFA, joined by rule calls.

``compile_automaton`` builds the NFA (``engine.nfa``) and numbers DFA states over all call
rules; a state's transitions are made the first time something steps into it, so a schema
with a ``maxLength: 400`` string costs nothing for positions a generation never reaches. Left
recursion (a rule that can call itself before consuming a byte) is refused with the cycle named.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from formcast.engine.arrays import grown_rows
from formcast.engine.nfa import NFA, build_nfa
from formcast.errors import LeftRecursionError
from formcast.grammar.ir import Grammar


class Automaton:
    """The compiled grammar: DFA states of all call rules in one numbering, built lazily.

    Only the start state of each rule exists after compiling; every other state is made the
    first time something needs its transitions (``ensure``), so a schema with a
    ``maxLength: 400`` string costs nothing for the 399 positions a generation never reaches.

    ``trans[q, b]`` is the state after byte ``b`` (-1: refused; valid once ``ensure(q)``);
    ``calls[q]`` maps a call rule index to the state reached after that rule completes;
    ``accepting_list[q]`` means the rule that owns ``q`` may end here.
    """

    def __init__(self, nfa: NFA, fragments: dict[str, tuple[int, int]], order: list[str],
                 live: list[bool], start_rule: str) -> None:
        self._nfa = nfa
        self._fragments = fragments
        self._ends = [fragments[name][1] for name in order]
        self._live = live
        self._rule_index = {name: i for i, name in enumerate(order)}
        self._eps_memo: dict[int, frozenset[int]] = {}
        self._important_memo: dict[int, frozenset[int]] = {}
        self._shape_memo: dict[int, tuple[tuple, int] | None] = {}
        self._ids: dict[tuple[int, frozenset[int]], int] = {}
        self._sets: list[tuple[int, frozenset[int]]] = []
        self.rule_names = order
        self.trans = np.full((256, 256), -1, dtype=np.int32)
        self.trans_rows: list[list[int] | None] = []
        self.row_targets: list[list[int] | None] = []  # distinct successors of each built row
        self.row_segments: list[list[tuple[int, int, int]] | None] = []  # (lo, hi excl., target)
        self.calls: list[tuple[tuple[int, int], ...] | None] = []
        self.accepting_list: list[bool] = []
        self.has_bytes: list[bool] = []
        self.root = self._rule_index[start_rule]
        self.compile_seconds = 0.0
        self.nfa_states = len(nfa.eps)
        self.rule_start = []
        for name in order:
            start, end = fragments[name]
            states = self._important(self._closure(start), end) if live[start] else frozenset()
            self.rule_start.append(self._intern(self._rule_index[name], states))

    @property
    def n_states(self) -> int:
        """States built so far."""
        return len(self._sets)

    @property
    def accepting(self) -> np.ndarray:
        return np.array(self.accepting_list, dtype=bool)

    def copy_shape(self, q: int) -> tuple[tuple, int] | None:
        """``(shape, reach)``: states of equal shape behave alike for ``reach`` bytes (the
        smaller reach of the two), or None.

        Inside a long lazy repetition (``maxLength: 400``), the same position in copy ``c``
        and in copy ``c + 1`` behaves identically as long as both are past the minimum and
        the maximum is out of reach: every copy is the same automaton and the states after
        the repetition are shared. ``reach`` is a lower bound on the bytes before a path
        from ``q`` could meet the maximum (copies left times the fewest bytes of one copy).
        The same holds level by level for nested repetitions (``maxItems: 30`` objects
        holding ``maxLength: 120`` strings: the string of item 5 behaves as that of item 4),
        comparing copies of an inner repetition by their template and by the copy of the
        outer one they live in. A token verdict that looked no further than ``reach`` bytes
        then serves every state of the shape (``MaskCache.verdict``).
        """
        got = self._shape_memo.get(q, self)
        if got is not self:
            return got
        got = self._shape_memo[q] = self._copy_shape(q)
        return got

    def _copy_shape(self, q: int) -> tuple[tuple, int] | None:
        rule, states = self._sets[q]
        copy_of = self._nfa.copy_of
        own: dict[object, list[tuple[int, int]]] = {}
        outside: list[int] = []
        for x in states:
            info = copy_of.get(x)
            if info is None:
                outside.append(x)
            else:
                record, index = info
                own.setdefault(record, []).append((index, x - record.entry_of(index)))
        if not own:
            return None
        # Every repetition involved, with the copies of it that its inner ones live in.
        indices = {record: [i for i, _ in spots] for record, spots in own.items()}
        frontier = list(own)
        while frontier:
            record = frontier.pop()
            if record.parent is None:
                if record.template is not record:
                    return None  # a copy whose enclosing copy is unknown: no safe key
                continue
            outer, j = record.parent
            if outer not in indices:
                indices[outer] = []
                frontier.append(outer)
            indices[outer].append(j)
        low = {}
        reach = None
        for record, used in indices.items():
            lo, hi = min(used), max(used)
            # Copy i may end the repetition after it iff i + 1 >= minimum: all must.
            if record.nullable or lo + 1 < record.minimum:
                return None
            left = (record.copies - hi - 2) * max(record.min_bytes, 1)
            reach = left if reach is None else min(reach, left)
            low[record] = lo
        parts = []
        for record, lo in low.items():
            spots = frozenset((i - lo, off) for i, off in own.get(record, ()))
            where = None
            if record.parent is not None:
                outer, j = record.parent
                where = (outer.template, j - low[outer])
            parts.append((record.template, where, spots))
        return (rule, frozenset(parts), frozenset(outside)), reach

    def ensure(self, q: int) -> None:
        """Build the transitions of state ``q`` if they are not built yet."""
        if self.trans_rows[q] is not None:
            return
        nfa = self._nfa
        live = self._live
        rule, states = self._sets[q]
        end = self._ends[rule]
        byte_edges = nfa.byte_edges
        edges = [edge for x in states for edge in byte_edges[x] if live[edge[2]]]
        row = [-1] * 256
        targets: list[int] = []
        segments: list[tuple[int, int, int]] = []
        if len(edges) == 1:
            lo, hi, t = edges[0]
            target = self._intern(rule, self._important_closure(t, end))
            row[lo:hi + 1] = [target] * (hi + 1 - lo)
            targets.append(target)
            segments.append((lo, hi + 1, target))
        elif edges:
            # Sweep the byte axis: between consecutive edge bounds the set of covering edges
            # is constant, and so is the successor; the set changes only where an edge starts
            # or stops, so it is updated there instead of rescanning every edge.
            starts: dict[int, list[int]] = {}
            stops: dict[int, list[int]] = {}
            for lo, hi, t in edges:
                starts.setdefault(lo, []).append(t)
                stops.setdefault(hi + 1, []).append(t)
            points = sorted(starts.keys() | stops.keys())
            active: dict[int, int] = {}  # covering target -> how many edges lead there
            by_targets: dict[frozenset[int], int] = {}
            by_states: dict[frozenset[int], int] = {}
            for a, b in zip(points, points[1:], strict=False):
                for t in stops.get(a, ()):
                    if active[t] == 1:
                        del active[t]
                    else:
                        active[t] -= 1
                for t in starts.get(a, ()):
                    active[t] = active.get(t, 0) + 1
                if not active:
                    continue
                covering = frozenset(active)
                target = by_targets.get(covering)
                if target is None:
                    if len(covering) == 1:
                        nxt = self._important_closure(next(iter(covering)), end)
                    else:
                        nxt = frozenset().union(*[self._important_closure(t, end)
                                                  for t in covering])
                    target = by_states.get(nxt)
                    if target is None:
                        target = by_states[nxt] = self._intern(rule, nxt)
                        targets.append(target)
                    by_targets[covering] = target
                if segments and segments[-1][1] == a and segments[-1][2] == target:
                    segments[-1] = (segments[-1][0], b, target)
                else:
                    segments.append((a, b, target))
                row[a:b] = [target] * (b - a)
        call_map: dict[int, set[int]] = {}
        fragments = self._fragments
        for x in states:
            for name, t in nfa.call_edges[x]:
                if live[t] and live[fragments[name][0]]:
                    call_map.setdefault(self._rule_index[name], set()).update(self._closure(t))
        self.calls[q] = tuple(sorted((cr, self._intern(rule, self._important(frozenset(ts), end)))
                                     for cr, ts in call_map.items()))
        self.trans_rows[q] = row
        self.row_targets[q] = targets
        self.row_segments[q] = segments
        numpy_row = self.trans[q]  # still all -1: a few slice writes beat converting a list
        for lo, hi, target in segments:
            numpy_row[lo:hi] = target
        self.has_bytes[q] = bool(edges)

    def _important_closure(self, t: int, end: int) -> frozenset[int]:
        """The states of ``t``'s closure that matter to a DFA state (memoised per ``t``: the
        closure stays inside one rule's fragment, so ``end`` is always the same for ``t``)."""
        got = self._important_memo.get(t)
        if got is None:
            got = self._important_memo[t] = self._important(self._closure(t), end)
        return got

    def _closure(self, s: int) -> frozenset[int]:
        got = self._eps_memo.get(s)
        if got is not None:
            return got
        live = self._live
        nfa = self._nfa
        lazy = nfa.lazy_exits
        memo = self._eps_memo
        seen = {s}
        stack = [s]
        while stack:
            x = stack.pop()
            following = nfa.eps[x]
            if x in lazy:
                record, done = lazy[x]
                following = following + record.successors(done)
            for y in following:
                if live[y] and y not in seen:
                    known = memo.get(y)
                    if known is not None:  # already closed: take it whole
                        seen |= known
                    else:
                        seen.add(y)
                        stack.append(y)
        result = frozenset(seen)
        self._eps_memo[s] = result
        return result

    def _important(self, states: frozenset[int], end: int) -> frozenset[int]:
        nfa = self._nfa
        return frozenset(x for x in states if nfa.byte_edges[x] or nfa.call_edges[x] or x == end)

    def _intern(self, rule: int, states: frozenset[int]) -> int:
        key = (rule, states)
        got = self._ids.get(key)
        if got is not None:
            return got
        idx = len(self._sets)
        self._ids[key] = idx
        self._sets.append(key)
        self.trans_rows.append(None)
        self.row_targets.append(None)
        self.row_segments.append(None)
        self.calls.append(None)
        self.accepting_list.append(self._ends[rule] in states)
        self.has_bytes.append(False)
        if idx >= self.trans.shape[0]:
            self.trans = grown_rows(self.trans, -1)
        return idx

    def build_all(self, limit: int = 1_000_000) -> None:
        """Build every reachable state (for tests and for inspecting a grammar's size)."""
        q = 0
        while q < len(self._sets) and q < limit:
            self.ensure(q)
            q += 1


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: compiling allocates tens of thousands of small
    lists, which trigger full collections over everything else the process holds (measured:
    a third to a half of an invoice schema's compile time). Nothing built here is cyclic."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

def compile_automaton(grammar: Grammar) -> Automaton:
    """Compile ``grammar`` into an :class:`Automaton` (tokenizer-independent)."""
    with gc_paused():
        t0 = time.perf_counter()
        nfa, fragments, order, live = build_nfa(grammar)
        auto = Automaton(nfa, fragments, order, live, grammar.start)
        _check_left_recursion(auto)
        auto.compile_seconds = time.perf_counter() - t0
        return auto


def _check_left_recursion(auto: Automaton) -> None:
    """Refuse rules that can call themselves before consuming a byte (the stack would grow
    forever); name the cycle."""
    nullable = [auto.accepting_list[s] for s in auto.rule_start]
    # A rule is nullable if its start can reach acceptance via nullable calls only.
    changed = True
    while changed:
        changed = False
        for r, s in enumerate(auto.rule_start):
            if nullable[r]:
                continue
            seen = {s}
            stack = [s]
            while stack and not nullable[r]:
                q = stack.pop()
                auto.ensure(q)
                if auto.accepting_list[q]:
                    nullable[r] = True
                    changed = True
                for cr, t in auto.calls[q]:
                    if nullable[cr] and t not in seen:
                        seen.add(t)
                        stack.append(t)
    left: dict[int, set[int]] = {}
    for r, s in enumerate(auto.rule_start):
        seen = {s}
        stack = [s]
        while stack:
            q = stack.pop()
            auto.ensure(q)
            for cr, t in auto.calls[q]:
                left.setdefault(r, set()).add(cr)
                if nullable[cr] and t not in seen:
                    seen.add(t)
                    stack.append(t)
    for r in range(len(auto.rule_start)):
        path = _find_cycle(left, r)
        if path:
            names = " -> ".join(auto.rule_names[x] for x in path)
            raise LeftRecursionError(
                f"rule {auto.rule_names[r]!r} is left-recursive ({names}): it can call itself "
                "before consuming any input; rewrite it with repetition, e.g. "
                "'expr ::= term (\"+\" term)*'"
            )


def _find_cycle(graph: dict[int, set[int]], start: int) -> list[int] | None:
    stack = [(start, [start])]
    seen = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None
