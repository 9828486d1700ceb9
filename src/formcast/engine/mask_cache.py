"""Token masks: computed once per automaton position, memoised per canonical parser state.

Two levels of work, both shared by every matcher of the same (grammar, vocabulary):

1. Per DFA state ``q`` (context-independent, xgrammar's idea): walk the token trie from ``q``
   (in C when the extension is built, else level by level in numpy). Tokens that stay inside
   ``q``'s rule for all their bytes are allowed whatever the stack below; tokens that die
   without ever reaching a state where the rule could end or call another rule are refused
   whatever the stack. Only the rest — tokens that cross a rule boundary mid-token, such as
   ``",`` after a nested string — are context-dependent. Positions in later copies of a
   counted repetition share the verdict of an earlier copy (``Automaton.copy_shape``).
2. Per parser state (a set of stacks): OR the per-``q`` masks of the stacks' tops, or, when
   some tokens are context-dependent, walk the whole state exactly. The result is memoised
   under the parser state itself, so the warm path of ``mask_for`` is one dictionary lookup.
"""

from __future__ import annotations

import time
import weakref
from array import array
from typing import NamedTuple

import numpy as np

from formcast.engine.arrays import sorted_unique
from formcast.engine.lexer import Automaton
from formcast.engine.memo_budget import MemoBudget, MemoStore, default_budget
from formcast.engine.parser import DenseStates, Parser, State
from formcast.engine.token_trie import TokenTrie, concat_ranges
from formcast.pure_python import pure_python

try:  # the C walk, built by setup.py when a compiler is there
    from formcast.engine import _trie_walk
except ImportError:  # pragma: no cover - depends on the build
    _trie_walk = None

# A state that loops on at least this many bytes gets its looping tokens from a slice.
SLICE_MIN_BYTES = 32
# A walk limited to at most this many tokens goes without a slice chain.
FEW_ROWS_WITHOUT_SLICE = 512
# Long tokens walked again are taken byte by byte (Core.walk_bytes, one call a token) when
# they are at most this many; more go through the trie walk, which shares their prefixes.
BYTE_WALK_ROWS = 64
# Below this many live trie nodes holding at most SCALAR_TOKENS tokens, the walk goes on
# token by token in Python (cheaper than numpy calls per level for a handful of tokens).
SCALAR_NODES = 32
SCALAR_TOKENS = 256
_EMPTY_INT64 = np.zeros(0, dtype=np.int64)
_EMPTY_UINT64 = np.zeros(0, dtype="<u8")
_ALL_BYTES = np.ones(256, dtype=np.uint8)
_U8 = np.dtype(np.uint8)
# A walk from the whole parser state keeps only its allowed tokens: nothing follows the root.
_NO_BYTES = np.zeros(256, dtype=np.uint8)
# Upper bound on numbered parser states kept for token walks (1 KiB of table each).
DENSE_STATE_LIMIT = 100_000


