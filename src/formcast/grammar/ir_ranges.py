"""Inclusive integer ranges (code points, bytes): merging, complements, differences, and the
split of a code point range into UTF-8 byte-range sequences.

A module of its own, with no IR classes in it, so that the install compiles it with mypyc:
every schema compile merges and subtracts ranges thousands of times.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

MAX_CODEPOINT: Final = 0x10FFFF
SURROGATES: Final = (0xD800, 0xDFFF)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort and merge overlapping or adjacent inclusive ranges."""
    # Called thousands of times a schema compile (character classes, their JSON spellings,
    # UTF-8 splits): one pass with the open range in locals. Most calls get a tuple merged
    # already (a character set's own ranges): that one is returned as it is, unsorted.
    if type(ranges) is tuple and _merged_already(ranges):
        return ranges
    items = sorted(ranges)
    if not items:
        return ()
    out: list[tuple[int, int]] = []
    cur_lo, cur_hi = items[0]
    for lo, hi in items:
        if lo <= cur_hi + 1:
            if hi > cur_hi:
                cur_hi = hi
        else:
            out.append((cur_lo, cur_hi))
            cur_lo, cur_hi = lo, hi
    out.append((cur_lo, cur_hi))
    return tuple(out)


def _merged_already(ranges: tuple[tuple[int, int], ...]) -> bool:
    """Whether ``ranges`` is sorted, each range in order, none overlapping or adjacent."""
    prev_hi = -2
    for lo, hi in ranges:
        if lo <= prev_hi + 1 or hi < lo:
            return False
        prev_hi = hi
    return True


def complement_ranges(ranges: tuple[tuple[int, int], ...], lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """The inclusive ranges of ``[lo, hi]`` not covered by sorted, merged ``ranges``."""
    out = []
    cur = lo
    for a, b in ranges:
        if b < cur:
            continue
        if a > hi:
            break
        if a > cur:
            out.append((cur, a - 1))
        cur = max(cur, b + 1)
    if cur <= hi:
        out.append((cur, hi))
    return tuple(out)


def subtract_ranges(ranges: tuple[tuple[int, int], ...], remove: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """``ranges`` minus ``remove`` (both inclusive)."""
    removed = merge_ranges(remove)
    if not any(a <= d and c <= b for a, b in ranges for c, d in removed):
        return merge_ranges(ranges)  # nothing to remove (most sets, minus the surrogates)
    keep = complement_ranges(removed, 0, MAX_CODEPOINT)
    out = []
    for a, b in ranges:
        for c, d in keep:
            lo, hi = max(a, c), min(b, d)
            if lo <= hi:
                out.append((lo, hi))
    return merge_ranges(out)


_UTF8_BOUNDS: Final = ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODEPOINT))


def utf8_byte_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Split the code point range ``[lo, hi]`` into byte-range sequences.

    Each result is a list of ``(byte_lo, byte_hi)`` pairs, one per UTF-8 byte position; the
    union of the byte strings they describe is exactly the UTF-8 encodings of ``[lo, hi]``.
    Surrogates are the caller's business (``CharSet.codepoint_ranges`` removes them).
    """
    out: list[list[tuple[int, int]]] = []
    for blo, bhi in _UTF8_BOUNDS:
        a, b = max(lo, blo), min(hi, bhi)
        if a <= b:
            _split_same_length(a, b, out)
    return out


def _split_same_length(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    # Both ends encode to the same number of bytes. Split until every byte position is a
    # plain range: the trailing continuation bytes of lo must be all-min and of hi all-max.
    if lo <= 0x7F:
        out.append([(lo, hi)])
        return
    n = 2 if hi <= 0x7FF else 3 if hi <= 0xFFFF else 4
    for i in range(1, n):
        mask = (1 << (6 * i)) - 1
        if (lo & ~mask) != (hi & ~mask):
            if (lo & mask) != 0:
                _split_same_length(lo, (lo | mask), out)
                _split_same_length((lo | mask) + 1, hi, out)
                return
            if (hi & mask) != mask:
                _split_same_length(lo, (hi & ~mask) - 1, out)
                _split_same_length(hi & ~mask, hi, out)
                return
    a = chr(lo).encode("utf-8", "surrogatepass")
    b = chr(hi).encode("utf-8", "surrogatepass")
    out.append([(x, y) for x, y in zip(a, b, strict=True)])
