"""Thompson NFAs for a grammar's rules, built with their sizes kept in check.

Every rule that is not part of a recursion cycle is inlined into the rules that use it, so a
grammar without recursion (any non-recursive JSON Schema, any regex) becomes one automaton and
the matcher never needs a stack; rules that close a cycle ("call rules") stay as call edges.
Building is cheap where it can be: an inlined rule used again is copied from its first
fragment, a repeated item from its first copy, and large bounded repetitions (``maxLength:
400``) copy their item lazily, when the DFA construction first steps past a copy's exit. A
bounded repetition of one byte class (JSON's ``[ \t]{0,20}`` indentation) is a plain chain.

Edges are relative: an edge of state ``x`` to state ``y`` is stored as ``y - x``. A copy of a
fragment then has the same edges as the fragment, so pasting one shares the fragment's edge
containers (frozen to tuples the first time they are shared) instead of building new ones. A
tuple is never changed: a state that gains an edge later gets a list of its own in its place
(``add_edge``), which is also how a new state starts, with the shared empty tuple.

States that cannot reach their rule's end are marked dead (``live``), so determinisation never
enters them: that is what makes "a walk under the mask never reaches a dead end" true.
"""

from __future__ import annotations

import heapq
import weakref
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat

from formcast.engine.fragments import Fragment, precomputed_item
from formcast.errors import GrammarError
from formcast.grammar.ir import (
    ByteSet,
    CharSet,
    Choice,
    Expr,
    Grammar,
    Literal,
    Ref,
    Repeat,
    Seq,
    iter_refs,
    utf8_byte_sequences,
)
from formcast.pure_python import pure_python

# The optional C extensions (setup.py): one pastes fragment copies, the other builds the
# NFA's plain parts. The Python code here does the same, state for state.
try:
    from formcast.engine import _determinise
except ImportError:  # pragma: no cover - depends on the build
    _determinise = None
try:
    from formcast.engine import _nfa_build
except ImportError:  # pragma: no cover - depends on the build
    _nfa_build = None

# A rule whose inlined automaton would exceed this many NFA states is kept as a call rule
# even when it is not recursive: inlining is only an optimisation, calls are always correct.
INLINE_LIMIT = 6000
# ... or this many, for a rule referenced in at most two places (an array's item schema: the
# first item and the rest). A copy shares the fragment's edge containers, so it costs little
# to make or hold, and one automaton spares every mask inside the items a stack of frames
# (a 14-way anyOf of tool calls: cold pass -20%, compile +8%).
TWICE_INLINE_LIMIT = 20000
# Bounded repetitions with at least this many copies are copied lazily (see LazyRepeat).
LAZY_REPEAT_MIN = 8
# Bounded repetitions of one byte class up to this many times are a plain chain of states
# (see _Builder._build_byte_chain), however large.
BYTE_CHAIN_MAX = 64
# A lazily repeated item is determinised when that makes it smaller (_compact_fragment), if it
# has at most this many NFA states: beyond, trying costs more than a copy saves.
COMPACT_MAX_STATES = 256  # also the most _nfa_build.compact takes
MAX_NFA_STATES = 2_000_000
# A further use of an inlined rule whose fragment has at least this many states, plain bytes
# only, is pasted lazily (see LazyCopy): JSON's whitespace between tokens, 27 states a gap.
LAZY_COPY_MIN = 12
# Shared edge containers of a literal's inner states (see _Builder._build_literal).
_NO_EDGES: tuple = ()
_STEP_ONE = [((b, b, 1),) for b in range(256)]


@dataclass
class NFA:
    """Thompson NFA under construction: epsilon, byte-range and call edges per state, each
    target stored relative to its source (``eps[x]`` holds ``y - x``; byte edges are ``(lo,
    hi, y - x)``, call edges ``(rule name, y - x)``). A state's container of a kind is a list
    it owns, or a tuple shared with other states: the empty one until its first edge of that
    kind, or edges frozen for copies to share (``_paste_edges``). Edges are added with
    ``add_edge``, which replaces a tuple by a list instead of changing it."""

    eps: list[list[int]] = field(default_factory=list)
    byte_edges: list[list[tuple[int, int, int]]] = field(default_factory=list)
    call_edges: list[list[tuple[int, int]]] = field(default_factory=list)
    # exit state of a lazily copied repetition -> (the repetition, how many copies end there);
    # after building, also a lazy copy's stub state -> (the copy's fragment, its continuation)
    lazy_exits: dict[int, tuple[LazyRepeat | LazyCopy, int]] = field(default_factory=dict)
    # While building, the lazy copies' stub states (ascending) and what each stands for
    # (build_nfa moves them into lazy_exits): kept apart so that the checks for lazy
    # repetitions inside a copied range do not meet a stub in every fragment.
    stubs: list[int] = field(default_factory=list)
    lazy_copies: dict[int, tuple[LazyCopy, int]] = field(default_factory=dict)
    # state inside a copy of a lazy repetition -> (the repetition, copy index); its offset in
    # the copy is the state minus LazyRepeat.entry_of(copy index)
    copy_of: CopyOwners = field(default_factory=lambda: CopyOwners())
    # states given a call edge while building (pasted copies of them are not listed; only
    # whether there are any is read: engine.follow scans every state's call edges)
    call_sites: list[int] = field(default_factory=list)
    # Whether copies are pasted in C, fixed when the NFA is made (pastes are frequent, and
    # reading the environment for each showed in profiles).
    native_paste: bool = field(default_factory=lambda: native_paste_enabled())

    def new_state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise _too_large()
        # No edges yet: the shared empty tuple (most states never get one of each kind;
        # add_edge gives a state a list of its own on its first edge).
        self.eps.append(())
        self.byte_edges.append(())
        self.call_edges.append(())
        return len(self.eps) - 1


def add_edge(containers: list, x: int, edge: object) -> None:
    """Add ``edge`` to state ``x``'s edges in ``containers`` (``nfa.eps``, ``byte_edges`` or
    ``call_edges``). A list is the state's own and grows; a tuple is shared (the empty one of
    a new state, the frozen edges copies share) and is replaced, never changed."""
    edges = containers[x]
    if edges.__class__ is list:
        edges.append(edge)
    else:
        containers[x] = [*edges, edge]


class CopyOwners:
    """Which copy of which lazy repetition each NFA state lies in (``get``), or None.

    A list indexed by state: a copy is a contiguous range of states registered at once, and
    the copies made on demand are appended at the NFA's end. (A dict took ~4 us a copy to
    fill, over a quarter of the first mask inside a ``maxLength: 80`` string.) A later
    registration overrides an earlier one, state by state."""

    __slots__ = ("_owner",)

    def __init__(self) -> None:
        self._owner: list[tuple[LazyRepeat, int] | None] = []

    def register(self, start: int, stop: int, value: tuple[LazyRepeat, int]) -> None:
        owner = self._owner
        if start >= len(owner):
            owner.extend(repeat(None, start - len(owner)))
            owner.extend(repeat(value, stop - start))
            return
        if stop > len(owner):
            owner.extend(repeat(None, stop - len(owner)))
        owner[start:stop] = repeat(value, stop - start)

    def get(self, x: int) -> tuple[LazyRepeat, int] | None:
        owner = self._owner
        return owner[x] if x < len(owner) else None

    @property
    def owners(self) -> list[tuple[LazyRepeat, int] | None]:
        """The list itself, for the C paste that appends a copy's owners."""
        return self._owner

    def __bool__(self) -> bool:
        return bool(self._owner)


