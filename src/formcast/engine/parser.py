"""The grammar state: a set of stacks over the compiled automaton (a pushdown automaton).

A stack is a tuple of DFA state ids; its last element is the current position, the ones below
are return states of pending rule calls. A parser state is a frozenset of *kernel* stacks: the
stacks exactly as a byte left them, before entering pending calls or returning from finished
rules. Closing a kernel (``close_stack``) expands those moves; it is memoised per kernel.

Kernel sets are canonical enough to key the mask cache, and they make the mask of a stack
depend on its top alone *unless* a token returns below that top mid-token: a kernel ``(..., q)``
behaves like the one-frame stack ``(q,)`` until the frame of ``q`` finishes. The mask cache
uses exactly that to classify tokens once per ``q`` for every context.

``DenseStates`` numbers parser states on demand and fills a numpy transition table row by row,
so a walk of the whole vocabulary from one state is a numpy gather per byte position.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from formcast.engine.arrays import grown_rows, recycle, reserved_rows, take_recycled
from formcast.engine.lexer import Automaton
from formcast.errors import AmbiguousGrammarError

Stack = tuple[int, ...]
State = frozenset[Stack]

MAX_STACK_DEPTH = 2000
# Bound on the stacks of one parser state. Unambiguous grammars (every JSON Schema, the usual
# GBNF) keep a handful; an ambiguous recursion such as root ::= "a" | "a" root{2,4} multiplies
# them at every byte and would exhaust memory, so it is refused with a clear error instead.
MAX_PARSE_STACKS = 4096
_MEMO_LIMIT = 200_000


class Parser:
    """Operations on parser states for one compiled automaton (shareable; not thread-safe:
    callers hold the compiled grammar's lock)."""

    def __init__(self, automaton: Automaton) -> None:
        self.auto = automaton
        self._rows = automaton.trans_rows
        self._calls = automaton.calls
        self._accepting = automaton.accepting_list
        self._has_bytes = automaton.has_bytes
        self._closure_memo: dict[Stack, tuple[Stack, ...]] = {}
        self._top_memo: dict[int, tuple[tuple[Stack, ...], bool]] = {}
        self._step_memo: OrderedDict[tuple[State, int], State] = OrderedDict()
        self.initial: State = frozenset(((automaton.rule_start[automaton.root],),))

    # -- closure ------------------------------------------------------------------------
    def close_stack(self, stack: Stack) -> tuple[Stack, ...]:
        """Stacks reachable from ``stack`` by entering calls and returning from finished
        rules, keeping those that can take a byte (and the finished root)."""
        got = self._closure_memo.get(stack)
        if got is not None:
            return got
        below = stack[:-1]
        suffixes, finishes = self._top_closure(stack[-1])
        has_bytes = self._has_bytes
        if below:
            out = {below + s for s in suffixes if has_bytes[s[-1]]}
            if finishes:
                out.update(self.close_stack(below))
        else:
            out = set(suffixes)
        if len(out) > MAX_PARSE_STACKS:
            self._refuse(out)
        result = tuple(sorted(out))
        if len(self._closure_memo) > _MEMO_LIMIT:
            self._closure_memo.clear()
        self._closure_memo[stack] = result
        return result

    def _refuse(self, stacks: set[Stack] | list[Stack]) -> None:
        auto = self.auto
        rules = sorted({auto.rule_names[auto.state_key(st[-1])[0]] for st in stacks if st})
        raise AmbiguousGrammarError(len(stacks), MAX_PARSE_STACKS, rules)

    def _is_final(self, q: int) -> bool:
        """Whether DFA state ``q`` can only end its rule (accepting, no bytes, no calls)."""
        self.auto.ensure(q)
        return self._accepting[q] and not self._has_bytes[q] and not self._calls[q]

    def frame_can_finish(self, q: int) -> bool:
        """Whether the frame at DFA state ``q`` can end before another byte."""
        return self._top_closure(q)[1]

    def _top_closure(self, q: int) -> tuple[tuple[Stack, ...], bool]:
        """The closure of the one-frame stack ``(q,)`` (stacks relative to ``q``'s frame) and
        whether ``q``'s frame can finish without a byte. Memoised per DFA state, so closing a
        deep stack costs what the top needs, not what lies below it."""
        got = self._top_memo.get(q)
        if got is not None:
            return got
        out: list[Stack] = []
        finishes = False
        seen = {(q,)}
        work = [(q,)]
        rule_start = self.auto.rule_start
        ensure = self.auto.ensure
        while work:
            st = work.pop()
            top = st[-1]
            ensure(top)
            if len(st) == 1 and self._accepting[top]:
                finishes = True
                out.append(st)
            elif self._has_bytes[top]:
                out.append(st)
            if len(st) < MAX_STACK_DEPTH:
                below = st[:-1]
                for rule, ret in self._calls[top]:
                    if self._is_final(ret):
                        # A tail call: the frame would only return and end, so it is not
                        # kept (right recursion such as list ::= item ("," list)? then runs
                        # in constant stack, and its states repeat, so masks are cached).
                        nxt = below + (rule_start[rule],)
                    else:
                        nxt = below + (ret, rule_start[rule])
                    if nxt not in seen:
                        seen.add(nxt)
                        work.append(nxt)
            if self._accepting[top] and len(st) > 1:
                nxt = st[:-1]
                if nxt not in seen:
                    seen.add(nxt)
                    work.append(nxt)
        result = (tuple(sorted(out)), finishes)
        self._top_memo[q] = result
        return result

    def closed(self, state: State) -> list[Stack]:
        """Every closed stack of ``state``."""
        out: list[Stack] = []
        for kernel in state:
            out.extend(self.close_stack(kernel))
        if len(out) > MAX_PARSE_STACKS:
            self._refuse(out)
        return out

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
        for kernel in state:
            for st in self.close_stack(kernel):
                row = rows[st[-1]]
                if row is None:  # built in C, not asked for in Python yet
                    row = self.auto.row(st[-1])
                nxt = row[byte]
                if nxt >= 0:
                    out.add(st[:-1] + (nxt,))
        if len(out) > MAX_PARSE_STACKS:
            self._refuse(out)
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

    def is_accepting(self, state: State) -> bool:
        """Whether the root rule can finish here (only a one-frame stack can)."""
        accepting = self._accepting
        return any(len(st) == 1 and accepting[st[-1]] for st in self.closed(state))

    def allowed_bytes(self, state: State) -> list[int]:
        """Bytes that can come next."""
        row = self.auto.row
        allowed = set()
        for st in self.closed(state):
            allowed.update(b for b, t in enumerate(row(st[-1])) if t >= 0)
        return sorted(allowed)


class DenseStates:
    """Parser states numbered on demand, with a numpy table of their byte transitions.

    Rows are filled lazily (``ensure_rows``): a new state's 256 successors are grouped by the
    tuple of its stacks' DFA rows, so a state costs one closure per *distinct* successor.
    ``finishes[i]`` (valid once the row is filled) marks states where the base frame can end:
    a token walked from a one-frame state that passes such a point mid-token depends on the
    context.

    The state that is the single one-frame stack ``(q,)`` (every state of a non-recursive
    grammar, every position inside a lexeme) is numbered ``2 * q`` without being interned,
    and its row is the DFA row with every target doubled, written by the determiniser; other
    states get odd numbers. The table is indexed by both.
    """

    def __init__(self, parser: Parser, capacity: int = 1 << 16) -> None:
        self.parser = parser
        self.ids: dict[State, int] = {}  # states other than one one-frame stack -> odd id
        self._others: list[State] = []
        # Reserved, not allocated: the OS commits the table's pages as rows are written, so a
        # large capacity costs address space, not memory or time. Growing it instead copies
        # megabytes inside one cold mask (1.5-3 ms each time in a JSON schema's first pass).
        # A dropped instance gives its arrays back for the next one (__del__): their table
        # rows are stale, but a row is read only once its ``filled`` flag is set, and the
        # flags are cleared here up to the last owner's highest state number.
        kit = take_recycled(("parser states", capacity))
        if kit is None:
            table = reserved_rows(capacity, 256)
            finishes = np.zeros(capacity, dtype=bool)
            filled = np.zeros(capacity, dtype=bool)
            # The flags as uint8, for the C walk: made once per array, not per call.
            views = (filled.view(np.uint8), finishes.view(np.uint8))
        else:
            table, finishes, filled, views, used = kit
            filled[:used] = False
            finishes[:used] = False
        self._kit = (table, finishes, filled, views)
        self.table, self.finishes, self.filled = table, finishes, filled
        self.filled_bytes, self.finishes_bytes = views
        # What the C determiniser needs to build any state's row (Core.fill_state, and the C
        # trie walk through fill_general): the numbering and the parser's own memo dicts, so
        # both sides share one closure and one numbering. Their identities never change.
        self._closure_context = (self.ids, self._others, parser.auto.rule_start,
                                 parser._closure_memo, parser._top_memo, MAX_STACK_DEPTH,
                                 MAX_PARSE_STACKS, _MEMO_LIMIT)
        # The walk's also holds: calls tuple of a DFA state -> the state its calls alone
        # enter, whose row every DFA state with those calls starts from (fill_by_calls, C).
        self.native_context = self._closure_context + ({},)

    def __del__(self) -> None:
        # A method, not weakref.finalize: that one cost ~10 us of every cold compile.
        kit = getattr(self, "_kit", None)  # None when __init__ failed early
        if kit is None:
            return
        # Every state numbered so far, one-frame (even) or not (odd), is below this: flags
        # are only ever set for numbered states.
        used = max(2 * self.parser.auto.n_states, 2 * len(self._others) + 1) + 1
        recycle(("parser states", len(kit[2])), (*kit, min(used, len(kit[2]))))

    def _byte_views(self) -> None:
        # The flags as uint8, for the C walk: made once per array, not per call (~0.5 us).
        self.filled_bytes = self.filled.view(np.uint8)
        self.finishes_bytes = self.finishes.view(np.uint8)

    def __len__(self) -> int:
        """States numbered apart from the one-frame ones (those are bounded by the automaton)."""
        return len(self._others)

    def plain_id(self, q: int) -> int:
        """The number of the one-frame state ``(q,)`` (``intern`` without building it)."""
        sid = 2 * q
        if sid >= self.table.shape[0]:
            self._fit(sid + 1)
        return sid

    def state(self, sid: int) -> State:
        """The parser state numbered ``sid``."""
        if sid % 2 == 0:
            return frozenset(((sid // 2,),))
        return self._others[sid // 2]

    def intern(self, state: State) -> int:
        if len(state) == 1:
            (stack,) = state
            if len(stack) == 1:
                sid = 2 * stack[0]
                if sid >= self.table.shape[0]:
                    self._fit(sid + 1)
                return sid
        got = self.ids.get(state)
        if got is not None:
            return got
        sid = 2 * len(self._others) + 1
        if sid >= self.table.shape[0]:
            self._fit(sid + 1)
        self.ids[state] = sid
        self._others.append(state)
        return sid

    def fit_numbered(self) -> None:
        """Make room in the table for every state numbered so far."""
        self._fit()

    def _fit(self, rows: int = 0) -> None:
        """Make room for ``rows`` rows and for every state a filled row can lead to (the
        C walk checks the ids it reads against the table's size)."""
        need = max(rows, 2 * self.parser.auto.n_states + 2, 2 * len(self._others) + 2)
        n = self.table.shape[0]
        if need <= n:
            return
        size = max(2 * n, need)
        table = reserved_rows(size, 256)
        filled = np.flatnonzero(self.filled[:n])
        table[filled] = self.table[filled]  # only rows in use: the rest stays uncommitted
        self.table = table
        self.finishes = grown_rows(self.finishes, False, at_least=size)
        self.filled = grown_rows(self.filled, False, at_least=size)
        self._byte_views()

    def _fill_plain_row(self, sid: int, q: int) -> bool:
        """Row ``sid`` of a state whose closure is the single one-frame stack ``(q,)`` (False
        when ``q`` calls a rule, whose closure is more than that): every byte leads to the
        one-frame state of the DFA successor."""
        auto = self.parser.auto
        auto.ensure(q)
        self._fit()
        return auto.write_plain_row(q, self.table, self.filled, self.finishes, sid)

    def ensure_rows(self, ids: np.ndarray) -> None:
        """Fill the transition rows of the given state ids that are not filled yet."""
        pending = ids[~self.filled[ids]]
        if pending.size == 0:
            return
        for sid in (pending.tolist() if pending.size == 1 else sorted(set(pending.tolist()))):
            if self.filled[sid]:
                continue
            if sid % 2 == 0 and self._fill_plain_row(sid, sid // 2):
                continue
            if self._fill_state_natively(sid):
                continue
            stacks = self.parser.closed(self.state(sid))
            accepting = self.parser.auto.accepting_list
            if len(stacks) == 1 and len(stacks[0]) == 1 and self._fill_plain_row(sid, stacks[0][0]):
                continue
            self.finishes[sid] = any(len(st) == 1 and accepting[st[-1]] for st in stacks)
            if not stacks:
                self.table[sid] = -1
                self.filled[sid] = True
                continue
            self._fill_row(sid, stacks)
        self._fit()

    def _fill_state_natively(self, sid: int) -> bool:
        """The rest of ``ensure_rows`` for one state in C (``Core.fill_state``): closure,
        finish flag and row, with the parser's own memo dicts. False: left to Python (no C
        determiniser, or a closure too large, which Python refuses with its error)."""
        core = self.parser.auto.native_core
        if core is None:
            return False
        while True:
            self._fit(2 * (len(self._others) + 257) + 2)
            done = core.fill_state(sid, self.state(sid), self.table, self.filled, self.finishes,
                                   *self._closure_context)
            if done != 2:  # 2: the closure built states past the table; grow it, go again
                return done == 1

    def _fill_row(self, sid: int, stacks: list[Stack]) -> None:
        """Row of a general state: byte ``b`` leads to the kernels ``below + (trans[top][b],)``
        of its stacks. The tops' rows are constant between the bounds of their segments, so a
        state costs one column per piece and one kernel per *distinct* column, not 256
        lookups (in C when the determiniser is: ``Core.fill_row``)."""
        auto = self.parser.auto
        for st in stacks:
            auto.ensure(st[-1])
        core = auto.native_core
        if core is not None:
            # Room for every state the row can number: one per piece at most.
            self._fit(2 * (len(self._others) + 257) + 2)
            core.fill_row(stacks, sid, self.table, self.filled, self.ids, self._others)
            return
        rows = {top: auto.row(top) for top in {st[-1] for st in stacks}}
        tops = [st[-1] for st in stacks]
        points = sorted({p for top in rows for lo, hi, _ in auto.segments(top) for p in (lo, hi)})
        numbered_cols: dict[tuple[int, ...], int] = {}
        out = np.full(256, -1, dtype=np.int32)
        for lo, hi in zip(points, points[1:], strict=False):
            column = tuple(rows[top][lo] for top in tops)
            got = numbered_cols.get(column)
            if got is None:
                kernel = frozenset(st[:-1] + (n,) for st, n in zip(stacks, column, strict=True)
                                   if n >= 0)
                got = numbered_cols[column] = self.intern(kernel) if kernel else -1
            if got >= 0:
                out[lo:hi] = got
        self.table[sid] = out
        self.filled[sid] = True
