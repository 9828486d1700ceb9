"""The vocabulary as a token trie laid out level by level in numpy arrays.

Tokens are sorted by their bytes, so the tokens below any trie node (all tokens sharing its
prefix) form one contiguous range of that order. Level ``L`` holds the distinct prefixes of
length ``L``; each node knows its first byte-``L``, its parent at level ``L-1``, the range of
its children at level ``L+1`` and the range of tokens below it. A walk of the whole vocabulary
from one automaton state then costs one numpy gather per level over the *live* nodes only: a
refused byte prunes every token below it at once (30,000 tokens that start with a space and
die on their second byte cost ~100 node visits, not 30,000).
"""

from __future__ import annotations

import numpy as np


class TokenTrie:
    """Level arrays of the trie of ``token_bytes`` (empty byte strings are left out)."""

    def __init__(self, token_bytes: list[bytes], size: int) -> None:
        ids = [t for t in range(min(size, len(token_bytes))) if token_bytes[t]]
        ids.sort(key=lambda t: token_bytes[t])
        self.ids = np.array(ids, dtype=np.int64)  # token id of each row (lexicographic order)
        n = len(ids)
        self.lens = np.array([len(token_bytes[t]) for t in ids], dtype=np.int32)
        self.max_len = int(self.lens.max()) if n else 0
        mat = np.full((n, max(self.max_len, 1)), -1, dtype=np.int16)
        flat = np.frombuffer(b"".join(token_bytes[t] for t in ids), dtype=np.uint8)
        row_of_byte = np.repeat(np.arange(n), self.lens)
        starts = np.concatenate(([0], np.cumsum(self.lens)[:-1])) if n else np.zeros(0, np.int64)
        mat[row_of_byte, np.arange(flat.size) - np.repeat(starts, self.lens)] = flat
        # lcp[i]: bytes row i shares with row i-1 (0 for the first row).
        lcp = np.zeros(n, dtype=np.int32)
        if n > 1:
            diff = mat[1:] != mat[:-1]
            any_diff = diff.any(axis=1)
            first = np.where(any_diff, diff.argmax(axis=1), self.max_len)
            lcp[1:] = np.minimum(first, np.minimum(self.lens[1:], self.lens[:-1]))
        self.node_row: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]  # level 0: the root
        self.node_hi: list[np.ndarray] = [np.array([n], dtype=np.int64)]
        self.byte: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
        self.parent: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
        self.child_lo: list[np.ndarray] = []
        self.child_hi: list[np.ndarray] = []
        self.end_rows: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        self.end_node: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        self.node_maxlen: list[np.ndarray] = [np.array([self.max_len], dtype=np.int32)]
        rows = np.arange(n)
        for level in range(1, self.max_len + 1):
            starts = np.nonzero(lcp < level)[0]
            node_row = starts[self.lens[starts] >= level]
            nxt = np.searchsorted(starts, node_row, side="right")
            node_hi = np.where(nxt < starts.size, starts[np.minimum(nxt, starts.size - 1)], n)
            parent = np.searchsorted(self.node_row[-1], node_row, side="right") - 1
            prev_count = self.node_row[-1].size
            self.child_lo.append(np.searchsorted(parent, np.arange(prev_count), side="left"))
            self.child_hi.append(np.searchsorted(parent, np.arange(prev_count), side="right"))
            self.node_row.append(node_row)
            self.node_hi.append(node_hi)
            self.byte.append(mat[node_row, level - 1].astype(np.int64))
            self.parent.append(parent)
            ending = rows[self.lens == level]
            self.end_rows.append(ending)
            self.node_maxlen.append(np.maximum.reduceat(self.lens, node_row) if node_row.size
                                    else np.zeros(0, dtype=np.int32))
            self.end_node.append(np.searchsorted(node_row, ending, side="right") - 1)
        self.child_lo.append(np.zeros(self.node_row[-1].size, dtype=np.int64))
        self.child_hi.append(np.zeros(self.node_row[-1].size, dtype=np.int64))
        self._token_bytes_flat = (flat, row_of_byte)  # for _present, on first use
        self._present_packed: np.ndarray | None = None
        self._slices: dict[bytes, np.ndarray] = {}
        self._flat: FlatTrie | None = None
        self._long_rows: dict[int, np.ndarray] = {}

    def rows_at_least(self, length: int) -> np.ndarray:
        """The sorted trie rows of tokens of ``length`` bytes or more (memoised)."""
        got = self._long_rows.get(length)
        if got is None:
            got = self._long_rows[length] = np.flatnonzero(self.lens >= length)
        return got

    @property
    def _present(self) -> np.ndarray:
        """Which byte values each token contains, packed: 32 bytes a token (for the numpy
        walk's slices; built on first use)."""
        if self._present_packed is None:
            flat, row_of_byte = self._token_bytes_flat
            present = np.zeros((self.ids.size, 256), dtype=bool)
            present[row_of_byte, flat] = True
            self._present_packed = np.packbits(present, axis=1)
        return self._present_packed

    def flat(self) -> FlatTrie:
        """The same trie with one global node numbering (for the C walk; built once)."""
        if self._flat is None:
            self._flat = FlatTrie(self)
        return self._flat

    def outside_prefix_sums(self, byte_set: np.ndarray) -> np.ndarray:
        """Prefix sums over rows of "has a byte outside ``byte_set``" (memoised per set).

        The tokens below a node all lie inside the set iff the sum over its row range is 0.
        """
        key = np.packbits(byte_set).tobytes()
        got = self._slices.get(key)
        if got is None:
            others = np.packbits(~byte_set.astype(bool))
            outside = (self._present & others).any(axis=1)
            got = np.concatenate(([0], np.cumsum(outside)))
            self._slices[key] = got
        return got