def native_paste_enabled() -> bool:
    """Whether fragment copies are pasted in C (``FORMCAST_PURE_PYTHON=1`` turns it off)."""
    return not pure_python()


def _too_large() -> GrammarError:
    return GrammarError(
        f"grammar is too large to compile: more than {MAX_NFA_STATES} automaton states "
        "(large bounded repetitions multiply; try smaller bounds)"
    )


def _paste_edges(nfa: NFA, edges: list, entry: int, exit_offset: int) -> None:
    """Append a copy of snapshotted states (``entry`` is the first, already allocated and the
    last state so far; ``exit_offset`` is the exit's place in the snapshot). Edges are
    relative, so the copy shares the snapshot's (frozen) containers (``add_edge`` replaces
    the tuple of the one state it adds to), but for its exit's epsilon edges: it has none
    (they lead on to where the fragment's first use went)."""
    if entry != len(nfa.eps) - 1:
        raise AssertionError("a fragment is pasted right after its entry state")
    if len(nfa.eps) + len(edges) > MAX_NFA_STATES:
        raise _too_large()
    if _determinise is not None and nfa.native_paste:
        _determinise.paste(nfa.eps, nfa.byte_edges, nfa.call_edges, edges, exit_offset)
        return
    del nfa.eps[entry], nfa.byte_edges[entry], nfa.call_edges[entry]
    for i, (eps, byte_edges, call_edges) in enumerate(edges):
        nfa.eps.append(() if i == exit_offset else eps)
        nfa.byte_edges.append(byte_edges)
        nfa.call_edges.append(call_edges)


def _compact_rows(nfa: NFA, first: int, stop: int,
                  exit_: int) -> tuple[list[list[tuple[int, int, int]]], list[bool]] | None:
    """The subset construction of the byte-only fragment ``[first, stop)``: per DFA state its
    edges ``(lo, hi, target - state)`` and whether it holds ``exit_``; None when it is not
    smaller than the fragment. (``_nfa_build.compact`` is the same in C.)"""
    memo: dict[int, frozenset[int]] = {}

    def closure(x: int) -> frozenset[int]:
        got = memo.get(x)
        if got is None:
            seen = {x}
            work = [x]
            while work:
                y = work.pop()
                for d in nfa.eps[y]:
                    if y + d not in seen:
                        seen.add(y + d)
                        work.append(y + d)
            got = memo[x] = frozenset(seen)
        return got

    ids: dict[frozenset[int], int] = {}
    order: list[frozenset[int]] = []
    rows: list[list[tuple[int, int, int]]] = []

    def intern(states: frozenset[int]) -> int:
        got = ids.get(states)
        if got is None:
            got = ids[states] = len(order)
            order.append(states)
        return got

    intern(closure(first))
    i = 0
    while i < len(order):
        edges = [(lo, hi, x + d) for x in order[i] for lo, hi, d in nfa.byte_edges[x]]
        row: list[tuple[int, int, int]] = []
        if edges:
            points = sorted({lo for lo, _, _ in edges} | {hi + 1 for _, hi, _ in edges})
            for a, b in zip(points, points[1:], strict=False):
                targets = frozenset().union(*(closure(t) for lo, hi, t in edges
                                              if lo <= a and b - 1 <= hi))
                if targets:
                    target = intern(targets)
                    if row and row[-1][1] == a - 1 and row[-1][2] == target:
                        row[-1] = (row[-1][0], b - 1, target)
                    else:
                        row.append((a, b - 1, target))
        rows.append(row)
        i += 1
        if len(order) >= stop - first:
            return None
    return [[(lo, hi, t - k) for lo, hi, t in row] for k, row in enumerate(rows)], \
        [exit_ in states for states in order]


def _frozen_range(nfa: NFA, first: int, stop: int, exit_: int) -> list[tuple]:
    """The states ``[first, stop)`` as ``(eps, byte edges, call edges)`` snapshots (the exit
    without epsilon edges), freezing their containers to tuples in place: copies share them,
    and a later edge of one state replaces that state's tuple (``add_edge``)."""
    if _nfa_build is not None and nfa.native_paste:
        return _nfa_build.frozen_range(nfa.eps, nfa.byte_edges, nfa.call_edges, first, stop,
                                       exit_)
    out = []
    for x in range(first, stop):
        parts = (nfa.eps[x], nfa.byte_edges[x], nfa.call_edges[x])
        frozen = tuple(p if type(p) is tuple else tuple(p) for p in parts)
        nfa.eps[x], nfa.byte_edges[x], nfa.call_edges[x] = frozen
        out.append(((), *frozen[1:]) if x == exit_ else frozen)
    return out


class LazyCopy:
    """A further use of an inlined rule, pasted when the DFA construction first reaches it.

    A JSON Schema puts the whitespace rule (27 NFA states) between every two tokens: four
    gaps a member, 23-57% of a schema's NFA states, each an eager copy. A use becomes a stub
    state instead, registered in ``lazy_exits`` with the state it goes on to; ``successors``
    pastes the fragment there the first time the stub is reached (a generation reaches only
    the gaps it passes), and reuses that paste for another stub with the same continuation.
    Only fragments of plain bytes and stubs qualify: no rule calls (FOLLOW sets are computed
    before any lazy paste, so a pasted call site would be missed), no lazy repetitions inside,
    and nothing that matches nothing (every state of the fragment reaches its exit, so a
    paste is live wherever its stub is)."""

    __slots__ = ("_nfa", "first", "exit_offset", "size", "stubs", "live_list", "_entries")

    def __init__(self, nfa: NFA, first: int, exit_: int, stop: int,
                 stubs: list[tuple[int, LazyCopy, int]]) -> None:
        self._nfa = weakref.ref(nfa)  # the NFA holds this record: no cycle
        self.first = first
        self.exit_offset = exit_ - first
        self.size = stop - first
        # Stubs inside the fragment (a party object's whitespace gaps), relative to its
        # first state: (stub, its fragment, its continuation); each paste registers its own.
        self.stubs = stubs
        self.live_list: list[bool] | None = None  # the automaton's liveness, grown by pastes
        self._entries: dict[int, int] = {}  # continuation -> the paste going on to it

    def continuation(self, done: int) -> int:
        """Where a stub registered with ``done`` goes on to after the fragment."""
        return done

    def successors(self, done: int) -> list[int]:
        """The first state of the fragment's copy that goes on to state ``done``."""
        got = self._entries.get(done)
        if got is not None:
            return [got]
        nfa = self._nfa()
        if nfa is None:
            raise ReferenceError("the NFA of a lazy copy is gone")
        first, stop = self.first, self.first + self.size
        exit_ = first + self.exit_offset
        entry = nfa.new_state()
        if len(nfa.eps) + self.size > MAX_NFA_STATES:
            raise _too_large()
        if _determinise is not None and nfa.native_paste:
            _determinise.paste_range(nfa.eps, nfa.byte_edges, nfa.call_edges, first, stop,
                                     exit_)
        else:
            _paste_edges(nfa, _frozen_range(nfa, first, stop, exit_), entry, self.exit_offset)
        copy_exit = entry + self.exit_offset
        # While masks run: the C version leaves the list it may make out of the collector.
        (_nfa_build.add_edge if _nfa_build is not None and nfa.native_paste else add_edge)(
            nfa.eps, copy_exit, done - copy_exit)
        for stub, record, to in self.stubs:
            nfa.lazy_exits[entry + stub] = (record, entry + to)
        if self.live_list is not None:
            # Every state of the fragment reaches its exit, and the stub is entered only
            # when its continuation is live.
            self.live_list.extend(repeat(True, self.size))
        self._entries[done] = entry
        return [entry]


