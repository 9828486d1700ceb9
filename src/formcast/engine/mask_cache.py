"""Token masks: computed once per automaton position, memoised per canonical parser state.

Two levels of work, both shared by every matcher of the same (grammar, vocabulary):

1. Per DFA state ``q`` (context-independent, xgrammar's idea): step the DFA for *all* tokens at
   once with numpy. Tokens that stay inside ``q``'s rule for all their bytes are allowed whatever
   the stack below; tokens that die without ever reaching a state where the rule could end or
   call another rule are refused whatever the stack. Only the rest — tokens that cross a rule
   boundary mid-token, such as ``",`` after a nested string — are context-dependent.
2. Per parser state (a set of stacks): OR the per-``q`` masks of the stacks' tops and walk the
   few context-dependent tokens through the real parser. The result is memoised under the
   parser state itself, so the warm path of ``mask_for`` is one dictionary lookup.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from formcast.engine.lexer import Automaton
from formcast.engine.parser import DenseStates, Parser, State

MASK_CACHE_BYTES = 256 * 1024 * 1024
# A state that loops on at least this many bytes gets its looping tokens from a slice.
SLICE_MIN_BYTES = 32


class TokenTable:
    """A vocabulary as numpy arrays: token byte strings padded and sorted by length."""

    def __init__(self, token_bytes: list[bytes], size: int, eos_ids: frozenset[int]) -> None:
        self.size = size
        self.eos_ids = np.array(sorted(t for t in eos_ids if 0 <= t < size), dtype=np.int64)
        ids = [t for t in range(min(size, len(token_bytes))) if token_bytes[t]]
        ids.sort(key=lambda t: len(token_bytes[t]))
        self.ids = np.array(ids, dtype=np.int64)
        self.lens = np.array([len(token_bytes[t]) for t in ids], dtype=np.int32)
        self.max_len = int(self.lens.max()) if len(ids) else 0
        mat = np.zeros((len(ids), max(self.max_len, 1)), dtype=np.uint8)
        for row, t in enumerate(ids):
            data = token_bytes[t]
            mat[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.mat = mat
        # Column-major copy: the DFA walk reads one byte position of many tokens at a time.
        self.cols = np.ascontiguousarray(mat.T)
        self.token_bytes = token_bytes
        self._slices: dict[bytes, np.ndarray] = {}
        # Tokens are sorted by length, so "tokens longer than i" is a suffix of the arrays.
        self.longer_than = np.searchsorted(self.lens, np.arange(self.max_len + 1), side="right")

    def rows_within(self, byte_set: np.ndarray) -> np.ndarray:
        """Bool over rows: the token's bytes all lie in ``byte_set`` (a 256-bool array).

        This is llguidance's "slice" idea: a DFA state that loops on a large byte set (inside
        a JSON string, say) allows every token made only of those bytes, so they need no walk.
        Memoised per byte set; shared by every grammar on this vocabulary.
        """
        key = np.packbits(byte_set).tobytes()
        got = self._slices.get(key)
        if got is None:
            inside = np.ones(len(self.ids), dtype=bool)
            for i in range(self.max_len):
                start = self.longer_than[i]
                inside[start:] &= byte_set[self.cols[i, start:]]
            got = inside
            self._slices[key] = got
        return got


@dataclass(frozen=True)
class StateVerdict:
    """What the tokens do from one DFA state ``q``, whatever the stack below it."""

    allowed: np.ndarray  # bool over the vocabulary: consumable without leaving q's frame
    needs_context: np.ndarray  # token ids that can only go on by returning below q's frame


def classify_tokens(dense: DenseStates, table: TokenTable, q: int) -> StateVerdict:
    """Walk every token from the one-frame stack ``(q,)`` at once: one numpy gather per byte.

    Calls entered mid-token are followed (they do not depend on the context); a token that
    reaches a point where ``q``'s own frame could finish, and cannot go on otherwise, is
    context-dependent and left to the caller.
    """
    n = len(table.ids)
    if n == 0:
        return StateVerdict(np.zeros(table.size, dtype=bool), np.zeros(0, np.int64))
    base = dense.intern(frozenset(((q,),)))
    cols = table.cols
    lens = table.lens
    allowed_rows = np.zeros(n, dtype=bool)
    flagged = np.zeros(n, dtype=bool)
    died = np.zeros(n, dtype=bool)
    dense.ensure_rows(np.array([base]))
    base_row = dense.table[base]
    todo = None
    loop = base_row == base
    if loop.sum() >= SLICE_MIN_BYTES:
        inside = table.rows_within(loop)
        allowed_rows |= inside
        todo = np.nonzero(~inside)[0]
    first = base_row[cols[0] if todo is None else cols[0, todo]]
    first_ok = first >= 0
    if todo is None:
        rows = np.nonzero(first_ok)[0]
        died[~first_ok] = True
    else:
        rows = todo[first_ok]
        died[todo[~first_ok]] = True
    cur = first[first_ok]
    for i in range(1, table.max_len + 1):
        # ``rows`` have consumed i bytes and sit in dense states ``cur``.
        done = lens[rows] == i
        if done.any():
            allowed_rows[rows[done]] = True
            keep = ~done
            rows, cur = rows[keep], cur[keep]
        if rows.size == 0:
            break
        flagged[rows[dense.finishes[cur]]] = True
        dense.ensure_rows(cur)
        nxt = dense.table[cur, cols[i, rows]]
        ok = nxt >= 0
        if not ok.all():
            died[rows[~ok]] = True
            rows, cur = rows[ok], nxt[ok]
        else:
            cur = nxt
    allowed = np.zeros(table.size, dtype=bool)
    allowed[table.ids[allowed_rows]] = True
    return StateVerdict(allowed, table.ids[died & flagged])


class MaskCache:
    """Masks for one (automaton, vocabulary) pair, memoised at both levels."""

    def __init__(self, auto: Automaton, parser: Parser, table: TokenTable) -> None:
        self.auto = auto
        self.parser = parser
        self.table = table
        self.dense = DenseStates(parser)
        self._verdicts: dict[int, StateVerdict] = {}
        self._masks: OrderedDict[State, np.ndarray] = OrderedDict()
        self._packed: dict[State, np.ndarray] = {}
        self.max_masks = max(64, MASK_CACHE_BYTES // max(table.size, 1))
        self.masks_computed = 0
        self.cache_hits = 0
        self.compute_seconds = 0.0

    def verdict(self, q: int) -> StateVerdict:
        got = self._verdicts.get(q)
        if got is None:
            got = classify_tokens(self.dense, self.table, q)
            self._verdicts[q] = got
        return got

    def mask_for(self, state: State) -> np.ndarray:
        """The bool mask of ``state`` (read-only; shared with other matchers)."""
        got = self._masks.get(state)
        if got is not None:
            self.cache_hits += 1
            return got
        t0 = time.perf_counter()
        mask = self._compute(state)
        mask.flags.writeable = False
        if len(self._masks) >= self.max_masks:
            old, _ = self._masks.popitem(last=False)
            self._packed.pop(old, None)
        self._masks[state] = mask
        self.masks_computed += 1
        self.compute_seconds += time.perf_counter() - t0
        return mask

    def packed_for(self, state: State) -> np.ndarray:
        """The mask of ``state`` as int32 words, bit ``t % 32`` of word ``t // 32``."""
        got = self._packed.get(state)
        if got is None:
            got = pack_mask(self.mask_for(state))
            got.flags.writeable = False
            self._packed[state] = got
        else:
            self.cache_hits += 1
        return got

    def _with_returns(self, state: State) -> list[tuple[int, ...]]:
        """The kernels of ``state`` plus those reached by returning, before any byte, from
        frames that can finish right now (their verdicts are only valid one frame up)."""
        dense = self.dense
        out = list(state)
        seen = set(out)
        i = 0
        while i < len(out):
            kernel = out[i]
            i += 1
            if len(kernel) > 1 and dense.finishes[dense.intern(frozenset((kernel[-1:],)))]:
                parent = kernel[:-1]
                if parent not in seen:
                    seen.add(parent)
                    out.append(parent)
        return out

    def _compute(self, state: State) -> np.ndarray:
        parser = self.parser
        token_bytes = self.table.token_bytes
        verdicts = [(kernel, self.verdict(kernel[-1])) for kernel in self._with_returns(state)]
        if len(verdicts) == 1:
            mask = verdicts[0][1].allowed.copy()
        else:
            mask = np.zeros(self.table.size, dtype=bool)
            for _, v in verdicts:
                mask |= v.allowed
        for kernel, v in verdicts:
            # A one-frame kernel is the root: nothing lies below it to return to.
            if len(kernel) == 1 or v.needs_context.size == 0:
                continue
            single = frozenset((kernel,))
            candidates = v.needs_context
            for tid in candidates[~mask[candidates]].tolist():
                if parser.advance(single, token_bytes[tid]):
                    mask[tid] = True
        if parser.is_accepting(state) and self.table.eos_ids.size:
            mask[self.table.eos_ids] = True
        return mask


def pack_mask(mask: np.ndarray) -> np.ndarray:
    """Pack a bool mask into int32 words (bit ``t % 32`` of word ``t // 32``; 1 = allowed)."""
    words = (mask.size + 31) // 32
    padded = np.zeros(words * 32, dtype=bool)
    padded[: mask.size] = mask
    return np.packbits(padded, bitorder="little").view("<i4").copy()
