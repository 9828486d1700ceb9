"""Lazily determinised byte DFAs over a grammar's NFA, joined by rule calls.

``compile_automaton`` builds the NFA (``engine.nfa``) and numbers DFA states over all call
rules; a state's transitions are made the first time something steps into it, so a schema
with a ``maxLength: 400`` string costs nothing for positions a generation never reaches. Left
recursion (a rule that can call itself before consuming a byte) is refused with the cycle named.
"""

from __future__ import annotations

import time

import numpy as np

from formcast.engine.determinise import PyDeterminiser, make_determiniser
from formcast.engine.follow import follow_bytes
from formcast.engine.nfa import NFA, LazyRepeat, build_nfa
from formcast.errors import LeftRecursionError
from formcast.gc_pause import gc_paused
from formcast.grammar.ir import Grammar


class Automaton:
    """The compiled grammar: DFA states of all call rules in one numbering, built lazily.

    Only the start state of each rule exists after compiling; every other state is made the
    first time something needs its transitions (``ensure``), so a schema with a
    ``maxLength: 400`` string costs nothing for the 399 positions a generation never reaches.

    ``row(q)[b]`` is the state after byte ``b`` (-1: refused), ``segments(q)`` the same row as
    ``(lo, hi excl., target)`` runs; once ``ensure(q)`` ran, ``calls[q]`` maps a call rule
    index to the state reached after that rule completes. The C determiniser keeps rows
    itself and makes the Python lists (``trans_rows[q]``...) only when they are asked for.
    ``accepting_list[q]`` means the rule that owns ``q`` may end here. States are made by a
    determiniser (``engine.determinise``: in C when the extension is built).
    """

    def __init__(self, nfa: NFA, fragments: dict[str, tuple[int, int]], order: list[str],
                 live: list[bool], start_rule: str, *, native: bool | None = None) -> None:
        self._nfa = nfa
        self._fragments = fragments
        self._live = live
        self._follow: list[np.ndarray] | None = None
        self._rule_index = {name: i for i, name in enumerate(order)}
        self._shape_memo: dict[int, tuple[tuple, int] | None] = {}
        self.rule_names = order
        self.trans_rows: list[list[int] | None] = []
        self.row_targets: list[list[int] | None] = []  # distinct successors of each built row
        self.row_segments: list[list[tuple[int, int, int]] | None] = []  # (lo, hi excl., target)
        self.calls: list[tuple[tuple[int, int], ...] | None] = []
        self.accepting_list: list[bool] = []
        self.has_bytes: list[bool] = []
        self.root = self._rule_index[start_rule]
        self.compile_seconds = 0.0
        self.nfa_states = len(nfa.eps)
        call_rule = {name: i for i, name in enumerate(order) if live[fragments[name][0]]}
        self._core = make_determiniser(
            nfa, live, call_rule, [fragments[name][1] for name in order],
            {"trans_rows": self.trans_rows, "row_targets": self.row_targets,
             "row_segments": self.row_segments, "calls": self.calls,
             "accepting": self.accepting_list, "has_bytes": self.has_bytes}, native=native)
        self.rule_start = [self._core.intern_start(i, fragments[name][0])
                           for i, name in enumerate(order)]

    @property
    def n_states(self) -> int:
        """States built so far."""
        return self._core.n_states

    @property
    def native_core(self) -> object | None:
        """The C determiniser, for the C trie walk to build states with (None in Python)."""
        core = self._core
        return None if isinstance(core, PyDeterminiser) else core

    def follow_of(self, q: int) -> np.ndarray:
        """Bytes that can come right after the frame of DFA state ``q`` returns, in any
        context (uint8 per byte; ``engine.follow``, computed on first use)."""
        if self._follow is None:
            table = follow_bytes(self._nfa, self._fragments, self.rule_names,
                                 self._live).astype(np.uint8)
            self._follow = list(table)  # a row per rule, made once (not a view per call)
        return self._follow[self._core.rule(q)]

    @property
    def has_lazy_copies(self) -> bool:
        """Whether some repetition is copied on demand (then ``copy_shape`` can match)."""
        return bool(self._nfa.copy_of)

    def state_key(self, q: int) -> tuple[int, frozenset[int]]:
        """``(rule index, NFA states)`` of DFA state ``q``."""
        return self._core.state(q)

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
        if not self.has_lazy_copies:  # then no state has a shape
            return None
        got = self._shape_memo.get(q, self)
        if got is not self:
            return got
        got = self._shape_memo[q] = self._copy_shape(q)
        return got

    def _copy_shape(self, q: int) -> tuple[tuple, int] | None:
        rule, states = self._core.state(q)
        get = self._nfa.copy_of.get
        infos = [get(x) for x in states]
        if not any(infos):  # most states: no copy involved
            return None
        own: dict[object, list[tuple[int, int]]] = {}
        outside: list[int] = []
        for x, info in zip(states, infos, strict=True):
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
                where = (_identity(outer), j - low[outer])
            parts.append((_identity(record), where, spots))
        return (rule, frozenset(parts), frozenset(outside)), reach

    def ensure(self, q: int) -> None:
        """Build the transitions of state ``q`` if they are not built yet."""
        if self.calls[q] is None:  # set when a state is built, by either determiniser
            self._core.ensure(q)

    def row(self, q: int) -> list[int]:
        """State ``q``'s successor for each byte (-1: refused), building ``q`` if needed."""
        got = self.trans_rows[q]
        return got if got is not None else self._core.row(q)

    def segments(self, q: int) -> list[tuple[int, int, int]]:
        """State ``q``'s row as ``(lo, hi excl., target)`` runs, building ``q`` if needed."""
        got = self.row_segments[q]
        return got if got is not None else self._core.segments(q)

    def targets(self, q: int) -> list[int]:
        """State ``q``'s distinct successors, building ``q`` if needed."""
        got = self.row_targets[q]
        return got if got is not None else self._core.targets(q)

    def write_plain_row(self, q: int, table: np.ndarray, filled: np.ndarray,
                        finishes: np.ndarray, sid: int) -> bool:
        """Write built state ``q``'s row into parser-state row ``sid`` of ``table``, each target
        ``t`` as the one-frame parser state ``2 * t``, and mark it filled; False (nothing
        written) when ``q`` calls a rule."""
        return self._core.write_plain_row(q, table, filled, finishes, sid)

    def build_all(self, limit: int = 1_000_000) -> None:
        """Build every reachable state (for tests and for inspecting a grammar's size)."""
        q = 0
        while q < self._core.n_states and q < limit:
            self.ensure(q)
            q += 1