class LazyRepeat:
    """``item{min,max}`` with a large ``max``: one copy is built, the others when first needed.

    ``x{0,400}`` would otherwise be 400 copies of ``x``'s automaton at compile time, although
    a generation visits a handful. Copy ``i`` ends in an exit state; what follows it (copy
    ``i+1``, and the repetition's end once ``min`` copies are done) is produced by
    ``successors`` when the DFA construction first steps past that exit. Liveness of every
    copy equals that of the first, computed once with the first exit leading to the end.
    """

    def __init__(self, nfa: NFA, first: int, exit_: int, edges: list, copies: int,
                 minimum: int, end: int, inner: list[tuple[LazyRepeat, int]],
                 template: LazyRepeat | None = None,
                 item_bounds: tuple[int, bool] | None = None) -> None:
        # item_bounds: (min_bytes, nullable) when known (a precomputed fragment)
        # Weakly: the NFA holds this record (lazy_exits, copy_of), and a strong reference
        # back made every compiled NFA with a lazy repetition a reference cycle, thousands
        # of edge containers that only the cyclic collector could free.
        self._nfa = weakref.ref(nfa)
        self.first = first
        self.exit_offset = exit_ - first
        # Snapshot of the first copy's edges (relative, so the same for every copy): a shifted
        # clone shares its template's (``shifted``), and every copy shares its containers.
        self.edges = edges
        self.copies = copies
        self.minimum = minimum
        self.end = end
        self.inner = inner  # lazy repetitions inside the first copy: (record, its exit offset)
        self.live: list[bool] | None = None  # liveness of the first copy's states
        # The repetition this one is a shifted copy of (itself for an original), and the copy
        # of the enclosing repetition it lives in: what Automaton.copy_shape compares.
        # (None for an original: a reference to itself would make every record a cycle)
        self._template = template.template if template is not None else None
        self._parent: tuple[weakref.ref[LazyRepeat], int] | None = None
        for record, _ in inner:
            if record.parent is None:  # the innermost enclosing repetition is the parent
                record.parent = (self, 0)
        if template is not None:
            self.nullable = template.nullable
            self.min_bytes = template.min_bytes
        elif item_bounds is not None:
            self.min_bytes, self.nullable = item_bounds
        else:
            self.min_bytes = self._item_min_bytes()
            # A lower bound above zero leaves no path free of bytes: no search needed.
            self.nullable = self.min_bytes == 0 and self._item_nullable()
        self._register(first, 0)
        self.live_list: list[bool] | None = None  # the automaton's liveness, grown by copies
        self._entries: dict[int, int] = {0: first}

    @property
    def parent(self) -> tuple[LazyRepeat, int] | None:
        """The innermost enclosing repetition and the copy of it this one lies in (held
        weakly: the enclosing record holds this one in ``inner``; the NFA holds both)."""
        if self._parent is None:
            return None
        outer = self._parent[0]()
        if outer is None:
            raise ReferenceError("the enclosing lazy repetition is gone")
        return outer, self._parent[1]

    @parent.setter
    def parent(self, value: tuple[LazyRepeat, int] | None) -> None:
        self._parent = None if value is None else (weakref.ref(value[0]), value[1])

    @property
    def template(self) -> LazyRepeat:
        return self if self._template is None else self._template

    @property
    def nfa(self) -> NFA:
        nfa = self._nfa()
        if nfa is None:
            raise ReferenceError("the NFA of a lazy repetition is gone")
        return nfa

    def _item_nullable(self) -> bool:
        """Whether one copy can be crossed without a byte (then copies are not a horizon)."""
        exit_ = self.first + self.exit_offset
        seen = {self.first}
        work = [self.first]
        while work:
            x = work.pop()
            if x == exit_:
                return True
            for d in self.edges[x - self.first][0]:
                y = x + d
                if y not in seen and self.first <= y < self.first + len(self.edges):
                    seen.add(y)
                    work.append(y)
        return False

    def _item_min_bytes(self) -> int:
        """The fewest bytes one copy can take (rule calls counted as 0, so a lower bound)."""
        if _nfa_build is not None and self.nfa.native_paste:
            exits = {r.first + off: r for r, off in self.inner}
            inner = [(x, r.end, (max(r.minimum, 1) - 1) * r.min_bytes) for x, r in exits.items()]
            return _nfa_build.min_bytes(self.edges, self.first, self.exit_offset, inner)
        first = self.first
        exit_ = first + self.exit_offset
        stop = first + len(self.edges)
        inner_exits = {r.first + off: r for r, off in self.inner}
        best = {first: 0}
        work = [(0, first)]
        while work:
            cost, x = heapq.heappop(work)
            if x == exit_:
                return cost
            if cost > best.get(x, cost):
                continue
            eps, byte_edges, call_edges = self.edges[x - first]
            steps = [(x + d, 0) for d in eps] + [(x + d, 1) for _, _, d in byte_edges]
            steps += [(x + d, 0) for _, d in call_edges]
            record = inner_exits.get(x)
            if record is not None:  # past the inner repetition's first copy
                more = max(record.minimum, 1) - 1
                steps.append((record.end, more * record.min_bytes))
            for y, step in steps:
                if first <= y < stop and cost + step < best.get(y, 1 << 62):
                    best[y] = cost + step
                    heapq.heappush(work, (cost + step, y))
        return 0  # exit not found in the snapshot: claim nothing

    def _register(self, entry: int, index: int) -> None:
        # One shared (record, copy) value for the whole range, set in C loops: a copy of a
        # large item registers hundreds of states (the offset is the state minus the entry).
        self.nfa.copy_of.register(entry, entry + len(self.edges), (self, index))

    def continuation(self, done: int) -> int:
        """Where the repetition goes on to once it is done (``done`` is a copy count)."""
        return self.end

    def successors(self, done: int) -> list[int]:
        """States reached by epsilon from the exit of copy ``done - 1``."""
        out = []
        if done < self.copies:
            out.append(self._entry(done))
        if done >= self.minimum:
            out.append(self.end)
        return out

    def entry_of(self, index: int) -> int:
        """The first state of copy ``index`` (built already)."""
        return self._entries[index]

    def _entry(self, index: int) -> int:
        got = self._entries.get(index)
        if got is not None:
            return got
        nfa = self.nfa
        if _determinise is not None and nfa.native_paste:
            # The copy, its owners and its liveness in one C call (a copy is made for each
            # position a long token passes inside a maxLength string).
            if len(nfa.eps) + len(self.edges) > MAX_NFA_STATES:
                raise _too_large()
            entry = _determinise.paste_copy(
                nfa.eps, nfa.byte_edges, nfa.call_edges, self.edges, self.exit_offset,
                nfa.copy_of.owners, (self, index),
                self.live_list if self.live is not None else None, self.live)
        else:
            entry = nfa.new_state()
            _paste_edges(nfa, self.edges, entry, self.exit_offset)
            self._register(entry, index)
            if self.live is not None:
                self.live_list.extend(self.live)
        delta = entry - self.first
        for record, offset in self.inner:
            clone = record.shifted(delta)
            if record.parent is not None and record.parent[0] is self:
                clone.parent = (self, index)
            nfa.lazy_exits[record.first + offset + delta] = (clone, 1)
        nfa.lazy_exits[entry + self.exit_offset] = (self, index + 1)
        self._entries[index] = entry
        return entry

    def shifted(self, delta: int) -> LazyRepeat:
        """The same repetition inside a copy of an enclosing one, ``delta`` states later (it
        shares this one's edge snapshot: a copy of an array item used to copy every edge of
        every repetition inside it, in Python, 60-70 us a pasted item)."""
        clone = LazyRepeat(self.nfa, self.first + delta, self.first + self.exit_offset + delta,
                           self.edges, self.copies, self.minimum, self.end + delta,
                           [(r.shifted(delta), off) for r, off in self.inner],
                           template=self.template)
        clone.live = self.live
        clone.live_list = self.live_list
        return clone

    def bind_liveness(self, live: list[bool]) -> None:
        """Record the first copy's liveness; later copies append theirs to ``live``."""
        self.live = live[self.first: self.first + len(self.edges)]
        self.live_list = live
        for record, _ in self.inner:
            record.bind_liveness(live)


