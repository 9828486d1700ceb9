"""Lazy determinisation of a grammar's NFA: the state building behind every cold mask.

A DFA state is a rule and the set of that rule's NFA states it stands for. ``ensure(q)``
makes state ``q``'s byte row and rule calls, interning each successor set the first time it
appears. Two implementations keep the same numbering: the C ``Core`` in ``_determinise.c``
(used when the extension is built) and :class:`PyDeterminiser` here, the fallback and the
reference a differential test holds the C one to. Both write into the lists the
:class:`~formcast.engine.lexer.Automaton` owns.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from formcast.engine.nfa import NFA
from formcast.pure_python import pure_python

try:  # the optional C extension (setup.py); the pure-Python determiniser gives the same states
    from formcast.engine import _determinise
except ImportError:  # pragma: no cover - depends on the build
    _determinise = None


class Determiniser(Protocol):
    """What the Automaton needs from a determiniser."""

    n_states: int

    def intern_start(self, rule: int, start: int) -> int: ...

    def ensure(self, q: int) -> None: ...

    def state(self, q: int) -> tuple[int, frozenset[int]]: ...

    def rule(self, q: int) -> int: ...

    def row(self, q: int) -> list[int]: ...

    def segments(self, q: int) -> list[tuple[int, int, int]]: ...

    def targets(self, q: int) -> list[int]: ...

    def write_plain_row(self, q: int, table: np.ndarray, filled: np.ndarray,
                        finishes: np.ndarray, sid: int) -> bool: ...


def native_determinise_enabled() -> bool:
    """Whether states are built in C (``FORMCAST_PURE_PYTHON=1`` turns it off)."""
    return _determinise is not None and not pure_python()


def make_determiniser(nfa: NFA, live: list[bool], call_rule: dict[str, int], ends: list[int],
                      lists: dict[str, list], *, native: bool | None = None) -> Determiniser:
    """A determiniser over ``nfa`` writing into ``lists`` (the Automaton's per-state lists:
    trans_rows, row_targets, row_segments, calls, accepting, has_bytes). ``call_rule`` maps
    the name of each call rule whose start is live to its index."""
    if native is None:
        native = native_determinise_enabled()
    if native and _determinise is not None:
        return _determinise.Core(eps=nfa.eps, byte_edges=nfa.byte_edges,
                                 call_edges=nfa.call_edges, live=live,
                                 lazy_exits=nfa.lazy_exits, call_rule=call_rule, ends=ends,
                                 **lists)
    return PyDeterminiser(nfa, live, call_rule, ends, lists)


class PyDeterminiser:
    """The determiniser in Python (see the module docstring)."""

    def __init__(self, nfa: NFA, live: list[bool], call_rule: dict[str, int], ends: list[int],
                 lists: dict[str, list]) -> None:
        self._nfa = nfa
        self._live = live
        self._call_rule = call_rule
        self._ends = ends
        self._eps_memo: dict[int, frozenset[int]] = {}
        self._important_memo: dict[int, frozenset[int]] = {}
        self._ids: dict[tuple[int, frozenset[int]], int] = {}
        self._sets: list[tuple[int, frozenset[int]]] = []
        self.trans_rows = lists["trans_rows"]
        self.row_targets = lists["row_targets"]
        self.row_segments = lists["row_segments"]
        self.calls = lists["calls"]
        self.accepting = lists["accepting"]
        self.has_bytes = lists["has_bytes"]

    @property
    def n_states(self) -> int:
        return len(self._sets)

    def state(self, q: int) -> tuple[int, frozenset[int]]:
        return self._sets[q]

    def rule(self, q: int) -> int:
        return self._sets[q][0]

    def row(self, q: int) -> list[int]:
        self.ensure(q)
        return self.trans_rows[q]

    def segments(self, q: int) -> list[tuple[int, int, int]]:
        self.ensure(q)
        return self.row_segments[q]

    def targets(self, q: int) -> list[int]:
        self.ensure(q)
        return self.row_targets[q]

    def write_plain_row(self, q: int, table: np.ndarray, filled: np.ndarray,
                        finishes: np.ndarray, sid: int) -> bool:
        if self.calls[q]:
            return False
        row = table[sid]
        row[:] = -1
        for lo, hi, target in self.row_segments[q]:
            row[lo:hi] = 2 * target
        finishes[sid] = self.accepting[q]
        filled[sid] = True
        return True

    def intern_start(self, rule: int, start: int) -> int:
        end = self._ends[rule]
        states = self._important(self._closure(start), end) if self._live[start] else frozenset()
        return self._intern(rule, states)

    def ensure(self, q: int) -> None:
        if self.trans_rows[q] is not None:
            return
        nfa = self._nfa
        live = self._live
        rule, states = self._sets[q]
        end = self._ends[rule]
        byte_edges = nfa.byte_edges
        edges = [(lo, hi, x + d) for x in states for lo, hi, d in byte_edges[x] if live[x + d]]
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
                                                  for t in sorted(covering)])
                    target = by_targets[covering] = self._intern(rule, nxt)
                    if target not in targets:
                        targets.append(target)
                if segments and segments[-1][1] == a and segments[-1][2] == target:
                    segments[-1] = (segments[-1][0], b, target)
                else:
                    segments.append((a, b, target))
                row[a:b] = [target] * (b - a)
        call_map: dict[int, set[int]] = {}
        # Sorted: closures may paste repetition copies, which number NFA states in order.
        for x in sorted(states):
            for name, d in nfa.call_edges[x]:
                t = x + d
                called = self._call_rule.get(name)
                if called is not None and live[t]:
                    call_map.setdefault(called, set()).update(self._closure(t))
        self.calls[q] = tuple(sorted((called, self._intern(rule, self._important(frozenset(ts), end)))
                                     for called, ts in call_map.items()))
        self.has_bytes[q] = bool(edges)
        self.row_targets[q] = targets
        self.row_segments[q] = segments
        self.trans_rows[q] = row  # last: a row here marks the state as built

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
            following = [x + d for d in nfa.eps[x]]
            if x in lazy:
                record, done = lazy[x]
                following += record.successors(done)
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
        self.accepting.append(self._ends[rule] in states)
        self.has_bytes.append(False)
        return idx