# FlatTrie.nodes: one 16-byte record a node, the layout the C walk reads (see _trie_walk.c).
NODE_DTYPE = np.dtype([("subtree_end", "<i4"), ("row_lo", "<i4"), ("row_hi", "<i4"),
                       ("depth", "<u2"), ("byte", "u1"), ("end_count", "u1")])


class FlatTrie:
    """The trie's nodes in depth-first preorder, for the C walk: node 0 is the root, a node's
    subtree is the nodes after it up to ``subtree_end``, its tokens are the rows ``[row_lo,
    row_hi)``, and the tokens ending exactly at it are the first ``end_count`` of them (a
    prefix sorts before its extensions). The walk then reads the array front to back.

    Preorder is the order of (first row, depth): a node comes right before its first child,
    which shares its first row unless a token ends at the node, and a subtree's nodes are
    exactly those after it whose first row lies before the node's last row plus one."""

    def __init__(self, trie: TokenTrie) -> None:
        counts = [rows.size for rows in trie.node_row]
        total = sum(counts)
        levels = range(len(counts))
        row_lo = np.concatenate(trie.node_row).astype(np.int64)
        depth = np.concatenate([np.full(counts[L], L) for L in levels]).astype(np.int64)
        order = np.lexsort((depth, row_lo))
        row_lo = row_lo[order]
        row_hi = np.concatenate(trie.node_hi).astype(np.int64)[order]
        end_count = np.concatenate([np.bincount(trie.end_node[L], minlength=counts[L])
                                    for L in levels])[order]
        if trie.max_len > 0xFFFF or (end_count.size and end_count.max() > 0xFF):
            raise ValueError("vocabulary too unusual for the C walk: a token over 65,535 bytes "
                             "or more than 255 tokens with the same bytes")
        nodes = np.zeros(total, dtype=NODE_DTYPE)
        nodes["subtree_end"] = np.searchsorted(row_lo, row_hi, side="left")
        nodes["row_lo"] = row_lo
        nodes["row_hi"] = row_hi
        nodes["depth"] = depth[order]
        nodes["byte"] = np.concatenate(trie.byte)[order]
        nodes["end_count"] = end_count
        self.nodes = nodes.view(np.uint8)  # the C walk takes bytes and reads the records
        self.maxlen = np.ascontiguousarray(
            np.concatenate(trie.node_maxlen)[order].astype(np.int32))
        self.n_nodes = total
        self.ids = trie.ids.astype(np.int32)
        self.subtree_bytes = np.ascontiguousarray(_subtree_bytes(trie, counts)[order])
        # The tokens a whole slice chain admits, by (first bytes, bytes outside the slice):
        # filled and read by the C walk (premark_slice in _trie_walk.c). They depend on the
        # vocabulary alone, so every grammar shares them, as a JSON string's characters.
        self.slice_tokens: dict[bytes, tuple[bytes, int]] = {}


def _subtree_bytes(trie: TokenTrie, counts: list[int]) -> np.ndarray:
    """Bytes used by the tokens below each node, 256 bits a node packed little-endian (bit
    ``b`` of the node's 4 words is byte ``b``): a slice admits a node's tokens as a block iff
    none of them uses a byte outside it.

    A token's bytes are its path's, so a node's set is its path's bytes and its children's
    sets: one pass down the levels for the paths, one up for the unions (a few ms for
    SmolLM2, where reducing every node's token range took 130 ms in the first cold mask)."""
    levels = len(counts)
    if sum(counts) == 0:
        return np.zeros((0, 4), "<u8")
    paths = [np.zeros((1, 32), dtype=np.uint8)]
    for level in range(1, levels):
        byte = trie.byte[level]
        own = np.zeros((counts[level], 32), dtype=np.uint8)
        own[np.arange(counts[level]), byte >> 3] = (1 << (byte & 7)).astype(np.uint8)
        paths.append(paths[level - 1][trie.parent[level]] | own)
    below: list[np.ndarray] = [np.zeros(0)] * levels
    for level in range(levels - 1, -1, -1):
        got = paths[level].copy()
        if level + 1 < levels and counts[level + 1]:
            lo, hi = trie.child_lo[level], trie.child_hi[level]
            has = hi > lo
            # Children of consecutive parents are consecutive: the ranges of parents that
            # have children tile the next level, so reduceat at their starts ORs each range.
            got[has] |= np.bitwise_or.reduceat(below[level + 1], lo[has], axis=0)
        below[level] = got
    return np.ascontiguousarray(np.concatenate(below)).view("<u8")


def concat_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` for all i, without a Python loop."""
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return starts + np.arange(total)