# ----------------------------------------------------------------------------- call rules


def _separated_loop(items: tuple[Expr, ...]) -> tuple[int, int] | None:
    """``(at, k)`` when ``items[at]`` is ``(S X)*`` with S not empty and X the ``k`` items
    right before it (``X ("," X)*``, the shape of every JSON list), longest X first; None
    otherwise."""
    for at in range(1, len(items)):
        rep = items[at]
        if not (isinstance(rep, Repeat) and rep.min == 0 and rep.max is None
                and isinstance(rep.item, Seq)):
            continue
        body = rep.item.items
        for k in range(min(at, len(body) - 1), 0, -1):
            if body[-k:] == items[at - k:at]:
                return at, k
    return None


def _rule_refs(rules: Mapping[str, Expr]) -> dict[str, list[str]]:
    """Each rule's references, each as often as it makes it: one walk of every rule body,
    shared by the reference graph and the reference counts (a walk of a 14-way anyOf's
    rules is ~50 us)."""
    if _nfa_build is not None and native_paste_enabled():
        return _nfa_build.rule_refs(rules)
    return {name: list(iter_refs(body)) for name, body in rules.items()}


def _reference_counts(rules: Mapping[str, Expr],
                      refs: Mapping[str, list[str]] | None = None) -> dict[str, int]:
    """How many times each rule is referenced in all rule bodies together (``refs``: the
    rules' references, from ``_rule_refs``, when known already)."""
    counts: dict[str, int] = {}
    if refs is not None:
        for names in refs.values():
            for name in names:
                counts[name] = counts.get(name, 0) + 1
        return counts
    if _nfa_build is not None and native_paste_enabled():
        for body in rules.values():
            for name in _nfa_build.ref_names(body):
                counts[name] = counts.get(name, 0) + 1
        return counts
    for body in rules.values():
        stack = [body]
        while stack:
            e = stack.pop()
            if isinstance(e, Ref):
                counts[e.name] = counts.get(e.name, 0) + 1
            elif isinstance(e, Seq | Choice):
                stack.extend(e.items)
            elif isinstance(e, Repeat):
                stack.append(e.item)
    return counts


def _reference_graph(rules: Mapping[str, Expr],
                     refs: Mapping[str, list[str]] | None = None) -> dict[str, set[str]]:
    """Each rule's referenced rules; an undefined one is a GrammarError that names it."""
    if refs is None:
        refs = _rule_refs(rules)
    graph = {name: set(names) for name, names in refs.items()}
    for name, out in graph.items():
        # Grammar() checks this unless a front end vouched for its rules: a wrong one is
        # named here rather than failing as a KeyError inside the builder.
        for target in out:
            if target not in graph:
                raise GrammarError(f"rule {name!r} refers to undefined rule {target!r}")
    return graph


def _rule_graph_calls(rules: Mapping[str, Expr], refs: dict[str, list[str]],
                      start: str) -> tuple[bool, set[str]]:
    """``(acyclic, call rules)``: whether no rule reaches itself, and the rules kept as calls
    so that no other one does (the start rule among them). In C when built: in Python the
    graph walks were ~65 us of a small recursive schema's first compile."""
    if _nfa_build is not None and native_paste_enabled():
        got = _nfa_build.call_rules(refs, start)
        if got is not None:
            return got
        # else a reference to no rule: the Python path names it
    graph = _reference_graph(rules, refs)
    if not _on_cycles_or_before(graph):
        return True, {start}
    return False, _call_rules_of(graph, start)


def _call_rules_of(graph: dict[str, set[str]], start: str) -> set[str]:
    calls = {start}
    while True:
        sccs = _cyclic_sccs({n: {m for m in out if m not in calls} for n, out in graph.items()
                             if n not in calls})
        if not sccs:
            return calls
        for scc in sccs:
            # Cut the member referenced most often from inside its cycle.
            best = max(sorted(scc), key=lambda n: sum(n in graph[m] for m in scc))
            calls.add(best)


