"""Deterministic automata over Unicode characters, for the schema features a grammar cannot
write directly: intersections (``pattern`` together with ``maxLength`` or ``format``) and
complements (keys that match *no* ``patternProperties`` pattern and are not a named property).

Regex IR (characters only, no rule references) -> Thompson NFA -> DFA over "atoms" (disjoint
character sets that together cover every Unicode scalar value, so complement is exact) ->
intersect / complement / minimise -> back to IR. Sizes are capped: past the caps
``AutomatonTooLarge`` is raised and the schema compiler reports the keyword instead of
producing a huge grammar.

Automata and expressions are immutable, so the operations are memoised (an LRU per operation):
schemas repeat the same patterns, key sets and formats, and so do compiles.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import wraps
from typing import Final

from formcast.grammar.cache import Memo
from formcast.grammar.ir import MAX_CODEPOINT, Expr, choice, merge_ranges, seq, star
from formcast.grammar.ir_kinds import (
    BYTE_SET,
    CHAR_SET,
    CHOICE,
    EMPTY,
    LITERAL,
    NOTHING,
    REF,
    REPEAT,
    SEQ,
)

Ranges = tuple[tuple[int, int], ...]
SCALARS: Final[Ranges] = ((0, 0xD7FF), (0xE000, MAX_CODEPOINT))

MAX_NFA_STATES: Final = 60_000
MAX_DFA_STATES: Final = 5_000
MAX_ELIMINATION_SIZE: Final = 600
MEMO_SIZE: Final = 256  # results per memoised operation (automata are immutable: compiles share them)
MEMO_MAX_CELLS: Final = 20_000  # larger automata (states x atoms) are not kept: memory stays bounded


class AutomatonTooLarge(Exception):
    """The automaton would exceed the size caps; the caller reports instead of compiling."""


class NotCharacterLevel(Exception):
    """The expression is not a character-level regular expression (rule refs, raw bytes)."""


# ----------------------------------------------------------------------------- memo


def _cells(value: object) -> int:
    return len(value.trans) * len(value.atoms) if isinstance(value, DFA) else 0


def _memoised(fn: Callable) -> Callable:
    """An LRU memo of ``fn`` (pure, on immutable arguments) that keeps only small automata."""
    memo = Memo(MEMO_SIZE)

    @wraps(fn)
    def wrapper(*args: object) -> object:
        got = memo.get(args)
        if got is not None:
            return got
        out = fn(*args)
        if max(_cells(out), *(_cells(a) for a in args)) <= MEMO_MAX_CELLS:
            memo.put(args, out)
        return out

    wrapper.cache_clear = memo.clear  # type: ignore[attr-defined]
    return wrapper


# ----------------------------------------------------------------------------- NFA


class _NFA:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[Ranges, int]]] = []

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise AutomatonTooLarge(f"more than {MAX_NFA_STATES} NFA states")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, e: Expr, a: int, b: int) -> None:
        if isinstance(e, LITERAL):
            try:
                text = e.data.decode("utf-8")
            except UnicodeDecodeError:
                raise NotCharacterLevel(f"literal {e.data!r} is not UTF-8 text") from None
            cur = a
            for i, c in enumerate(text):
                nxt = b if i == len(text) - 1 else self.state()
                self.edges[cur].append((((ord(c), ord(c)),), nxt))
                cur = nxt
            if not text:
                self.eps[a].append(b)
        elif isinstance(e, CHAR_SET):
            self.edges[a].append((e.codepoint_ranges(), b))
        elif isinstance(e, BYTE_SET):
            if any(hi > 0x7F for _, hi in e.ranges):
                raise NotCharacterLevel("byte sets beyond ASCII are not characters")
            self.edges[a].append((merge_ranges(e.ranges), b))
        elif isinstance(e, SEQ):
            cur = a
            for i, item in enumerate(e.items):
                nxt = b if i == len(e.items) - 1 else self.state()
                self.build(item, cur, nxt)
                cur = nxt
            if not e.items:
                self.eps[a].append(b)
        elif isinstance(e, CHOICE):
            for item in e.items:
                self.build(item, a, b)
        elif isinstance(e, REPEAT):
            cur = a
            for _ in range(e.min):
                nxt = self.state()
                self.build(e.item, cur, nxt)
                cur = nxt
            if e.max is None:
                loop_in, loop_out = self.state(), self.state()
                self.eps[cur].append(loop_in)
                self.build(e.item, loop_in, loop_out)
                self.eps[loop_out].append(loop_in)
                self.eps[loop_in].append(b)
            else:
                for _ in range(e.max - e.min):
                    self.eps[cur].append(b)
                    nxt = self.state()
                    self.build(e.item, cur, nxt)
                    cur = nxt
                self.eps[cur].append(b)
        elif isinstance(e, REF):
            raise NotCharacterLevel(f"rule reference {e.name!r}")
        else:
            raise NotCharacterLevel(f"not an IR expression: {e!r}")


def _atoms(label_sets: list[Ranges]) -> tuple[list[Ranges], list[list[int]]]:
    """Split the scalar values into atoms: maximal sets that every label either contains
    entirely or misses entirely. Returns the atoms and, per label, the atoms it contains."""
    points = {0, 0xD800, 0xE000, MAX_CODEPOINT + 1}
    for ranges in label_sets:
        for lo, hi in ranges:
            points.add(lo)
            points.add(hi + 1)
    bounds = sorted(points)
    intervals = [(bounds[i], bounds[i + 1] - 1) for i in range(len(bounds) - 1)
                 if bounds[i] != 0xD800]
    starts = [lo for lo, _ in intervals]
    members: list[set[int]] = [set() for _ in intervals]
    for label, ranges in enumerate(label_sets):
        for lo, hi in ranges:
            i = bisect.bisect_left(starts, lo)
            while i < len(intervals) and intervals[i][1] <= hi:
                members[i].add(label)
                i += 1
    groups: dict[frozenset[int], list[tuple[int, int]]] = {}
    for interval, labels in zip(intervals, members, strict=True):
        groups.setdefault(frozenset(labels), []).append(interval)
    atoms: list[Ranges] = []
    per_label: list[list[int]] = [[] for _ in label_sets]
    for group, ivs in groups.items():
        idx = len(atoms)
        atoms.append(merge_ranges(ivs))
        for label in group:
            per_label[label].append(idx)
    return atoms, per_label


# ----------------------------------------------------------------------------- DFA


@dataclass(frozen=True)
class DFA:
    """A deterministic automaton over character atoms. ``trans[s][a]`` is the next state on
    any character of ``atoms[a]``, or -1 (reject). The atoms cover every scalar value."""

    atoms: tuple[Ranges, ...]
    trans: tuple[tuple[int, ...], ...]
    accept: frozenset[int]
    start: int = 0
    # automata are memo keys (see the caches below): the tables are hashed once
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    # set on the result of minimize(): minimising again would return it unchanged
    _minimal: bool = field(default=False, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        got = getattr(self, "_hash", None)  # unset until the first hash
        if got is None:
            got = hash((self.atoms, self.trans, self.accept, self.start))
            object.__setattr__(self, "_hash", got)
        return got

    @property
    def size(self) -> int:
        return len(self.trans)

    def accepts(self, text: str) -> bool:
        s = self.start
        for c in text:
            a = self._atom_of(ord(c))
            if a < 0:
                return False
            s = self.trans[s][a]
            if s < 0:
                return False
        return s in self.accept

    def _atom_of(self, cp: int) -> int:
        for i, ranges in enumerate(self.atoms):
            for lo, hi in ranges:
                if lo <= cp <= hi:
                    return i
        return -1

    def is_empty(self) -> bool:
        return not (_reachable(self) & self.accept)

    def is_finite(self) -> bool:
        """Whether the language is finite (no cycle among useful states)."""
        d = minimize(self)
        if d.is_empty():
            return True
        color = [0] * d.size
        stack = [(d.start, iter(range(len(d.atoms))))]
        color[d.start] = 1
        while stack:
            s, it = stack[-1]
            for a in it:
                t = d.trans[s][a]
                if t < 0:
                    continue
                if color[t] == 1:
                    return False
                if color[t] == 0:
                    color[t] = 1
                    stack.append((t, iter(range(len(d.atoms)))))
                    break
            else:
                color[s] = 2
                stack.pop()
        return True


@_memoised
def from_expr(expr: Expr) -> DFA:
    """The DFA of a character-level IR expression."""
    nfa = _NFA()
    start, end = nfa.state(), nfa.state()
    nfa.build(expr, start, end)
    labels: list[Ranges] = []
    label_index: dict[Ranges, int] = {}
    for edges in nfa.edges:
        for ranges, _ in edges:
            if ranges not in label_index:
                label_index[ranges] = len(labels)
                labels.append(ranges)
    atoms, per_label = _atoms(labels)
    moves: list[dict[int, list[int]]] = []
    for edges in nfa.edges:
        m: dict[int, list[int]] = {}
        for ranges, target in edges:
            for atom in per_label[label_index[ranges]]:
                m.setdefault(atom, []).append(target)
        moves.append(m)

    closure_memo: dict[int, frozenset[int]] = {}

    def closure(states: Iterable[int]) -> frozenset[int]:
        out: set[int] = set()
        for s0 in states:
            got = closure_memo.get(s0)
            if got is None:
                seen = {s0}
                stack = [s0]
                while stack:
                    s = stack.pop()
                    for t in nfa.eps[s]:
                        if t not in seen:
                            seen.add(t)
                            stack.append(t)
                got = closure_memo[s0] = frozenset(seen)
            out |= got
        return frozenset(out)

    return _determinize(closure([start]), lambda S, a: closure(
        t for s in S for t in moves[s].get(a, ())), lambda S: end in S, atoms)


def _determinize(start: Hashable, step: Callable, accepting: Callable,
                 atoms: list[Ranges]) -> DFA:
    index: dict[Hashable, int] = {start: 0}
    order = [start]
    trans: list[tuple[int, ...]] = []
    i = 0
    while i < len(order):
        S = order[i]
        row = []
        for a in range(len(atoms)):
            T = step(S, a)
            if not T:
                row.append(-1)
                continue
            j = index.get(T)
            if j is None:
                if len(order) >= MAX_DFA_STATES:
                    raise AutomatonTooLarge(f"more than {MAX_DFA_STATES} DFA states")
                j = index[T] = len(order)
                order.append(T)
            row.append(j)
        trans.append(tuple(row))
        i += 1
    accept = frozenset(k for k, S in enumerate(order) if accepting(S))
    return DFA(tuple(atoms), tuple(trans), accept, 0)


def from_step(start: Hashable, step: Callable[[Hashable, str], Hashable | None],
              accepting: Callable[[Hashable], bool], alphabet: str) -> DFA:
    """A DFA over the single characters of ``alphabet`` from a step function on hashable
    states (``None`` = reject). Characters outside the alphabet are rejected."""
    atoms = [((ord(c), ord(c)),) for c in alphabet]
    rest = _subtract(SCALARS, merge_ranges((ord(c), ord(c)) for c in alphabet))
    if rest:
        atoms.append(rest)
    letters = list(alphabet)

    def dstep(S: Hashable, a: int) -> Hashable | None:
        if a >= len(letters):
            return None
        return step(S, letters[a])

    return _determinize(start, dstep, accepting, atoms)


def _subtract(a: Ranges, b: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in a:
        cur = lo
        for c, d in b:
            if d < cur or c > hi:
                continue
            if c > cur:
                out.append((cur, c - 1))
            cur = max(cur, d + 1)
        if cur <= hi:
            out.append((cur, hi))
    return tuple(out)


def _reachable(d: DFA) -> set[int]:
    seen = {d.start}
    stack = [d.start]
    while stack:
        s = stack.pop()
        for t in d.trans[s]:
            if t >= 0 and t not in seen:
                seen.add(t)
                stack.append(t)
    return seen


def _common_atoms(a: DFA, b: DFA) -> tuple[list[Ranges], list[tuple[int, int]]]:
    atoms: list[Ranges] = []
    pairs: list[tuple[int, int]] = []
    for i, ra in enumerate(a.atoms):
        for j, rb in enumerate(b.atoms):
            common = _intersect(ra, rb)
            if common:
                atoms.append(common)
                pairs.append((i, j))
    return atoms, pairs


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for lo, hi in a:
        for c, d in b:
            x, y = max(lo, c), min(hi, d)
            if x <= y:
                out.append((x, y))
    return merge_ranges(out)


@_memoised
def intersect(a: DFA, b: DFA) -> DFA:
    """The DFA of the intersection of two languages."""
    atoms, pairs = _common_atoms(a, b)

    def step(S: tuple[int, int], k: int) -> tuple[int, int] | None:
        i, j = pairs[k]
        x, y = a.trans[S[0]][i], b.trans[S[1]][j]
        return (x, y) if x >= 0 and y >= 0 else None

    return minimize(_determinize((a.start, b.start), step,
                                 lambda S: S[0] in a.accept and S[1] in b.accept, atoms))


@_memoised
def union(a: DFA, b: DFA) -> DFA:
    """The DFA of the union of two languages."""
    atoms, pairs = _common_atoms(a, b)

    def step(S: tuple[int, int], k: int) -> tuple[int, int] | None:
        i, j = pairs[k]
        x = a.trans[S[0]][i] if S[0] >= 0 else -1
        y = b.trans[S[1]][j] if S[1] >= 0 else -1
        return (x, y) if x >= 0 or y >= 0 else None

    return minimize(_determinize((a.start, b.start), step,
                                 lambda S: S[0] in a.accept or S[1] in b.accept, atoms))


@_memoised
def complement(d: DFA) -> DFA:
    """Every string of scalar values that ``d`` rejects."""
    dead = d.size
    trans = [tuple(dead if t < 0 else t for t in row) for row in d.trans]
    trans.append(tuple(dead for _ in d.atoms))
    accept = frozenset(s for s in range(dead + 1) if s not in d.accept)
    return minimize(DFA(d.atoms, tuple(trans), accept, d.start))


def difference(a: DFA, b: DFA) -> DFA:
    return intersect(a, complement(b))


def minimize(d: DFA) -> DFA:
    """Trim (unreachable and dead-end states go) and merge equivalent states and atoms."""
    if getattr(d, "_minimal", False):
        return d  # minimising is idempotent: a result of this function is its own minimum
    out = _minimize(d)
    object.__setattr__(out, "_minimal", True)
    return out


@_memoised
def _minimize(d: DFA) -> DFA:
    reach = _reachable(d)
    # states that can reach an accepting state
    preds: dict[int, set[int]] = {s: set() for s in reach}
    for s in reach:
        for t in d.trans[s]:
            if t >= 0:
                preds[t].add(s)
    live = {s for s in reach if s in d.accept}
    stack = list(live)
    while stack:
        s = stack.pop()
        for p in preds[s]:
            if p not in live:
                live.add(p)
                stack.append(p)
    if d.start not in live:
        return DFA(((SCALARS),), ((-1,),), frozenset(), 0)
    states = sorted(live)
    cls = {s: (1 if s in d.accept else 0) for s in states}
    n_atoms = len(d.atoms)
    while True:
        sigs: dict[tuple, int] = {}
        new = {}
        for s in states:
            sig = (cls[s], tuple(cls.get(d.trans[s][a], -1) if d.trans[s][a] >= 0 else -1
                                 for a in range(n_atoms)))
            new[s] = sigs.setdefault(sig, len(sigs))
        if len(sigs) == len(set(cls.values())):
            cls = new
            break
        cls = new
    # renumber: start first, then BFS order for stable output
    order: list[int] = []
    seen_cls: dict[int, int] = {}
    rep: dict[int, int] = {}
    for s in states:
        rep.setdefault(cls[s], s)
    queue = [cls[d.start]]
    seen_cls[cls[d.start]] = 0
    while queue:
        c = queue.pop(0)
        order.append(c)
        s = rep[c]
        for a in range(n_atoms):
            t = d.trans[s][a]
            if t >= 0 and t in cls and cls[t] not in seen_cls:
                seen_cls[cls[t]] = len(seen_cls)
                queue.append(cls[t])
    raw_rows = []
    for c in order:
        s = rep[c]
        raw_rows.append(tuple(seen_cls[cls[t]] if t >= 0 and t in cls else -1
                              for t in d.trans[s]))
    # merge atoms with identical columns
    columns: dict[tuple[int, ...], list[int]] = {}
    for a in range(n_atoms):
        columns.setdefault(tuple(row[a] for row in raw_rows), []).append(a)
    atoms = []
    col_keys = []
    for col, members in columns.items():
        atoms.append(merge_ranges(r for a in members for r in d.atoms[a]))
        col_keys.append(col)
    trans = tuple(tuple(col[i] for col in col_keys) for i in range(len(order)))
    accept = frozenset(seen_cls[cls[s]] for s in states if s in d.accept)
    return DFA(tuple(atoms), trans, accept, 0)


# ----------------------------------------------------------------------------- back to IR


# The largest expression (in IR nodes) a state shared by several others is inlined as; a larger
# one becomes a rule (see to_expr).
SHARED_INLINE_MAX: Final = 64


def to_expr(d: DFA, char_expr: Callable[[Ranges], Expr], rules: dict[str, Expr],
            prefix: str) -> Expr:
    """An IR expression for ``d``'s language, characters spelled by ``char_expr``.

    Acyclic automata become nested expressions; cycles through several states are removed by
    state elimination when the result stays small, else each state on a cycle becomes a rule
    named ``{prefix}-{n}`` (added to ``rules``).
    """
    d = minimize(d)
    if d.is_empty():
        return NOTHING
    n = d.size
    edges: list[dict[int, list[tuple[int, int]]]] = []
    for s in range(n):
        by_target: dict[int, list[tuple[int, int]]] = {}
        for a, t in enumerate(d.trans[s]):
            if t >= 0:
                by_target.setdefault(t, []).extend(d.atoms[a])
        edges.append(by_target)
    label_memo: dict[Ranges, Expr] = {}

    def label(ranges: list[tuple[int, int]]) -> Expr:
        key = merge_ranges(ranges)
        got = label_memo.get(key)
        if got is None:
            got = label_memo[key] = char_expr(key)
        return got

    cyclic = _cyclic_states(edges)
    if cyclic:
        try:
            return _eliminate(d, edges, label)
        except AutomatonTooLarge:
            pass
    preds = [0] * n
    for s in range(n):
        for t in edges[s]:
            if t != s:
                preds[t] += 1
    memo: dict[int, Expr] = {}
    base, k = prefix, 2
    while any(name.startswith(base + "-") for name in rules):
        base, k = f"{prefix}{k}", k + 1
    names = {s: f"{base}-{s}" for s in range(n) if s in cyclic}
    # A state reached from several others is one shared subexpression, but whatever walks the
    # IR as a tree (the NFA builder, the GBNF printer) meets it once per path: an acyclic
    # automaton with many paths (``format: email`` with ``maxLength: 40``) is exponential as
    # a tree. Such a state becomes a rule once its expression is larger than a few nodes.
    sizes: dict[int, int] = {}

    def inline_size(t: int) -> int:
        """Nodes of ``t``'s expression as inlined (1 for a rule), naming shared large states
        on the way (their descendants first)."""
        if t in names:
            return 1
        got = sizes.get(t)
        if got is None:
            got = 1 + sum(2 + inline_size(u) for u in edges[t] if u != t)
            if preds[t] > 1 and got > SHARED_INLINE_MAX:
                names[t] = f"{base}-{t}"
                got = 1
            sizes[t] = got
        return got

    for root in (d.start, *sorted(cyclic)):
        for u in edges[root]:
            inline_size(u)

    def body(s: int) -> Expr:
        loop = edges[s].get(s)
        alts: list[Expr] = [EMPTY] if s in d.accept else []
        for t, ranges in edges[s].items():
            if t != s:
                alts.append(seq(label(ranges), ref_or_inline(t)))
        return seq(star(label(loop)) if loop else EMPTY, choice(*alts))

    def ref_or_inline(t: int) -> Expr:
        if t in names:
            if names[t] not in rules:
                rules[names[t]] = NOTHING  # placeholder against re-entry
                rules[names[t]] = body(t)
            return REF(names[t])
        got = memo.get(t)
        if got is None:
            got = memo[t] = body(t)
        return got

    return ref_or_inline(d.start)


def _cyclic_states(edges: list[dict[int, list[tuple[int, int]]]]) -> set[int]:
    """States on a cycle through more than one state (Tarjan's SCCs)."""
    n = len(edges)
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: list[int] = []
    out: set[int] = set()
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            s, it = work[-1]
            advanced = False
            for t in it:
                if index[t] < 0:
                    index[t] = low[t] = counter
                    counter += 1
                    stack.append(t)
                    on[t] = True
                    work.append((t, iter(edges[t])))
                    advanced = True
                    break
                if on[t]:
                    low[s] = min(low[s], index[t])
            if advanced:
                continue
            work.pop()
            if work:
                p = work[-1][0]
                low[p] = min(low[p], low[s])
            if low[s] == index[s]:
                comp = []
                while True:
                    x = stack.pop()
                    on[x] = False
                    comp.append(x)
                    if x == s:
                        break
                if len(comp) > 1:
                    out.update(comp)
    return out


def _size(e: Expr, memo: dict[int, tuple[Expr, int]]) -> int:
    key = id(e)
    got = memo.get(key)
    if got is not None:
        return got[1]
    if isinstance(e, SEQ | CHOICE):
        n = 1 + sum(_size(x, memo) for x in e.items)
    elif isinstance(e, REPEAT):
        n = 1 + _size(e.item, memo)
    else:
        n = 1
    memo[key] = (e, n)
    return n


def _eliminate(d: DFA, edges: list[dict[int, list[tuple[int, int]]]],
               label: Callable[[list[tuple[int, int]]], Expr]) -> Expr:
    """State elimination (Brzozowski-McCluskey) with a size cap."""
    n = d.size
    start, final = n, n + 1
    R: dict[int, dict[int, Expr]] = {s: {} for s in range(n + 2)}
    R[start][d.start] = EMPTY
    for s in range(n):
        for t, ranges in edges[s].items():
            R[s][t] = label(ranges)
        if s in d.accept:
            R[s][final] = EMPTY
    incoming: dict[int, set[int]] = {s: set() for s in range(n + 2)}
    for s, outs in R.items():
        for t in outs:
            incoming[t].add(s)
    sizes: dict[int, tuple[Expr, int]] = {}
    remaining = set(range(n))
    while remaining:
        k = min(remaining, key=lambda s: (len(incoming[s] - {s}) * len(set(R[s]) - {s}), s))
        remaining.discard(k)
        loop = R[k].pop(k, None)
        incoming[k].discard(k)
        mid = star(loop) if loop is not None else EMPTY
        for i in list(incoming[k]):
            ik = R[i].pop(k)
            for j, kj in R[k].items():
                new = seq(ik, mid, kj)
                old = R[i].get(j)
                R[i][j] = new if old is None else choice(old, new)
                if _size(R[i][j], sizes) > MAX_ELIMINATION_SIZE:
                    raise AutomatonTooLarge("state elimination grew too large")
                incoming[j].add(i)
        for j in R[k]:
            incoming[j].discard(k)
        del R[k]
        incoming.pop(k, None)
    return R[start].get(final, NOTHING)


def language_of(exprs: Iterable[Expr]) -> DFA:
    """Intersection of the languages of several character-level expressions."""
    result: DFA | None = None
    for e in exprs:
        dfa = minimize(from_expr(e))
        result = dfa if result is None else intersect(result, dfa)
    if result is None:
        return minimize(from_expr(star(CHAR_SET(SCALARS))))
    return result
