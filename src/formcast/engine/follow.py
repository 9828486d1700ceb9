"""FOLLOW sets of call rules, as bytes: what can come right after a rule returns.

A token walked from the position of one rule frame (``MaskCache.verdict``) may run past the
frame's end; whether it can go on there depends on the frames below, so such a token
"needs the context" and is decided by a second, exact walk from the whole parser state. In
JSON most tokens pass some point where a value could end (``" the"`` after a number: the
value's trailing whitespace, then ``t``), so without a bound nearly half the vocabulary
would need that second walk. The byte right after the frame's end is the first byte of what
follows the rule in some context, and that is a small set here (``,`` ``}`` ``]`` and
whitespace): a token whose next byte is outside it is refused in every context.

The sets over-approximate (a copy of a lazily pasted repetition is taken to go on with the
first copy or leave; a lazily pasted copy of a rule, with its first use's continuation or
its own), which is safe: a byte wrongly in the set only sends a token to the
exact walk; a byte missing from it would wrongly refuse a token. So every state with a call
edge counts as a call site, pasted copies included: a copy of an inlined rule calls the same
rule, but what follows the copy's end is its own (``expr`` inside ``"(" expr ")"`` goes on
with ``)``, the ``expr`` it was copied from, at the top, with nothing). Copies of a lazy
repetition pasted after this runs mirror its first copy, which is scanned.
"""

from __future__ import annotations

from itertools import compress

import numpy as np

from formcast.engine.nfa import NFA

try:  # the same sets in C (setup.py); FORMCAST_PURE_PYTHON=1 keeps this Python code
    from formcast.engine import _nfa_build
except ImportError:  # pragma: no cover - depends on the build
    _nfa_build = None


def follow_bytes(nfa: NFA, fragments: dict[str, tuple[int, int]], order: list[str],
                 live: list[bool]) -> np.ndarray:
    """``out[r, b]``: byte ``b`` can come right after rule ``order[r]`` returns, in some
    context (bool, one row per call rule).

    Byte sets are Python ints (bit ``b``) while they are computed: this runs inside the first
    mask of a grammar, and a numpy operation per NFA edge cost ten times an integer one."""
    n_rules = len(order)
    if not nfa.call_sites:  # no rule is ever called: nothing follows any of them
        return np.zeros((n_rules, 256), dtype=bool)
    index = {name: i for i, name in enumerate(order)}
    ends = {fragments[name][1]: i for i, name in enumerate(order)}
    starts = [fragments[name][0] for name in order]
    if _nfa_build is not None and nfa.native_paste:
        lazy = {x: (record.first, record.continuation(done))
                for x, (record, done) in nfa.lazy_exits.items()}
        packed = np.frombuffer(_nfa_build.follow_sets(
            nfa.eps, nfa.byte_edges, nfa.call_edges, live, starts, ends, index, lazy),
            dtype=np.uint8)
        return np.unpackbits(packed, bitorder="little").reshape(n_rules, 256).view(bool)
    first = [0] * n_rules
    nullable = [False] * n_rules

    def reach(s: int) -> tuple[int, set[int]]:
        """Bytes that can come first from NFA state ``s`` without leaving its rule, and the
        rules whose end can be reached without a byte."""
        out = 0
        seen = {s}
        work = [s]
        ended: set[int] = set()
        while work:
            x = work.pop()
            if x in ends:
                ended.add(ends[x])
            following = [x + d for d in nfa.eps[x]]
            lazy = nfa.lazy_exits.get(x)
            if lazy is not None:  # any copy starts like the first; or the repetition ends
                record = lazy[0]
                following += [record.first, record.continuation(lazy[1])]
            for lo, hi, d in nfa.byte_edges[x]:
                if live[x + d]:
                    out |= (2 << hi) - (1 << lo)
            for name, d in nfa.call_edges[x]:
                t = x + d
                r = index.get(name)
                if r is None or not live[t] or not live[starts[r]]:
                    continue
                out |= first[r]
                if nullable[r]:
                    following.append(t)
            for y in following:
                if y not in seen and live[y]:
                    seen.add(y)
                    work.append(y)
        return out, ended

    # FIRST and nullability of each rule, to a fixpoint (rules call each other).
    changed = True
    while changed:
        changed = False
        for r, s in enumerate(starts):
            if not live[s]:
                continue
            got, ended = reach(s)
            is_nullable = r in ended
            if got & ~first[r] or is_nullable != nullable[r]:
                first[r] |= got
                nullable[r] = nullable[r] or is_nullable
                changed = True

    # Every call site: what follows the call in its rule, and whose FOLLOW it inherits when
    # its rule can end right after the call.
    follow = [0] * n_rules
    inherits: list[tuple[int, set[int]]] = []
    call_edges = nfa.call_edges
    # States with call edges, found at C speed (an empty edge list is false): a schema's NFA
    # has thousands of states and a handful of call sites.
    for x in compress(range(len(call_edges)), call_edges):
        if not live[x]:
            continue
        for name, d in call_edges[x]:
            t = x + d
            r = index.get(name)
            if r is None or not live[t]:
                continue
            got, ended = reach(t)
            follow[r] |= got
            if ended:
                inherits.append((r, ended))
    changed = True
    while changed:
        changed = False
        for r, ended in inherits:
            for e in ended:
                if follow[e] & ~follow[r]:
                    follow[r] |= follow[e]
                    changed = True
    packed = np.frombuffer(b"".join(f.to_bytes(32, "little") for f in follow), dtype=np.uint8)
    return np.unpackbits(packed, bitorder="little").reshape(n_rules, 256).view(bool)
