"""The grammar state: a set of stacks over the compiled automaton (a pushdown automaton).

A stack is a tuple of DFA state ids; its last element is the current position, the ones below
are return states of pending rule calls. A parser state is a frozenset of such stacks, always
kept *closed*: every pending call has been entered and every finished rule returned from, so
each stack's top is a state that can consume a byte (or the finished root). That makes the
state canonical — two prefixes that allow the same futures in the same way reach the same
frozenset — so it doubles as the key of the mask cache.

Transitions are memoised per (state, byte); the warm path of ``advance`` is dictionary lookups.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from formcast.engine.lexer import Automaton

Stack = tuple[int, ...]
State = frozenset[Stack]

MAX_STACK_DEPTH = 2000
_MEMO_LIMIT = 200_000


class Parser:
    """Stateless operations on parser states for one compiled automaton (shareable)."""

    def __init__(self, automaton: Automaton) -> None:
        self.auto = automaton
        self._rows = automaton.trans_rows
        self._calls = automaton.calls
        self._accepting = automaton.accepting_list
        self._has_bytes = automaton.has_bytes
        self._closure_memo: dict[Stack, frozenset[Stack]] = {}
        self._step_memo: OrderedDict[tuple[State, int], State] = OrderedDict()
        self.initial: State = self.close_stack((automaton.rule_start[automaton.root],))

    # -- closure ------------------------------------------------------------------------
    def close_stack(self, stack: Stack) -> frozenset[Stack]:
        """All stacks reachable from ``stack`` by entering calls and returning from rules."""
        got = self._closure_memo.get(stack)
        if got is not None:
            return got
        out: set[Stack] = set()
        seen = {stack}
        work = [stack]
        rule_start = self.auto.rule_start
        while work:
            st = work.pop()
            top = st[-1]
            if self._has_bytes[top] or (len(st) == 1 and self._accepting[top]):
                out.add(st)
            if len(st) < MAX_STACK_DEPTH:
                below = st[:-1]
                for rule, ret in self._calls[top]:
                    nxt = below + (ret, rule_start[rule])
                    if nxt not in seen:
                        seen.add(nxt)
                        work.append(nxt)
            if self._accepting[top] and len(st) > 1:
                nxt = st[:-1]
                if nxt not in seen:
                    seen.add(nxt)
                    work.append(nxt)
        result = frozenset(out)
        if len(self._closure_memo) > _MEMO_LIMIT:
            self._closure_memo.clear()
        self._closure_memo[stack] = result
        return result

    # -- stepping -----------------------------------------------------------------------
    def step(self, state: State, byte: int) -> State:
        """The state after one byte (empty frozenset: the byte is refused)."""
        key = (state, byte)
        memo = self._step_memo
        got = memo.get(key)
        if got is not None:
            return got
        rows = self._rows
        out: set[Stack] = set()
        for st in state:
            nxt = rows[st[-1]][byte]
            if nxt >= 0:
                out |= self.close_stack(st[:-1] + (nxt,))
        result = frozenset(out)
        if len(memo) >= _MEMO_LIMIT:
            memo.popitem(last=False)
        memo[key] = result
        return result

    def advance(self, state: State, data: bytes) -> State:
        """The state after ``data`` (empty if any byte is refused)."""
        step = self.step
        for byte in data:
            state = step(state, byte)
            if not state:
                return state
        return state

    def advance_stack(self, stack: Stack, data: bytes) -> bool:
        """Whether ``data`` can be consumed starting from the single (closed) ``stack``."""
        return bool(self.advance(frozenset((stack,)), data)) if data else True

    def is_accepting(self, state: State) -> bool:
        return any(len(st) == 1 and self._accepting[st[-1]] for st in state)

    def allowed_bytes(self, state: State) -> list[int]:
        """Bytes that can come next."""
        tops = [st[-1] for st in state]
        if not tops:
            return []
        return np.nonzero((self.auto.trans[tops] >= 0).any(axis=0))[0].tolist()