class TokenTable:
    """A vocabulary prepared for mask computation: its token trie and EOS ids."""

    def __init__(self, token_bytes: list[bytes], size: int, eos_ids: frozenset[int]) -> None:
        self.size = size
        # Masks are kept as bits (see StateVerdict): this many bytes, whole int32 words.
        self.packed_bytes = 4 * ((size + 31) // 32)
        self.eos_ids = np.array(sorted(t for t in eos_ids if 0 <= t < size), dtype=np.int64)
        self.token_bytes = token_bytes
        self.trie = TokenTrie(token_bytes, size)
        # Whether the C walk can take this vocabulary: its node records hold a depth of 16
        # bits and a count of 8 bits of tokens with the same bytes; a vocabulary beyond
        # either (none known) is walked with numpy instead.
        self.walkable = True
        if native_walk_enabled():
            try:
                self.trie.flat()  # the C walk's node arrays: once per vocabulary, not in a mask
            except ValueError:
                self.walkable = False


class StateVerdict(NamedTuple):
    """What the tokens do from one DFA state ``q``, whatever the stack below it.

    ``allowed`` holds one bit per token id, bit ``t % 8`` of byte ``t // 8`` (read as int32
    words, the bitmask layout of ``fill_next_token_bitmask``): a cold mask then writes and
    faults in 6 KB of fresh memory for SmolLM2 instead of 48 KB (page faults cost ~3 us a
    page here), and masks are combined word by word. A named tuple, immutable and made in a
    fraction of a frozen dataclass's time (one per cold mask).
    """

    allowed: np.ndarray  # uint8 bits: tokens consumable without leaving q's frame
    # the trie rows (sorted, not token ids) of tokens that can only go on by returning below
    # q's frame: the exact walk that decides them takes rows
    needs_context: np.ndarray
    depth: int = 1 << 30  # the verdict holds for any state alike for this many bytes


def classify_tokens(dense: DenseStates, table: TokenTable, base: int,
                    only_rows: np.ndarray | None = None,
                    follow: np.ndarray | None = None, native: bool | None = None,
                    into: np.ndarray | None = None) -> StateVerdict:
    """Classify every token from the parser state numbered ``base`` (see
    :func:`classify_tokens_numpy`): in C when the extension is built, else with numpy.

    ``only_rows`` (sorted trie rows) limits the walk to those tokens where the C walk runs;
    any other token it reports is still decided exactly. ``follow`` (256 flags, default all)
    holds the bytes that can come after the base frame ends (``Automaton.follow_of``).
    ``native``: the caller's reading of ``native_walk_enabled()`` (read here when None).
    ``into``: packed bits the C walk of ``only_rows`` may set its allowed tokens in, in place of
    a fresh array (the verdict's ``allowed`` is then ``into``, bits already set kept)."""
    if native is None:
        native = native_walk_enabled()
    if _trie_walk is not None and native:
        return classify_tokens_native(dense, table, base, only_rows, follow, into)
    return classify_tokens_numpy(dense, table, base, follow)


def native_walk_enabled() -> bool:
    """Whether cold masks use the C walk (``FORMCAST_PURE_PYTHON=1`` turns it off)."""
    return _trie_walk is not None and not pure_python()


def classify_tokens_native(dense: DenseStates, table: TokenTable, base: int,
                           only_rows: np.ndarray | None = None,
                           follow: np.ndarray | None = None,
                           into: np.ndarray | None = None) -> StateVerdict:
    """The walk of :func:`classify_tokens_numpy`, depth first in C (``_trie_walk.c``).

    The C walk builds the states it meets itself, through the C determiniser: one-frame
    states (``2 * q``, see ``DenseStates``) from the automaton, the others from
    ``DenseStates.native_context``, without coming back to Python for each. Where it cannot
    (the table must grow, or a state is refused with an error) it returns where it stopped;
    those rows are filled here and the walk resumes from those nodes, until nothing is
    pending. The slice chain is found the same way.
    """
    trie = table.trie
    flat = trie.flat()
    if follow is None:
        follow = _ALL_BYTES
    elif follow.dtype is not _U8:  # Automaton.follow_of's rows are uint8 already
        follow = follow.astype(np.uint8)
    core = dense.parser.auto.native_core  # builds the states it meets inside the walk
    context = dense.native_context
    auto = dense.parser.auto
    if only_rows is None and core is not None:
        # The usual cold mask: slice chain and walk in one C call (see cold_walk). Where
        # repetitions are copied lazily, a chain from a position inside one may repeat copy
        # after copy, which only Python sees (_native_slice_chain): the C call stops when the
        # chain goes on past the point where Python would start looking.
        limit = trie.max_len
        if auto.has_lazy_copies:
            limit = -1 if base % 2 == 0 and auto.copy_shape(base // 2) is not None else 2
        allowed = np.zeros(table.packed_bytes, dtype=np.uint8)
        got = None if limit < 0 else _trie_walk.cold_walk(
            dense.table, dense.filled_bytes, dense.finishes_bytes, flat.nodes,
            flat.subtree_bytes, flat.ids, flat.maxlen, allowed, follow, base, trie.max_len,
            SLICE_MIN_BYTES, core, context, limit, flat.slice_tokens)
        if got is not None and not got[0]:
            needs = np.frombuffer(got[1], dtype=np.int64) if got[1] else _EMPTY_INT64
            return StateVerdict(allowed, needs, got[2])
        # Else some state needs Python first (the table must grow, or the chain may repeat):
        # the general path below, from scratch (a walk only fills rows, so starting again is
        # exact).
    if only_rows is None or not only_rows.size:
        only_rows = _EMPTY_INT64
    if only_rows.size and only_rows.size <= FEW_ROWS_WITHOUT_SLICE:
        # A few tokens (those that return below a frame mid-token) are walked path by path:
        # a slice chain would skip nothing worth its states (~15 us a several-frame mask).
        chain, outside = _EMPTY_INT64, _EMPTY_UINT64
    else:
        # The walk goes only where these tokens are: a chain longer than the longest of them
        # vouches for nothing more, and building it can cost milliseconds (a full walk at
        # the start of a ``maxLength: 500`` string inside a rule that is called: one
        # several-frame state per position, up to the vocabulary's longest token).
        horizon = int(trie.lens[only_rows].max()) if only_rows.size else trie.max_len
        chain, outside = _native_slice_chain(dense, base, horizon)
    # A chain whose later part repeats copy after copy (-1 entries) lets the walk fold those
    # copies into one (``fold`` in _trie_walk.c): exact for tokens shorter than the chain,
    # so the few longer ones are walked again without it, byte by byte (walk_long_rows).
    long_rows = _EMPTY_INT64
    fold = (bool(chain.size) and not only_rows.size and base % 2 == 0 and core is not None
            and int(chain.min()) < 0)
    if fold:
        long_rows = trie.rows_at_least(chain.size)
        fold = long_rows.size <= FEW_ROWS_WITHOUT_SLICE
    # The walk only sets bits; it may set them in the caller's mask when no fold (which
    # clears long tokens' bits afterwards) follows.
    allowed = into if into is not None and not fold else np.zeros(table.packed_bytes,
                                                                  dtype=np.uint8)
    needs: list[bytes] = []
    # array.array, not numpy: a numpy call costs several microseconds in a cold mask.
    pending: object = array("q", (0, base, 0))
    depth = 0
    while True:  # the base's row is there (the slice chain needs it), or the walk builds it
        raw, needing, reached = _trie_walk.walk(
            dense.table, dense.filled_bytes, dense.finishes_bytes,
            flat.nodes, flat.subtree_bytes, flat.ids, chain, outside, pending, allowed,
            only_rows, follow, flat.maxlen, core, context, fold)
        if needing:
            needs.append(needing)
        depth = max(depth, reached)
        if not raw:
            break
        pending = np.frombuffer(raw, dtype=np.int64)
        dense.fit_numbered()  # the walk may have numbered states past the table
        dense.ensure_rows(pending[1::3])
    if not needs:
        rows = _EMPTY_INT64
    elif len(needs) == 1:
        rows = np.frombuffer(needs[0], dtype=np.int64)
    else:  # each walk call reports its rows sorted; a resumed walk made several
        rows = sorted_unique(np.frombuffer(b"".join(needs), dtype=np.int64))
    got = StateVerdict(allowed, rows, depth)
    if fold and long_rows.size:
        extra = walk_long_rows(dense, table, base, long_rows, follow)
        got = replace_rows(got, extra, long_rows, int(chain.size), trie)
    return got


def walk_long_rows(dense: DenseStates, table: TokenTable, base: int, rows: np.ndarray,
                   follow: np.ndarray | None) -> StateVerdict:
    """The verdict of ``rows`` only (sorted trie rows, few and long) from the one-frame
    parser state ``base``. Each token goes byte by byte through the C determiniser
    (``Core.walk_bytes``), which makes only the states on its path: walked by the trie walk,
    80 spaces through a ``maxLength`` string built each position's whole row, nine states a
    byte. Tokens it cannot settle alone (a rule call, or a point where the frame could end)
    go through the trie walk."""
    auto = dense.parser.auto
    core = auto.native_core
    if core is None or base % 2 or rows.size > BYTE_WALK_ROWS:
        return classify_tokens(dense, table, base, only_rows=rows, follow=follow)
    trie = table.trie
    follow_flags = (_ALL_BYTES if follow is None else follow.astype(np.uint8, copy=False)).tobytes()
    q = base // 2
    allowed_ids: list[int] = []
    undecided: list[int] = []
    token_bytes = table.token_bytes
    for row, token in zip(rows.tolist(), trie.ids[rows].tolist(), strict=True):
        verdict = core.walk_bytes(q, token_bytes[token], follow_flags)
        if verdict > 0:
            allowed_ids.append(token)
        elif verdict < 0:
            undecided.append(row)
    if undecided:
        got = classify_tokens(dense, table, base, only_rows=np.array(undecided, np.int64),
                              follow=follow)
        allowed, needs, depth = got.allowed, got.needs_context, got.depth
    else:
        allowed, needs, depth = np.zeros(table.packed_bytes, np.uint8), _EMPTY_INT64, 0
    if allowed_ids:
        set_bits(allowed, np.array(allowed_ids, np.int64), True)
    return StateVerdict(allowed, needs, max(depth, int(trie.lens[rows].max())))


def replace_rows(got: StateVerdict, extra: StateVerdict, rows: np.ndarray, shorter: int,
                 trie: TokenTrie) -> StateVerdict:
    """``got``, exact for tokens shorter than ``shorter`` bytes, with the verdict of
    ``rows`` (every longer token) taken from ``extra``."""
    allowed = got.allowed.copy()
    set_bits(allowed, trie.ids[rows], False)
    allowed |= extra.allowed
    needs = got.needs_context
    if needs.size:
        needs = needs[trie.lens[needs] < shorter]
    if extra.needs_context.size:
        needs = sorted_unique(np.concatenate((needs, extra.needs_context)))
    return StateVerdict(allowed, needs, max(got.depth, extra.depth))


def _native_slice_chain(dense: DenseStates, base: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_slice_chain` in C: the chain, and the bytes outside the slice as 256 bits in 4
    little-endian words (empty arrays: no slice). A base without a slice of its own may get
    one from its most common successor on (see ``slice_chain`` in ``_trie_walk.c``).

    When two consecutive states of the chain are the same position of a counted repetition
    one copy apart (equal :meth:`Automaton.copy_shape`), the chain repeats for the whole
    horizon: its later entries are left -1 and the C walk follows slice bytes instead, so a
    mask at the start of a ``maxLength: 400`` string does not build 80 positions ahead first.
    """
    chain = np.empty(horizon + 1, dtype=np.int64)
    outside = np.empty(4, dtype="<u8")
    # The first step may differ from the rest (a minLength not met yet at the base, or the
    # base outside the repetition), so the repeat is looked for from either of the first two
    # states: the first three are built before the rest.
    limit = min(horizon, 2) if dense.parser.auto.has_lazy_copies else horizon
    length, mode = _run_slice_chain(dense, base, horizon, limit, chain, outside)
    if length == 0:
        return _EMPTY_INT64, _EMPTY_UINT64
    if mode == 1 and limit < horizon:
        for k in (0, 1):
            if length < k + 2:
                break
            reach = _one_copy_apart(dense, int(chain[k]), int(chain[k + 1]))
            if reach > k + 2:
                # Tokens up to ``reach`` bytes stay where every copy behaves alike: the chain
                # vouches for tokens shorter than its length, so it stops there.
                length = min(horizon, reach - 1) + 1
                chain[k + 2:length] = -1
                return chain[:length].copy(), outside
        if length == limit + 1:  # cut at the limit, not at the chain's end: the whole chain
            length, mode = _run_slice_chain(dense, base, horizon, horizon, chain, outside)
    return chain[:length].copy(), outside


def _run_slice_chain(dense: DenseStates, base: int, horizon: int, limit: int,
                     chain: np.ndarray, outside: np.ndarray) -> tuple[int, int]:
    """Run the C slice chain, filling the rows of several-stack states it stops at;
    ``(length, mode)``."""
    core = dense.parser.auto.native_core
    while True:
        length, missing, mode = _trie_walk.slice_chain(
            dense.table, dense.filled_bytes, dense.finishes_bytes, base,
            horizon, limit, SLICE_MIN_BYTES, chain, outside, core, dense.native_context)
        if missing < 0:
            return length, mode
        dense.ensure_rows(np.array([missing]))


def _one_copy_apart(dense: DenseStates, first: int, second: int) -> int:
    """How many bytes two one-frame parser states behave alike for, as the same position of
    a counted repetition one copy apart (0: they are not)."""
    a, b = dense.state(first), dense.state(second)
    if len(a) != 1 or len(b) != 1:
        return 0
    (stack_a,), (stack_b,) = a, b
    if len(stack_a) != 1 or len(stack_b) != 1 or stack_a == stack_b:
        return 0
    auto = dense.parser.auto
    shape_a, shape_b = auto.copy_shape(stack_a[0]), auto.copy_shape(stack_b[0])
    if shape_a is None or shape_b is None or shape_a[0] != shape_b[0]:
        return 0
    return min(shape_a[1], shape_b[1])


def classify_tokens_numpy(dense: DenseStates, table: TokenTable, base: int,
                          follow: np.ndarray | None = None) -> StateVerdict:
    """Walk the token trie from the parser state numbered ``base``: one numpy gather per
    trie level, over the live nodes only.

    From a one-frame state ``{(q,)}`` this is context-free: calls entered mid-token are
    followed, and a token that passes a point where ``q``'s own frame could finish, with a
    byte in ``follow`` next (default: any), and cannot go on otherwise, is reported in
    ``needs_context`` (by trie row). From a full parser state the walk is exact and
    ``needs_context`` holds only tokens that would go on past the end of the root.
    """
    follow = np.ones(256, dtype=bool) if follow is None else follow.astype(bool)
    trie = table.trie
    n = trie.ids.size
    allowed_rows = np.zeros(n, dtype=bool)
    needs: list[np.ndarray] = []
    chain, slice_bytes = _slice_chain(dense, base, trie.max_len)
    outside = trie.outside_prefix_sums(slice_bytes) if chain is not None else None
    live = np.zeros(1, dtype=np.int64)
    state = np.array([base], dtype=np.int64)
    flag = np.zeros(1, dtype=bool)
    for level in range(1, trie.max_len + 1):
        if live.size <= SCALAR_NODES and level > 1:
            lo_rows = trie.node_row[level - 1][live]
            hi_rows = trie.node_hi[level - 1][live]
            if int((hi_rows - lo_rows).sum()) <= SCALAR_TOKENS:
                # Few tokens left below few nodes: numpy's per-call cost would dominate a
                # level-by-level walk of their remaining bytes; walk them one by one.
                _walk_rows(dense, table, level - 1, lo_rows, hi_rows, state, flag,
                           allowed_rows, needs, follow)
                break
        dense.ensure_rows(state)
        lo = trie.child_lo[level - 1][live]
        hi = trie.child_hi[level - 1][live]
        kids = concat_ranges(lo, hi)
        if kids.size == 0:
            break
        parent_pos = np.repeat(np.arange(live.size), hi - lo)
        kid_bytes = trie.byte[level][kids]
        nxt = dense.table[state[parent_pos], kid_bytes].astype(np.int64)
        kid_flag = flag[parent_pos]
        if level > 1:
            # Tokens going on below a node pass its state: if the base frame can end there
            # and the next byte can follow it, what follows depends on the context.
            kid_flag = kid_flag | (dense.finishes[state][parent_pos] & follow[kid_bytes])
        ok = nxt >= 0
        if not ok.all():
            dead = kids[~ok & kid_flag]
            if dead.size:
                needs.append(concat_ranges(trie.node_row[level][dead], trie.node_hi[level][dead]))
            kids, nxt, kid_flag = kids[ok], nxt[ok], kid_flag[ok]
        ending = trie.end_rows[level]
        if ending.size:
            alive = np.zeros(trie.node_row[level].size, dtype=bool)
            alive[kids] = True
            allowed_rows[ending[alive[trie.end_node[level]]]] = True
        if outside is not None and level < chain.size:
            # Slice: below a node still on the chain, every token made only of slice bytes
            # and short enough to stay on the chain is allowed as a block.
            lo_rows = trie.node_row[level][kids]
            hi_rows = trie.node_hi[level][kids]
            block = ((nxt == chain[level]) & (outside[hi_rows] == outside[lo_rows])
                     & (trie.node_maxlen[level][kids] < chain.size))
            if block.any():
                allowed_rows[concat_ranges(lo_rows[block], hi_rows[block])] = True
                keep = ~block
                kids, nxt, kid_flag = kids[keep], nxt[keep], kid_flag[keep]
        live, state, flag = kids, nxt, kid_flag
        if live.size == 0:
            break
    allowed = np.zeros(table.size, dtype=bool)
    allowed[trie.ids[allowed_rows]] = True
    needs_rows = sorted_unique(np.concatenate(needs)) if needs else _EMPTY_INT64
    return StateVerdict(pack_bits(allowed, table.packed_bytes), needs_rows, trie.max_len)


def _walk_rows(dense: DenseStates, table: TokenTable, depth: int, lo_rows: np.ndarray,
               hi_rows: np.ndarray, states: np.ndarray, flags: np.ndarray,
               allowed_rows: np.ndarray, needs: list[np.ndarray], follow: np.ndarray) -> None:
    """Finish ``classify_tokens`` token by token: the rows below each live node at ``depth``
    (which sit in ``states`` with ``flags``) continue from byte ``depth`` on."""
    trie = table.trie
    token_bytes = table.token_bytes
    lens = trie.lens
    filled = dense.filled
    needing: list[int] = []
    for lo, hi, start, flag in zip(lo_rows.tolist(), hi_rows.tolist(), states.tolist(),
                                   flags.tolist(), strict=True):
        for row in range(lo, hi):
            if lens[row] <= depth:
                continue  # ended at this node: already decided
            data = token_bytes[trie.ids[row]]
            st = start
            passed = flag
            for i in range(depth, len(data)):
                if not filled[st]:
                    dense.ensure_rows(np.array([st]))
                    filled = dense.filled
                if i >= 1 and dense.finishes[st] and follow[data[i]]:
                    passed = True
                st = int(dense.table[st, data[i]])
                if st < 0:
                    if passed:
                        needing.append(row)
                    break
            else:
                allowed_rows[row] = True
    if needing:
        needs.append(np.array(needing, dtype=np.int64))


def _slice_chain(dense: DenseStates, base: int, horizon: int) -> tuple[np.ndarray | None, np.ndarray]:
    """The slice of ``base``: a large byte set ``S`` whose bytes all lead to one successor,
    and the chain of states reached by 0, 1, 2... bytes of ``S`` (up to ``horizon``).

    Inside a JSON string the chain is a loop (``base`` itself); inside ``[^\\n]{1,200}`` or
    a ``maxLength`` string it counts down. Tokens made only of ``S`` bytes and no longer than
    the chain are allowed without walking them (llguidance's slices, generalised to counts).
    """
    dense.ensure_rows(np.array([base]))
    row = dense.table[base]
    targets = row[row >= 0]
    if targets.size < SLICE_MIN_BYTES:
        return None, row >= 0
    values, counts = np.unique(targets, return_counts=True)
    if counts.max() < SLICE_MIN_BYTES:
        return None, row >= 0
    succ = int(values[counts.argmax()])
    slice_bytes = row == succ
    chain = [base]
    seen = {base: 0}
    while len(chain) <= horizon:
        if succ in seen:  # a loop: the chain goes on for ever
            cycle = chain[seen[succ]:]
            while len(chain) <= horizon:
                chain.append(cycle[(len(chain) - seen[succ]) % len(cycle)])
            break
        seen[succ] = len(chain)
        chain.append(succ)
        dense.ensure_rows(np.array([succ]))
        following = dense.table[succ][slice_bytes]
        if following[0] < 0 or not (following == following[0]).all():
            break
        succ = int(following[0])
    return np.array(chain, dtype=np.int64), slice_bytes


class MaskCache:
    """Masks for one (automaton, vocabulary) pair, memoised at both levels.

    Masks, packed masks and token verdicts count against ``budget``, one bound for the whole
    process (``FORMCAST_MASK_CACHE_MB``, 1 GiB by default) whatever the number of grammars.
    """

    def __init__(self, auto: Automaton, parser: Parser, table: TokenTable,
                 budget: MemoBudget = default_budget) -> None:
        self.auto = auto
        self.parser = parser
        self.table = table
        self.dense = DenseStates(parser)
        self._verdicts: dict[int, StateVerdict] = MemoStore()
        self._horizon_verdicts: dict[tuple, StateVerdict] = MemoStore()  # by copy_shape
        # by copy_shape: (a verdict that looked as far as its repetition's maximum, the reach
        # of its state), for the tokens shorter than that reach (see verdict)
        self._near_verdicts: dict[tuple, tuple[StateVerdict, int]] = MemoStore()
        self._full_verdicts: dict[tuple, StateVerdict] = MemoStore()  # frames below + shape
        self._masks: dict[State, np.ndarray] = MemoStore()
        self._packed: dict[State, np.ndarray] = MemoStore()
        # id(bits) -> (bits, weak bool mask): one bool array per distinct mask, however many
        # states share its bits (mask_for, for callers of next_token_mask)
        self._unpacked: dict[int, tuple[np.ndarray, weakref.ref]] = MemoStore()
        self.budget = budget
        # Read once: the environment lookup showed in profiles at one per cold mask.
        self._native = native_walk_enabled() and table.walkable
        self.masks_computed = 0
        self.cache_hits = 0
        self.compute_seconds = 0.0

    def verdict(self, q: int) -> StateVerdict:
        got = self._verdicts.get(q)
        if got is not None:
            return got
        shape = self.auto.copy_shape(q)
        alike = None  # the verdict of a state of the same shape, which looked too far
        reach = 0  # tokens shorter than this fare the same from q as from alike's state
        if shape is not None:
            key, reach = shape
            alike = self._horizon_verdicts.get(key)
            if alike is not None and alike.depth < reach:
                return alike
            if alike is None:
                near = self._near_verdicts.get(key)
                if near is not None:  # looked as far as its repetition's maximum
                    alike, its_reach = near
                    reach = min(reach, its_reach)
        if len(self.dense) > DENSE_STATE_LIMIT:
            # Deeply recursive grammars can keep minting states: start the table afresh
            # (verdicts already computed stay valid; they hold masks, not state ids).
            self.dense = DenseStates(self.parser)
        base = self.dense.plain_id(q)
        follow = self.auto.follow_of(q)
        long_rows = None
        if alike is not None:
            long_rows = self.table.trie.rows_at_least(reach)
            if long_rows.size > self.table.size // 8:
                long_rows = None
        if long_rows is not None:
            got = self._patched(alike, base, long_rows, reach, follow)
        else:
            got = classify_tokens(self.dense, self.table, base, follow=follow,
                                  native=self._native)
        # Shared by the shape when the walk never looked as far as the repetition's maximum.
        if long_rows is None and shape is not None and got.depth < shape[1]:
            store, at = self._horizon_verdicts, shape[0]
        else:
            store, at = self._verdicts, q
            if long_rows is None and shape is not None:
                # It looked that far (a string whose maxLength is below the vocabulary's
                # longest tokens): still the verdict of every state of the shape for tokens
                # shorter than both reaches, so the next one walks only the longer tokens.
                self._near_verdicts[shape[0]] = (got, shape[1])
                self.budget.charge(self._near_verdicts, shape[0],
                                   got.allowed.nbytes + got.needs_context.nbytes)
        store[at] = got
        self.budget.charge(store, at, got.allowed.nbytes + got.needs_context.nbytes)
        return got

    def _patched(self, alike: StateVerdict, base: int, long_rows: np.ndarray, reach: int,
                 follow: np.ndarray) -> StateVerdict:
        """The verdict of parser state ``base`` from ``alike``, that of a state of the same
        shape which looked ``reach`` bytes or further: tokens shorter than ``reach`` fare the
        same from both and keep their verdict; the few longer ones (``long_rows``; SmolLM2
        has 155 tokens over 16 bytes) are walked again from ``base``. Near the end of a
        ``maxLength: 120`` string, where the longest tokens (80 spaces) reach the maximum,
        this is a walk of a hundred tokens instead of the vocabulary."""
        if self._native:
            extra = walk_long_rows(self.dense, self.table, base, long_rows, follow)
        else:
            extra = classify_tokens(self.dense, self.table, base, only_rows=long_rows,
                                    follow=follow, native=False)
        return replace_rows(alike, extra, long_rows, reach, self.table.trie)

    def mask_for(self, state: State) -> np.ndarray:
        """The bool mask of ``state`` (read-only; shared with other matchers)."""
        got = self._masks.get(state)
        if got is not None:
            self.cache_hits += 1
            return got
        packed = self._packed_bits(state)
        t0 = time.perf_counter()
        # States whose mask is one verdict share its bits, and so share one bool array
        # (held weakly here: by the states' entries, each charged in full, conservatively).
        known = self._unpacked.get(id(packed))
        mask = known[1]() if known is not None and known[0] is packed else None
        if mask is None:
            mask = np.unpackbits(packed, count=self.table.size, bitorder="little").view(bool)
            mask.flags.writeable = False
            self._unpacked[id(packed)] = (packed, weakref.ref(mask))
            self.budget.charge(self._unpacked, id(packed), packed.nbytes + 64)
        self._masks[state] = mask
        self.budget.charge(self._masks, state, mask.nbytes)
        self.compute_seconds += time.perf_counter() - t0
        return mask

    def packed_for(self, state: State) -> np.ndarray:
        """The mask of ``state`` as int32 words, bit ``t % 32`` of word ``t // 32``
        (read-only; shared with other matchers)."""
        return self._packed_bits(state).view("<i4")

    def _packed_bits(self, state: State) -> np.ndarray:
        """The mask of ``state`` as bits (see StateVerdict), memoised."""
        got = self._packed.get(state)
        if got is not None:
            self.cache_hits += 1
            return got
        t0 = time.perf_counter()
        got = self._compute(state)
        got.flags.writeable = False
        self._packed[state] = got
        self.budget.charge(self._packed, state, got.nbytes)
        self.masks_computed += 1
        self.compute_seconds += time.perf_counter() - t0
        return got

    def _with_returns(self, state: State) -> list[tuple[int, ...]]:
        """The kernels of ``state`` plus those reached by returning, before any byte, from
        frames that can finish right now (their verdicts are only valid one frame up)."""
        out = list(state)
        if len(out) == 1 and len(out[0]) == 1:  # one one-frame kernel: nothing to return to
            return out
        seen = set(out)
        i = 0
        while i < len(out):
            kernel = out[i]
            i += 1
            if len(kernel) > 1 and self.parser.frame_can_finish(kernel[-1]):
                parent = kernel[:-1]
                if parent not in seen:
                    seen.add(parent)
                    out.append(parent)
        return out

    def _compute(self, state: State) -> np.ndarray:
        kernels = self._with_returns(state)
        verdicts = [(kernel, self.verdict(kernel[-1])) for kernel in kernels]
        eos = self.table.eos_ids.size and self._accepting(state, kernels)
        if len(verdicts) == 1:
            kernel, only = verdicts[0]
            if not eos and (len(kernel) == 1 or not only.needs_context.size):
                # The verdict is the mask: shared, not copied (both are read-only: the caller
                # makes it so), which saves a vocabulary-sized allocation in most cold masks.
                return only.allowed
            mask = only.allowed.copy()
        else:
            mask = np.zeros(self.table.packed_bytes, dtype=np.uint8)
            for _, v in verdicts:
                mask |= v.allowed
        needs = [v.needs_context for kernel, v in verdicts
                 if len(kernel) > 1 and v.needs_context.size]
        if needs:
            # Some tokens return below a frame mid-token: decide those by a walk from the
            # whole state, where every frame below is known. The walk is exact for any token
            # it reaches and goes only where those tokens are; every other token was already
            # decided by its kernel's verdict.
            rows = needs[0] if len(needs) == 1 else sorted_unique(np.concatenate(needs))
            full = self._full_walk(state, rows, mask)
            if full.allowed is not mask:
                mask |= full.allowed
        if eos:
            set_bits(mask, self.table.eos_ids, True)
        return mask

    def _accepting(self, state: State, kernels: list[tuple[int, ...]]) -> bool:
        """``Parser.is_accepting(state)``, given ``_with_returns(state)``: the root can finish
        exactly where a one-frame kernel among them can (a deeper stack's closure reaches one
        frame only by returning from every frame above it, which is how ``_with_returns``
        adds parents). A one-frame state whose row is filled (the verdict just filled it)
        reads it off the parser-state table's finish flag, the same test. Closing the stacks
        again cost ~8 us in every cold mask of a several-frame state."""
        if len(state) == 1:
            (kernel,) = state
            if len(kernel) == 1:
                sid = 2 * kernel[0]
                dense = self.dense
                if sid < dense.filled.shape[0] and dense.filled[sid]:
                    return bool(dense.finishes[sid])
        can_finish = self.parser.frame_can_finish
        return any(len(kernel) == 1 and can_finish(kernel[0]) for kernel in kernels)

    def _full_walk(self, state: State, needs: np.ndarray,
                   into: np.ndarray | None = None) -> StateVerdict:
        """The exact walk from the whole state, limited to the trie rows ``needs``. A single
        kernel whose top is a position in a counted repetition (``maxLength: 500`` text
        inside an array item rule) shares it with the same position in other copies, under
        the same frames below and for the same tokens, when the walk looked fewer bytes
        ahead than the repetition's maximum is away. A verdict not kept may be walked
        ``into`` the caller's mask (see classify_tokens)."""
        key = shape = None
        if len(state) == 1:
            (kernel,) = state
            shape = self.auto.copy_shape(kernel[-1])
            if shape is not None:
                key = (kernel[:-1], shape[0], needs.tobytes())
                got = self._full_verdicts.get(key)
                if got is not None and got.depth < shape[1]:
                    return got
        if len(self.dense) > DENSE_STATE_LIMIT:
            self.dense = DenseStates(self.parser)
            self._verdicts = MemoStore()  # its bytes leave the budget with it
        got = classify_tokens(self.dense, self.table, self.dense.intern(state), only_rows=needs,
                              follow=_NO_BYTES, native=self._native,
                              into=into if key is None else None)
        if key is not None and got.depth < shape[1]:
            self._full_verdicts[key] = got
            self.budget.charge(self._full_verdicts, key,
                               got.allowed.nbytes + got.needs_context.nbytes)
        return got


def pack_bits(mask: np.ndarray, nbytes: int) -> np.ndarray:
    """A bool mask as bits, bit ``t % 8`` of byte ``t // 8``, zero-padded to ``nbytes``."""
    out = np.zeros(nbytes, dtype=np.uint8)
    bits = np.packbits(mask, bitorder="little")
    out[: bits.size] = bits
    return out


# Up to this many ids are set one by one: numpy's ``ufunc.at`` and the weight arrays cost
# ~4 us warm and far more in a cold mask, for the one or two EOS ids of an accepting state.
FEW_BITS = 16


def set_bits(bits: np.ndarray, ids: np.ndarray, value: bool) -> None:
    """Set (or clear) the bits of token ``ids`` in place."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return
    if ids.size <= FEW_BITS:
        for t in ids.tolist():
            if value:
                bits[t >> 3] |= 1 << (t & 7)
            else:
                bits[t >> 3] &= 0xFF ^ (1 << (t & 7))
        return
    weights = (np.ones(1, dtype=np.uint8) << (ids & 7).astype(np.uint8))
    if value:
        np.bitwise_or.at(bits, ids >> 3, weights)
    else:
        np.bitwise_and.at(bits, ids >> 3, ~weights)