def _cyclic_sccs(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components that contain a cycle (Tarjan, iterative)."""
    graph = _on_cycles_or_before(graph)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.add(member)
                    if member == node:
                        break
                if len(comp) > 1 or node in graph[node]:
                    result.append(comp)
    return result


def _on_cycles_or_before(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` without the nodes from which no cycle can be reached (peeled off from the
    sinks up): most schemas' rule graphs are acyclic and then nothing is left for Tarjan,
    whose sorting and bookkeeping in Python cost more than the peeling."""
    out_degree = {}
    callers: dict[str, list[str]] = {}
    sinks = []
    for node, out in graph.items():
        degree = 0
        for nxt in out:
            if nxt in graph:
                degree += 1
                callers.setdefault(nxt, []).append(node)
        out_degree[node] = degree
        if not degree:
            sinks.append(node)
    if not sinks:
        return graph
    gone = set()
    while sinks:
        node = sinks.pop()
        gone.add(node)
        for caller in callers.get(node, ()):
            out_degree[caller] -= 1
            if not out_degree[caller]:
                sinks.append(caller)
    return {node: out for node, out in graph.items() if node not in gone}


# ----------------------------------------------------------------------------- NFA building


class _Builder:
    def __init__(self, rules: Mapping[str, Expr], call_rules: set[str],
                 refs: Mapping[str, list[str]] | None = None, precomputed: bool = True) -> None:
        self.rules = rules
        self.precomputed = precomputed  # paste fragments.py's fragments (False: build them)
        self._refs = refs  # each rule's references (_rule_refs), when the caller has them
        self.call_rules = set(call_rules)
        self.nfa = NFA()
        self._size_memo: dict[str, int] = {}
        self._utf8_memo: dict[CharSet, list[list[tuple[int, int]]]] = {}
        # the C builder's memo of the same by identity: id -> (char set, paths)
        self._utf8_ids: dict[int, tuple[CharSet, list[list[tuple[int, int]]]]] = {}
        self.lazy_repeats: list[LazyRepeat] = []
        self.lazy_copies: list[LazyCopy] = []
        # Above zero while a lazily repeated item is built: its copies are pasted from a
        # snapshot (or compacted), which holds no stubs, so rules inside are copied eagerly.
        self._stub_block = 0
        self._lazy_memo: dict[tuple[int, int], list[tuple[int, LazyRepeat, int]]] = {}
        # inlined rule -> its first fragment (first, exit, stop)
        self._inlined: dict[str, tuple] = {}
        # Set when something that matches nothing was built: only then can NFA states be
        # dead (unable to reach their rule's end), and liveness must be computed.
        self.may_die = False
        self._uses: dict[str, int] | None = None  # references per rule, counted when needed
        if _nfa_build is not None and self.nfa.native_paste:
            # The plain nodes in C (see _nfa_build.c); it calls _build_py for the rest.
            self._build = partial(_nfa_build.build, self,  # type: ignore[method-assign]
                                  (MAX_NFA_STATES, BYTE_CHAIN_MAX, LAZY_REPEAT_MIN,
                                   INLINE_LIMIT, LAZY_COPY_MIN))
            self._lazy_copy_type = LazyCopy  # what the C builder records a first use with
            self._expr_size = partial(_nfa_build.expr_size, self,  # type: ignore[method-assign]
                                      LAZY_REPEAT_MIN)

    def _utf8_paths(self, e: CharSet) -> list[list[tuple[int, int]]]:
        got = self._utf8_memo.get(e)
        if got is None and _nfa_build is not None and self.nfa.native_paste:
            got = self._utf8_memo[e] = _nfa_build.utf8_paths(e.ranges, e.negated)
        if got is None:
            got = [seq for lo, hi in e.codepoint_ranges() for seq in utf8_byte_sequences(lo, hi)]
            self._utf8_memo[e] = got
        return got

    def build_rule(self, name: str) -> tuple[int, int]:
        start, end = self.nfa.new_state(), self.nfa.new_state()
        self._build(self.rules[name], start, end, (name,))
        return start, end

    def _inline_size(self, name: str, path: tuple[str, ...]) -> int:
        if name in self._size_memo:
            return self._size_memo[name]
        size = self._expr_size(self.rules[name], path + (name,))
        self._size_memo[name] = size
        return size

    def _expr_size(self, e: Expr, path: tuple[str, ...]) -> int:
        if isinstance(e, Literal):
            return len(e.data) + 1
        if isinstance(e, ByteSet | CharSet):
            return 4
        if isinstance(e, Seq | Choice):
            return 2 + sum(self._expr_size(i, path) for i in e.items)
        if isinstance(e, Repeat):
            copies = max(e.min, 1) if e.max is None else e.max
            if e.max is not None and e.max >= LAZY_REPEAT_MIN:
                copies = 2  # built lazily: the first copy now, the others on demand
            return 2 + copies * self._expr_size(e.item, path)
        if isinstance(e, Ref):
            if e.name in self.call_rules or e.name in path:
                return 2
            return self._inline_size(e.name, path)
        raise GrammarError(f"unknown IR node {e!r}")

    def _build(self, e: Expr, start: int, end: int, path: tuple[str, ...]) -> None:
        """The automaton of ``e`` from state ``start`` to state ``end``."""
        self._build_py(e, start, end, path)

    def _build_py(self, e: Expr, start: int, end: int, path: tuple[str, ...]) -> None:
        nfa = self.nfa
        if isinstance(e, Literal):
            self._build_literal(e.data, start, end)
        elif isinstance(e, ByteSet):
            self.may_die |= not e.ranges
            for lo, hi in e.ranges:
                add_edge(nfa.byte_edges, start, (lo, hi, end - start))
        elif isinstance(e, CharSet):
            paths = self._utf8_paths(e)
            self.may_die |= not paths
            # Paths share the states of equal remaining byte ranges: after E0 A0 and after
            # E1 80 one continuation byte [80-BF] is left, so that is one state, not two.
            # Fewer NFA states, and fewer DFA states in every position of a counted string.
            tails: dict[tuple[tuple[int, int], ...], int] = {}
            for byte_ranges in paths:
                cur = start
                for i, (blo, bhi) in enumerate(byte_ranges):
                    rest = tuple(byte_ranges[i + 1:])
                    if not rest:
                        add_edge(nfa.byte_edges, cur, (blo, bhi, end - cur))
                        break
                    nxt = tails.get(rest)
                    if nxt is not None:  # the rest of this path is built already
                        add_edge(nfa.byte_edges, cur, (blo, bhi, nxt - cur))
                        break
                    nxt = tails[rest] = nfa.new_state()
                    add_edge(nfa.byte_edges, cur, (blo, bhi, nxt - cur))
                    cur = nxt
        elif isinstance(e, Seq):
            if not e.items:
                add_edge(nfa.eps, start, end - start)
                return
            loop = _separated_loop(e.items)
            if loop is not None:
                self._build_separated(e.items, *loop, start, end, path)
                return
            self._build_chain(e.items, start, end, path)
        elif isinstance(e, Choice):
            self.may_die |= not e.items
            literals = [item.data for item in e.items if isinstance(item, Literal)]
            if len(literals) > 1:
                self._build_literal_trie(literals, start, end)
            for item in e.items:
                if len(literals) > 1 and isinstance(item, Literal):
                    continue
                s = nfa.new_state()
                add_edge(nfa.eps, start, s - start)
                self._build(item, s, end, path)
        elif isinstance(e, Repeat):
            self._build_repeat(e, start, end, path)
        elif isinstance(e, Ref):
            self._build_ref(e.name, start, end, path)
        else:
            raise GrammarError(f"unknown IR node {e!r}")

    def _build_chain(self, items: tuple[Expr, ...], start: int, end: int,
                     path: tuple[str, ...]) -> None:
        """The items one after another from ``start`` to ``end`` (none: an epsilon)."""
        nfa = self.nfa
        if not items:
            add_edge(nfa.eps, start, end - start)
            return
        cur = start
        for i, item in enumerate(items):
            nxt = end if i == len(items) - 1 else nfa.new_state()
            self._build(item, cur, nxt, path)
            cur = nxt

    def _build_separated(self, items: tuple[Expr, ...], at: int, k: int, start: int, end: int,
                         path: tuple[str, ...]) -> None:
        """``items``, where ``items[at]`` is ``(S X)*`` and X is the ``k`` items before it,
        as one copy of X with S leading back to its start. Built as written, a list's first
        element and the later ones are two copies of X: two sets of DFA states for the same
        positions, and each of JSON's `"key": value` masks computed twice (after "{" and
        after ","), with the array item schema compiled twice."""
        nfa = self.nfa
        body = items[at].item.items
        head = nfa.new_state()
        self._build_chain(items[:at - k], start, head, path)
        x_start, x_end = nfa.new_state(), nfa.new_state()
        add_edge(nfa.eps, head, x_start - head)
        self._build_chain(items[at - k:at], x_start, x_end, path)
        self._build_chain(body[:-k], x_end, x_start, path)
        self._build_chain(items[at + 1:], x_end, end, path)

    def _build_literal(self, data: bytes, start: int, end: int) -> None:
        """A chain of one state a byte. Its inner states are made in bulk: nothing is ever
        added to them, so they share one empty tuple for their epsilon and call edges, and
        (edges being relative) one ``((b, b, 1),)`` per byte value for their byte edge."""
        nfa = self.nfa
        n = len(data)
        if n <= 1:
            if n:
                add_edge(nfa.byte_edges, start, (data[0], data[0], end - start))
            else:
                add_edge(nfa.eps, start, end - start)
            return
        first = len(nfa.eps)  # inner states first .. first + n - 2
        if first + n > MAX_NFA_STATES:
            raise _too_large()
        last = first + n - 2
        add_edge(nfa.byte_edges, start, (data[0], data[0], first - start))
        nfa.eps.extend(repeat(_NO_EDGES, n - 1))
        nfa.call_edges.extend(repeat(_NO_EDGES, n - 1))
        nfa.byte_edges.extend([_STEP_ONE[b] for b in data[1:n - 1]])
        nfa.byte_edges.append([(data[n - 1], data[n - 1], end - last)])

    def _build_literal_trie(self, literals: list[bytes], start: int, end: int) -> None:
        """Alternative literals (an ``enum`` of 249 country codes) as one byte trie: shared
        prefixes share states, so every state has one edge per byte and the DFA built over
        it has one NFA state per position instead of one per alternative still alive."""
        nfa = self.nfa
        if _nfa_build is not None and nfa.native_paste:  # the same trie, made in C
            _nfa_build.literal_trie(nfa.eps, nfa.byte_edges, nfa.call_edges,
                                    sorted(set(literals)), start, end, _NO_EDGES)
            if len(nfa.eps) > MAX_NFA_STATES:
                raise _too_large()
            return
        # ``start`` is the root: only this choice adds byte edges to it (its other items
        # start in states of their own). The other nodes are made here, numbered from
        # ``base`` in the order they are met, and added to the NFA in one go.
        base = len(nfa.eps)
        # Only the nodes where a literal ends have epsilon edges; the others share one empty
        # tuple, as in _build_literal.
        new_eps: list = []
        new_bytes: list = []
        children: dict[int, dict[int, int]] = {}
        for data in sorted(set(literals)):
            node = start
            for byte in data:
                kids = children.setdefault(node, {})
                nxt = kids.get(byte)
                if nxt is None:
                    nxt = kids[byte] = base + len(new_eps)
                    new_eps.append(_NO_EDGES)
                    new_bytes.append(())
                    if node >= base:
                        add_edge(new_bytes, node - base, (byte, byte, nxt - node))
                    else:
                        add_edge(nfa.byte_edges, node, (byte, byte, nxt - node))
                node = nxt
            if node >= base:
                if end - node not in new_eps[node - base]:
                    add_edge(new_eps, node - base, end - node)
            elif end - node not in nfa.eps[node]:
                add_edge(nfa.eps, node, end - node)
        if base + len(new_eps) > MAX_NFA_STATES:
            raise _too_large()
        nfa.eps.extend(new_eps)
        nfa.byte_edges.extend(new_bytes)
        nfa.call_edges.extend(repeat(_NO_EDGES, len(new_eps)))

    def _build_repeat(self, e: Repeat, start: int, end: int, path: tuple[str, ...]) -> None:
        nfa = self.nfa
        ranges = self._single_byte_ranges(e.item)
        if ranges is not None and e.max is not None and e.max <= BYTE_CHAIN_MAX:
            self._build_byte_chain(ranges, e.min, e.max, start, end)
            return
        if e.max is not None and e.max >= LAZY_REPEAT_MIN:
            self._build_lazy_repeat(e, start, end, path)
            return
        copies = e.min + (1 if e.max is None else e.max - e.min)
        template = None  # (first state, exit state, stop) of the first copy
        cur = start
        for i in range(copies):
            optional = i >= e.min
            if optional and e.max is not None:
                add_edge(nfa.eps, cur, end - cur)
            entry = nfa.new_state()
            add_edge(nfa.eps, cur, entry - cur)
            if template is None:
                exit_ = nfa.new_state()
                self._build(e.item, entry, exit_, path)
                template = (entry, exit_, len(nfa.eps))
            else:
                # Later copies are the first one again (relative edges: its containers,
                # shared): much cheaper than compiling the item again.
                exit_ = self._copy_range(template[0], template[2], template[1], entry)
            if optional and e.max is None:
                add_edge(nfa.eps, exit_, entry - exit_)  # item* loops on its single optional copy
                add_edge(nfa.eps, entry, end - entry)
                return
            cur = exit_
        add_edge(nfa.eps, cur, end - cur)

    def _single_byte_ranges(self, item: Expr) -> list[tuple[int, int]] | None:
        """The byte ranges of an item that is one byte (``[ \\t]``, ``[0-9]``), else None."""
        if isinstance(item, ByteSet):
            return list(item.ranges) if item.ranges else None
        if isinstance(item, CharSet):
            paths = self._utf8_paths(item)
            if paths and all(len(p) == 1 for p in paths):
                return [p[0] for p in paths]
        return None

    def _build_byte_chain(self, ranges: list[tuple[int, int]], low: int, high: int,
                          start: int, end: int) -> None:
        """``[set]{low,high}`` as a chain of ``high`` byte steps, each state past ``low``
        free to leave: one state a position, no copies and no lazy machinery. JSON's
        whitespace (``[ \\t]{0,20}`` between every two tokens of a schema) is this, and its
        DFA states are made per position while walking space-run tokens (SmolLM2 has them up
        to 64 bytes): cheaper than copies pasted on demand."""
        nfa = self.nfa
        cur = start
        for i in range(high):
            if i >= low:
                add_edge(nfa.eps, cur, end - cur)
            nxt = end if i == high - 1 else nfa.new_state()
            for lo, hi in ranges:
                add_edge(nfa.byte_edges, cur, (lo, hi, nxt - cur))
            cur = nxt
        if high == 0:
            add_edge(nfa.eps, start, end - start)

    def _build_lazy_repeat(self, e: Repeat, start: int, end: int, path: tuple[str, ...]) -> None:
        nfa = self.nfa
        if self.precomputed:
            fragment = precomputed_item(e.item, self.rules, self.call_rules)
            if fragment is not None:
                self._paste_lazy_repeat(e, fragment, start, end)
                return
        first = nfa.new_state()
        add_edge(nfa.eps, start, first - start)
        if e.min == 0:
            add_edge(nfa.eps, start, end - start)
        exit_ = nfa.new_state()
        self._stub_block += 1
        try:
            self._build(e.item, first, exit_, path)
        finally:
            self._stub_block -= 1
        exit_ = self._compact_fragment(first, exit_)
        stop = len(nfa.eps)
        if self._stubs_inside(first, stop):
            raise AssertionError("a lazily repeated item holds a lazy copy's stub")
        edges = _frozen_range(nfa, first, stop, exit_)
        inner = [(rec, x - rec.first) for x, (rec, done) in nfa.lazy_exits.items()
                 if first <= x < stop and done == 1 and first <= rec.first < stop]
        record = LazyRepeat(nfa, first, exit_, edges, e.max, e.min, end, inner)
        for inner_record, _ in inner:  # the innermost repetition owns its states
            inner_record._register(inner_record.first, 0)
        nfa.lazy_exits[exit_] = (record, 1)
        self.lazy_repeats.append(record)

    def _paste_lazy_repeat(self, e: Repeat, fragment: Fragment, start: int, end: int) -> None:
        """``_build_lazy_repeat`` of an item whose first copy is precomputed: the same states
        and record, the fragment's frozen edges pasted instead of built and compacted."""
        nfa = self.nfa
        first = len(nfa.eps)
        states = fragment.states
        if first + len(states) > MAX_NFA_STATES:
            raise _too_large()
        add_edge(nfa.eps, start, first - start)
        if e.min == 0:
            add_edge(nfa.eps, start, end - start)
        nfa.eps.extend([state[0] for state in states])
        nfa.byte_edges.extend([state[1] for state in states])
        nfa.call_edges.extend([state[2] for state in states])
        exit_ = first + fragment.exit_offset
        record = LazyRepeat(nfa, first, exit_, list(states), e.max, e.min, end, [],
                            item_bounds=(fragment.min_bytes, fragment.nullable))
        nfa.lazy_exits[exit_] = (record, 1)
        self.lazy_repeats.append(record)

    def _compact_fragment(self, first: int, exit_: int) -> int:
        """Replace the just-built states ``[first, end of NFA)`` by their determinised form
        when that is smaller; return the (possibly new) exit state.

        A lazily repeated item is copied once per repetition reached, so its size matters:
        a JSON string character with every escape spelled exactly is 54 NFA states but
        37 DFA states (the cold masks of a 380-character string: 37.3 ms uncompacted,
        32.4 ms compacted). Only plain byte fragments qualify (no rule calls, no inner lazy
        repetitions); ``first`` keeps its id, the exit becomes the last state.
        """
        nfa = self.nfa
        stop = len(nfa.eps)
        if stop - first > COMPACT_MAX_STATES or self._stubs_inside(first, stop) or \
                any(first <= x < stop for x in nfa.lazy_exits):
            return exit_
        if _nfa_build is not None and nfa.native_paste:
            # Rule calls checked, the DFA built and put in place in one C call.
            got_exit = _nfa_build.compact_in_place(nfa.eps, nfa.byte_edges, nfa.call_edges,
                                                   first, exit_, MAX_NFA_STATES)
            if got_exit is None:
                return exit_  # not smaller: keep the NFA as built
        else:
            got_exit = self._compact_in_python(first, stop, exit_)
            if got_exit is None:
                return exit_
        # Fragments remembered inside the replaced states are gone: forget them, or a later
        # use of the same rule would copy whatever states take their numbers.
        if any(v[0] >= first for v in self._inlined.values()):
            self._inlined = {k: v for k, v in self._inlined.items() if v[0] < first}
        if any(k[0] >= first for k in self._lazy_memo):
            self._lazy_memo = {k: v for k, v in self._lazy_memo.items() if k[0] < first}
        return got_exit

    def _compact_in_python(self, first: int, stop: int, exit_: int) -> int | None:
        """``_compact_fragment``'s work without the C extension: the new exit, or None."""
        nfa = self.nfa
        if any(nfa.call_edges[x] for x in range(first, stop)):
            return None
        got = _compact_rows(nfa, first, stop, exit_)
        if got is None:
            return None
        rows, exits = got
        n = len(rows)
        if first + n + 1 > MAX_NFA_STATES:
            raise _too_large()
        del nfa.eps[first:], nfa.byte_edges[first:], nfa.call_edges[first:]
        nfa.eps.extend([[n - k] if exits[k] else () for k in range(n)])
        nfa.eps.append(())
        nfa.byte_edges.extend(rows)
        nfa.byte_edges.append(())
        nfa.call_edges.extend(repeat((), n + 1))
        return first + n

    def _copy_range(self, first: int, stop: int, exit_: int, entry: int) -> int:
        """Copy the NFA's own states ``[first, stop)`` (an inlined rule's first fragment, a
        repetition's first copy) so that ``first`` lands on ``entry`` (a state just
        allocated); return where ``exit_`` lands. Edges are relative: the copy shares the
        fragment's edge containers, frozen in place, except at its first state and its exit
        (whose epsilon edges are left out: they go on to the first use's continuation)."""
        nfa = self.nfa
        delta = entry - first
        if entry != len(nfa.eps) - 1:
            raise AssertionError("a fragment is pasted right after its entry state")
        if len(nfa.eps) + stop - first > MAX_NFA_STATES:
            raise _too_large()
        if _determinise is not None and nfa.native_paste:
            _determinise.paste_range(nfa.eps, nfa.byte_edges, nfa.call_edges, first, stop,
                                     exit_)
        else:
            _paste_edges(nfa, _frozen_range(nfa, first, stop, exit_), entry, exit_ - first)
        self._clone_lazy_inside(first, stop, delta)
        self._clone_stubs(first, stop, delta)
        return exit_ + delta

    def _clone_stubs(self, first: int, stop: int, delta: int) -> None:
        """Register, for a copy ``delta`` states on, the stubs inside ``[first, stop)``
        (their continuations lie inside too: a stub goes on within its fragment)."""
        nfa = self.nfa
        stubs = nfa.stubs
        lo, hi = bisect_left(stubs, first), bisect_left(stubs, stop)
        for x in stubs[lo:hi]:
            record, end = nfa.lazy_copies[x]
            if not self._stub_block:
                stubs.append(x + delta)
                nfa.lazy_copies[x + delta] = (record, end + delta)
                continue
            # Inside a lazily repeated item (pasted later from a snapshot, which keeps no
            # stubs): the copy's stub leads to a copy of the fragment pasted now.
            entry = nfa.new_state()
            nfa.eps[x + delta] = [entry - (x + delta)]
            exit_ = self._copy_range(record.first, record.first + record.size,
                                     record.first + record.exit_offset, entry)
            add_edge(nfa.eps, exit_, end + delta - exit_)

    def _clone_lazy_inside(self, first: int, stop: int, delta: int) -> None:
        """Register, for a copy ``delta`` states on, the lazy repetitions inside ``[first,
        stop)``: each copy gets its own, going on to its own states."""
        nfa = self.nfa
        for x, record, done in self._lazy_inside(first, stop):
            clone = record.shifted(delta)
            nfa.lazy_exits[x + delta] = (clone, done)
            self.lazy_repeats.append(clone)

    def _lazy_inside(self, first: int, stop: int) -> list[tuple[int, LazyRepeat, int]]:
        """Lazy repetitions registered inside the states ``[first, stop)`` (memoised: a
        template is copied many times)."""
        key = (first, stop)
        got = self._lazy_memo.get(key)
        if got is None:
            got = [(x, rec, done) for x, (rec, done) in self.nfa.lazy_exits.items()
                   if first <= x < stop and first <= rec.first < stop]
            self._lazy_memo[key] = got
        return got

    def _build_ref(self, name: str, start: int, end: int, path: tuple[str, ...]) -> None:
        if name not in self.call_rules and name not in path and \
                self._inline_size(name, path) > INLINE_LIMIT:
            if self._uses is None:
                self._uses = _reference_counts(self.rules, self._refs)
            if self._uses.get(name, 0) > 2 or self._inline_size(name, path) > TWICE_INLINE_LIMIT:
                self.call_rules.add(name)
        if name in self.call_rules or name in path:
            self.call_rules.add(name)
            add_edge(self.nfa.call_edges, start, (name, end - start))  # type: ignore[arg-type]
            self.nfa.call_sites.append(start)
            return
        nfa = self.nfa
        built = self._inlined.get(name)
        if built is not None and len(built) == 4 and not self._stub_block:
            self._add_stub(start, built[3], end)
            return
        entry = nfa.new_state()
        add_edge(nfa.eps, start, entry - start)
        if built is None:
            exit_ = nfa.new_state()
            dying = self.may_die
            self._build(self.rules[name], entry, exit_, path + (name,))
            stop = len(nfa.eps)
            if not self._stub_block and not (self.may_die and not dying) and \
                    self._plain_fragment(entry, stop):
                record = LazyCopy(nfa, entry, exit_, stop, self._stubs_in(entry, stop))
                self.lazy_copies.append(record)
                self._inlined[name] = (entry, exit_, stop, record)
            else:
                self._inlined[name] = (entry, exit_, stop)
        else:
            # Inlined before: copy that fragment (about 5x cheaper than building it again).
            first, old_exit, stop = built[:3]
            exit_ = self._copy_range(first, stop, old_exit, entry)
        add_edge(nfa.eps, exit_, end - exit_)

    def _plain_fragment(self, first: int, stop: int) -> bool:
        """Whether the fragment ``[first, stop)`` may be copied lazily (see LazyCopy): big
        enough to be worth a stub, with no rule calls or lazy repetitions inside."""
        nfa = self.nfa
        if stop - first < LAZY_COPY_MIN or any(nfa.call_edges[first:stop]):
            return False
        return not any(first <= x < stop for x in nfa.lazy_exits)

    def _stubs_in(self, first: int, stop: int) -> list[tuple[int, LazyCopy, int]]:
        """The stubs inside ``[first, stop)``, relative to ``first`` (see LazyCopy.stubs)."""
        stubs, copies = self.nfa.stubs, self.nfa.lazy_copies
        out = []
        for x in stubs[bisect_left(stubs, first):bisect_left(stubs, stop)]:
            record, end = copies[x]
            out.append((x - first, record, end - first))
        return out

    def _stubs_inside(self, first: int, stop: int) -> bool:
        stubs = self.nfa.stubs
        i = bisect_left(stubs, first)
        return i < len(stubs) and stubs[i] < stop

    def _add_stub(self, start: int, record: LazyCopy, end: int) -> None:
        """A stub state after ``start`` standing for a copy of ``record`` going on to
        ``end``."""
        nfa = self.nfa
        stub = nfa.new_state()
        add_edge(nfa.eps, start, stub - start)
        nfa.stubs.append(stub)
        nfa.lazy_copies[stub] = (record, end)


# ----------------------------------------------------------------------------- liveness


def _derives(e: Expr, productive: set[str]) -> bool:
    """Whether ``e`` derives a string, given the rules known to (a module-level function: a
    nested one calling itself is a reference cycle, left to the collector every compile)."""
    if isinstance(e, Literal):
        return True
    if isinstance(e, ByteSet):
        return bool(e.ranges)
    if isinstance(e, CharSet):
        return bool(e.codepoint_ranges())
    if isinstance(e, Seq):
        return all(_derives(i, productive) for i in e.items)
    if isinstance(e, Choice):
        return any(_derives(i, productive) for i in e.items)
    if isinstance(e, Repeat):
        return e.min == 0 or _derives(e.item, productive)
    if isinstance(e, Ref):
        return e.name in productive
    return False


def _rules_productive(rules: Mapping[str, Expr], names: set[str]) -> bool:
    """Whether every rule in ``names`` derives at least one string (fixpoint over the IR)."""
    if _nfa_build is not None and native_paste_enabled():
        return _nfa_build.rules_productive(rules, names)
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if name in productive:
                continue
            if _derives(body, productive):
                productive.add(name)
                changed = True
    return names <= productive


def _live_nfa_states(nfa: NFA, fragments: dict[str, tuple[int, int]],
                     order: list[str]) -> list[bool]:
    """NFA states from which their rule's end can be reached, through productive calls only.

    A call edge counts only once the called rule is productive (its start is live), so a
    backward search from every rule end settles liveness and productivity together.
    """
    n = len(nfa.eps)
    reverse: list[list[int]] = [[] for _ in range(n)]
    call_reverse: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    for s in range(n):
        for d in nfa.eps[s]:
            reverse[s + d].append(s)
        for _, _, d in nfa.byte_edges[s]:
            reverse[s + d].append(s)
        for name, d in nfa.call_edges[s]:
            call_reverse[s + d].append((name, s))
    for x, (record, done) in nfa.lazy_exits.items():
        # Stand-in for "the remaining copies, then the end" (every copy is alike), or for a
        # lazy copy's fragment, which every state of it crosses.
        reverse[record.continuation(done)].append(x)
    starts = {fragments[name][0]: name for name in order}
    live = [False] * n
    productive: set[str] = set()
    waiting: dict[str, list[int]] = {}
    stack = []

    def mark(s: int) -> None:
        if not live[s]:
            live[s] = True
            stack.append(s)

    for name in order:
        mark(fragments[name][1])
    while stack:
        t = stack.pop()
        name = starts.get(t)
        if name is not None and name not in productive:
            productive.add(name)
            for s in waiting.pop(name, ()):
                mark(s)
        for s in reverse[t]:
            mark(s)
        for callee, s in call_reverse[t]:
            if callee in productive:
                mark(s)
            else:
                waiting.setdefault(callee, []).append(s)
    return live


def build_nfa(grammar: Grammar, *, precomputed: bool = True
              ) -> tuple[NFA, dict[str, tuple[int, int]], list[str], list[bool]]:
    """The NFA of every call rule of ``grammar``: ``(nfa, fragments, order, live)``.
    ``precomputed=False`` builds even the items ``fragments.py`` keeps precomputed.

    ``fragments[name]`` is the rule's (start, end) state pair, ``order`` the call rules with
    the start rule first, ``live[s]`` whether state ``s`` can reach its rule's end.
    """
    rules = grammar.engine_rules
    refs = _rule_refs(rules)
    # No rule reaches itself (most schemas): the start rule is the only call, and every rule
    # derives a string unless the builder met an empty node (may_die).
    acyclic, call_rules = _rule_graph_calls(rules, refs, grammar.start)
    builder = _Builder(rules, call_rules, refs, precomputed)
    order = [grammar.start] + sorted(r for r in call_rules if r != grammar.start)
    fragments = {name: builder.build_rule(name) for name in order}
    # Inlining may have promoted more rules to calls while building: build those too.
    while True:
        missing = [r for r in builder.call_rules if r not in fragments]
        if not missing:
            break
        for name in sorted(missing):
            order.append(name)
            fragments[name] = builder.build_rule(name)
    nfa = builder.nfa
    nfa.lazy_exits.update(nfa.lazy_copies)
    # The builder's C entry points are partials holding the builder: drop them, or the
    # builder is a reference cycle left to the collector after every compile.
    vars(builder).pop("_build", None)
    vars(builder).pop("_expr_size", None)
    if builder.may_die or not (acyclic or _rules_productive(rules, set(order))):
        live = _live_nfa_states(nfa, fragments, order)
    else:
        # Thompson fragments of expressions that all match something: every state can
        # reach its rule's end.
        live = [True] * len(nfa.eps)
    for record in builder.lazy_repeats:
        record.bind_liveness(live)
    for copy in builder.lazy_copies:
        copy.live_list = live
    if _determinise is not None and nfa.native_paste:
        # Edge lists hold ints and tuples only; see ``untrack`` in _determinise.c.
        _determinise.untrack(0, nfa.eps, [live])
        _determinise.untrack(1, nfa.byte_edges, nfa.call_edges)
        _determinise.untrack(2, *(record.edges for record in builder.lazy_repeats))
    return nfa, fragments, order, live


if _nfa_build is not None:
    _nfa_build.setup(Literal, ByteSet, CharSet, Seq, Choice, Repeat, Ref, _STEP_ONE, _NO_EDGES,
                     _too_large)