def _identity(record: LazyRepeat) -> LazyRepeat:
    """What a shape key names a repetition by. Inside a copy of an enclosing lazy repetition
    it is its template, the copy being named apart (``where``): the same position in the
    next copy behaves alike. Otherwise, an original or a copy made with its rule's fragment
    (``text`` inlined in two places), it is the repetition itself: each such copy goes on to
    its own continuation."""
    return record.template if record.parent is not None else record


def compile_automaton(grammar: Grammar) -> Automaton:
    """Compile ``grammar`` into an :class:`Automaton` (tokenizer-independent)."""
    with gc_paused():
        t0 = time.perf_counter()
        nfa, fragments, order, live = build_nfa(grammar)
        auto = Automaton(nfa, fragments, order, live, grammar.start)
        _check_left_recursion(auto)
        auto.compile_seconds = time.perf_counter() - t0
        return auto


def _may_call_before_input(nfa: NFA, starts: list[int]) -> bool:
    """Whether the NFA's epsilon edges lead from some rule's start to a rule call; also True
    when a part built on demand (a lazy repetition's exit) is in the way."""
    for start in starts:
        seen = {start}
        stack = [start]
        while stack:
            x = stack.pop()
            if nfa.call_edges[x] or x in nfa.lazy_exits:
                return True
            for d in nfa.eps[x]:
                if x + d not in seen:
                    seen.add(x + d)
                    stack.append(x + d)
    return False


def _check_left_recursion(auto: Automaton) -> None:
    """Refuse rules that can call themselves before consuming a byte (the stack would grow
    forever); name the cycle."""
    starts = [auto._fragments[name][0] for name in auto.rule_names]
    if not auto._nfa.call_sites or not _may_call_before_input(auto._nfa, starts):
        # No rule calls another before a byte (most recursive schemas recur after a "{" or
        # "["; most others inline every rule): nothing to check, and the start states stay
        # unbuilt until the first mask needs them (15-40 us of a compile).
        return
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
