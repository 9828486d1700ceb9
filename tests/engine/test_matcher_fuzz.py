"""Differential fuzzing of the engine against the slow reference recognizer.

Random grammars in the IR (several rules, recursion, nested Choice/Seq/Repeat with bounds,
nullable and unproductive parts, literals, byte sets, character sets incl. negated and
multi-byte ranges) are matched over random vocabularies, and every answer the Matcher gives is
checked against ``formcast.grammar.recognize.recognizes`` (Earley over bytes, nothing shared
with the engine): the mask for every token, EOS, ``accept_token``, ``forced_bytes``,
``rollback``, ``copy`` and the shared cache. Many grammars and vocabularies go through one
process, so a cache that hands out a mask computed for another state shows up as a mismatch.

``FORMCAST_FUZZ_EXAMPLES=2000 pytest tests/engine/test_matcher_fuzz.py`` runs a long campaign
(random seeds, that many examples per property; ``FORMCAST_FUZZ_LEAVES`` and
``FORMCAST_FUZZ_STEPS`` grow the grammars and the walks). Run campaigns under
``ulimit -S -d 12000000`` (soft, so the probe test can set its own limit; parser tables
reserve address space, so 3 GB is too little): exponentially ambiguous grammars (xfail test
at the end) can otherwise eat all memory. The default run is small and deterministic.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, event, given, note, settings
from hypothesis import strategies as st

from formcast.engine.matcher import MAX_FORCED_BYTES, Matcher
from formcast.engine.memo_budget import MemoBudget
from formcast.engine.vocab import Vocabulary
from formcast.errors import AmbiguousGrammarError, LeftRecursionError, MatcherError
from formcast.grammar.ir import (
    EMPTY,
    NOTHING,
    ByteSet,
    CharSet,
    Choice,
    Expr,
    Grammar,
    Literal,
    Ref,
    Repeat,
    Seq,
)
from formcast.grammar.recognize import recognizes

CAMPAIGN = int(os.environ.get("FORMCAST_FUZZ_EXAMPLES", "0"))
MAX_STEPS = int(os.environ.get("FORMCAST_FUZZ_STEPS", "8"))
MAX_LEAVES = int(os.environ.get("FORMCAST_FUZZ_LEAVES", "10"))


def fuzz_settings(default_examples: int) -> settings:
    return settings(
        max_examples=CAMPAIGN or default_examples,
        deadline=None,
        derandomize=not CAMPAIGN,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                               HealthCheck.data_too_large],
        phases=[p for p in Phase if p is not Phase.explain],
    )


# ----------------------------------------------------------------------------- grammars

# Characters of 1, 2, 3 and 4 UTF-8 bytes, and code points at the edges of those lengths and
# of the surrogate block, so that ranges straddle every UTF-8 boundary.
POOL = 'ab{}",0 \x00é\u07ff€中\U0001d11e'
POOL_ASCII = 'ab{}",0 :['
EDGE_CODEPOINTS = (0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFD, 0xFFFF,
                   0x10000, 0x10FFFF)


def _codepoints(pool: str) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(sorted({ord(c) for c in pool})),
                     st.sampled_from(EDGE_CODEPOINTS), st.integers(0, 0x7F))


def _char_sets(pool: str) -> st.SearchStrategy[Expr]:
    cp = _codepoints(pool)
    ranges = st.lists(st.tuples(cp, cp).map(lambda p: (min(p), max(p))), min_size=1, max_size=3)
    ranges = st.one_of(ranges, ranges, ranges, st.just([]))
    return st.builds(lambda rs, neg: CharSet(tuple(rs), neg), ranges,
                     st.sampled_from([False, False, False, True]))


def _byte_sets(pool: str) -> st.SearchStrategy[Expr]:
    ascii_bytes = sorted({b for c in pool for b in c.encode() if b < 0x80})
    byte = st.one_of(st.sampled_from(ascii_bytes), st.integers(0, 0x7F),
                     st.sampled_from([0x80, 0xA9, 0xBF, 0xC2, 0xE2, 0xF0, 0xFF]))
    ranges = st.lists(st.tuples(byte, byte).map(lambda p: (min(p), max(p))), min_size=1, max_size=3)
    ranges = st.one_of(ranges, ranges, ranges, st.just([]))
    return ranges.map(lambda rs: ByteSet(tuple(rs)))


def _literals(pool: str) -> st.SearchStrategy[Expr]:
    text = st.lists(st.sampled_from(pool), max_size=3).map(lambda cs: "".join(cs).encode())
    partial = st.sampled_from([c.encode() for c in pool if len(c.encode()) > 1] or [b"\xc3\xa9"]) \
        .flatmap(lambda enc: st.sampled_from([enc[:1], enc[1:], enc[:-1]]))
    return st.one_of(text, text, text, partial).map(Literal)


@st.composite
def grammars(draw, pool: str = POOL, max_rules: int = 4, max_leaves: int = MAX_LEAVES) -> Grammar:
    """Random IR grammars; start rule ``r0``. May be left-recursive (callers reject those)."""
    names = [f"r{i}" for i in range(draw(st.integers(1, max_rules)))]
    refs = st.sampled_from(names).map(Ref)
    leaf = st.one_of(_literals(pool), _literals(pool), _char_sets(pool), _byte_sets(pool), refs,
                     st.sampled_from([EMPTY, EMPTY, Literal(b""), NOTHING]))

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        items = st.lists(children, max_size=3).map(tuple)
        alternatives = st.lists(children, min_size=1, max_size=3).map(tuple)
        small = st.integers(0, 2).flatmap(
            lambda lo: st.tuples(st.just(lo), st.one_of(st.none(), st.integers(lo, lo + 3))))
        # Eight copies or more are built lazily by the engine: a separate code path.
        large = st.integers(0, 9).flatmap(
            lambda lo: st.tuples(st.just(lo), st.integers(max(lo, 8), max(lo, 8) + 4)))
        bounds = st.one_of(small, small, large)
        # X (S X)*, a list with separators: the engine builds one copy of X with S looping
        # back (a separate code path too)
        separated = st.builds(
            lambda head, x, sep: Seq(head + x + (Repeat(Seq(sep + x)),)),
            st.lists(children, max_size=1).map(tuple),
            st.lists(children, min_size=1, max_size=2).map(tuple),
            st.lists(children, min_size=1, max_size=2).map(tuple))
        return st.one_of(
            items.map(Seq), items.map(Seq),
            alternatives.map(Choice), alternatives.map(Choice),
            st.builds(lambda item, b: Repeat(item, b[0], b[1]), children, bounds),
            separated,
        )

    expr = st.recursive(leaf, extend, max_leaves=max_leaves)
    return Grammar({name: draw(expr) for name in names}, start="r0")


def matcher_or_reject(grammar: Grammar, vocab: Vocabulary) -> Matcher:
    """A Matcher, or reject the example when the grammar is left-recursive (after checking
    that the engine's refusal is justified by an independent analysis)."""
    note(f"grammar rules: {dict(grammar.rules)!r}")
    try:
        m = Matcher(grammar, vocab)
    except LeftRecursionError:
        assert is_left_recursive(grammar), "engine refused a grammar without left recursion"
        assume(False)
        raise
    assert not is_left_recursive(grammar), "engine accepted a left-recursive grammar"
    return m


# Ambiguous recursive grammars make the parser state grow exponentially (the engine refuses
# them past parser.MAX_PARSE_STACKS, see the tests at the end): walks stop early there.
AMBIGUITY_GUARD = 64


def assume_not_exploding(m: Matcher) -> None:
    if len(m.state) > AMBIGUITY_GUARD:
        event("stopped: exponential parser state")
        assume(False)


def assume_runs_stay_small(m: Matcher, length: int = 40) -> None:
    """Real vocabularies hold long runs of one byte (64 '=' in SmolLM2), and a mask walks
    every token: reject positions where such a run would make the state explode."""
    for b in range(256):
        c = m.copy()
        for _ in range(length):
            if not c.accept_bytes(bytes([b])):
                break
            assume_not_exploding(c)


# ----------------------------------------------------------------------------- IR analysis


def _fixpoint(grammar: Grammar, holds) -> set[str]:
    known: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, body in grammar.rules.items():
            if name not in known and holds(body, known):
                known.add(name)
                changed = True
    return known


def _productive(e: Expr, rules: set[str]) -> bool:
    if isinstance(e, Literal):
        return True
    if isinstance(e, ByteSet):
        return any(lo <= hi for lo, hi in e.ranges)
    if isinstance(e, CharSet):
        return bool(e.codepoint_ranges())
    if isinstance(e, Seq):
        return all(_productive(i, rules) for i in e.items)
    if isinstance(e, Choice):
        return any(_productive(i, rules) for i in e.items)
    if isinstance(e, Repeat):
        return e.min == 0 or _productive(e.item, rules)
    assert isinstance(e, Ref)
    return e.name in rules


def _nullable(e: Expr, rules: set[str]) -> bool:
    if isinstance(e, Literal):
        return not e.data
    if isinstance(e, ByteSet | CharSet):
        return False
    if isinstance(e, Seq):
        return all(_nullable(i, rules) for i in e.items)
    if isinstance(e, Choice):
        return any(_nullable(i, rules) for i in e.items)
    if isinstance(e, Repeat):
        return e.min == 0 or _nullable(e.item, rules)
    return e.name in rules


def _left_calls(e: Expr, productive: set[str], nullable: set[str]) -> set[str]:
    """Rules that a productive derivation of ``e`` can call before consuming a byte."""
    if not _productive(e, productive):
        return set()
    if isinstance(e, Ref):
        return {e.name}
    if isinstance(e, Seq):
        out: set[str] = set()
        for item in e.items:
            out |= _left_calls(item, productive, nullable)
            if not _nullable(item, nullable):
                break
        return out
    if isinstance(e, Choice):
        return set().union(*(_left_calls(i, productive, nullable) for i in e.items))
    if isinstance(e, Repeat):
        if e.max == 0 or not _productive(e.item, productive):
            return set()
        return _left_calls(e.item, productive, nullable)
    return set()


def is_left_recursive(grammar: Grammar) -> bool:
    """Whether some rule can call itself before consuming a byte, by a productive derivation."""
    productive = _fixpoint(grammar, _productive)
    nullable = _fixpoint(grammar, _nullable)
    graph = {n: _left_calls(b, productive, nullable) for n, b in grammar.rules.items()}
    for start in graph:
        seen: set[str] = set()
        work = list(graph[start])
        while work:
            n = work.pop()
            if n == start:
                return True
            if n not in seen:
                seen.add(n)
                work.extend(graph[n])
    return False


def sample_text(grammar: Grammar, rng: random.Random, depth_limit: int = 8) -> bytes | None:
    """A random string of the language (None when the random derivation got stuck)."""

    class Stuck(Exception):
        pass

    budget = [0]

    def gen(e: Expr, depth: int) -> bytes:
        budget[0] += 1
        if budget[0] > 4000:  # nested large repetitions multiply: give up, do not hang
            raise Stuck
        if isinstance(e, Literal):
            return e.data
        if isinstance(e, ByteSet):
            rs = [(lo, hi) for lo, hi in e.ranges if lo <= hi]
            if not rs:
                raise Stuck
            lo, hi = rng.choice(rs)
            return bytes([rng.randint(lo, hi)])
        if isinstance(e, CharSet):
            rs = e.codepoint_ranges()
            if not rs:
                raise Stuck
            lo, hi = rng.choice(rs)
            return chr(rng.randint(lo, hi)).encode("utf-8")
        if isinstance(e, Seq):
            return b"".join(gen(i, depth) for i in e.items)
        if isinstance(e, Choice):
            for item in rng.sample(e.items, len(e.items)):
                try:
                    return gen(item, depth)
                except Stuck:
                    pass
            raise Stuck
        if isinstance(e, Repeat):
            hi = e.min + 2 if e.max is None else e.max
            return b"".join(gen(e.item, depth) for _ in range(rng.randint(e.min, hi)))
        assert isinstance(e, Ref)
        if depth >= depth_limit:
            raise Stuck
        return gen(grammar.rules[e.name], depth + 1)

    for _ in range(10):
        budget[0] = 0
        try:
            return gen(grammar.rules[grammar.start], 0)
        except (Stuck, RecursionError):
            continue
    return None


# ----------------------------------------------------------------------------- vocabularies

EOS = 0
SPECIAL = 1  # a non-EOS special token: never allowed


@st.composite
def synthetic_vocabs(draw, grammar: Grammar, pool: str = POOL) -> Vocabulary:
    """Token 0 is EOS, token 1 another special token; then every single byte (so a viable text
    can always go on by one token), and multi-byte tokens cut from random strings of the
    language (they straddle rule boundaries and split UTF-8 characters), pool characters and
    their partial encodings, and a few duplicates; in shuffled order."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    pieces: list[bytes] = []
    for _ in range(6):
        text = sample_text(grammar, rng)
        if not text:
            continue
        for _ in range(4):
            i = rng.randrange(len(text))
            pieces.append(text[i:i + rng.randint(2, 6)])
        pieces.append(text[:16])
    encs = [c.encode() for c in pool]
    for _ in range(12):
        joined = b"".join(rng.choice(encs) for _ in range(rng.randint(1, 3)))
        cut = rng.randint(0, len(joined))
        pieces.append(rng.choice([joined, joined[:cut], joined[cut:]]))
    pieces = [p for p in pieces if len(p) > 1][:48]
    pieces += rng.sample(pieces, min(3, len(pieces)))  # duplicate tokens are legal
    tokens = [bytes([b]) for b in range(256)] + pieces
    rng.shuffle(tokens)
    return Vocabulary.from_tokens([b"", b""] + tokens, eos_ids=[EOS], special_ids=[SPECIAL],
                                  name="fuzz")


# ----------------------------------------------------------------------------- oracle


class Oracle:
    """Memoised answers of the reference recognizer for one grammar."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self._viable: dict[bytes, bool] = {}
        self._accepts: dict[bytes, bool] = {}

    def viable(self, data: bytes) -> bool:
        got = self._viable.get(data)
        if got is not None:
            return got
        # Not viable if a shorter prefix is not: find the longest prefix already answered.
        k = len(data) - 1
        while k >= 0 and data[:k] not in self._viable:
            k -= 1
        if k >= 0 and not self._viable[data[:k]]:
            got = False
        else:
            got = recognizes(self.grammar, data, prefix=True)
        self._viable[data] = got
        return got

    def accepts(self, data: bytes) -> bool:
        got = self._accepts.get(data)
        if got is None:
            got = self.viable(data) and recognizes(self.grammar, data)
            self._accepts[data] = got
        return got

    def next_bytes(self, data: bytes) -> list[int]:
        if not self.viable(data):
            return []
        return [b for b in range(256) if self.viable(data + bytes([b]))]

    def expected(self, vocab: Vocabulary, text: bytes, ids=None) -> np.ndarray:
        ids = range(vocab.size) if ids is None else ids
        out = []
        for t in ids:
            data = vocab.token_bytes[t]
            if t in vocab.eos_ids:
                out.append(self.accepts(text))
            elif not data:
                out.append(False)
            else:
                out.append(self.viable(text + data))
        return np.array(out, dtype=bool)


def describe(grammar: Grammar, vocab: Vocabulary, text: bytes, ids, got, want) -> str:
    bad = [(int(t), vocab.token_bytes[t], bool(g), bool(w))
           for t, g, w in zip(ids, got, want, strict=True) if g != w]
    return (f"mask disagrees with the oracle after text={text!r}\n"
            f"rules={dict(grammar.rules)!r}\n"
            + "\n".join(f"  token {t} {b!r}: engine {g}, oracle {w}" for t, b, g, w in bad[:8])
            + (f"\n  ... {len(bad)} in all" if len(bad) > 8 else ""))


def unpack(bitmask: np.ndarray, size: int) -> np.ndarray:
    return np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:size].astype(bool)


# ----------------------------------------------------------------------------- checks


def check_position(m: Matcher, vocab: Vocabulary, oracle: Oracle, text: bytes) -> np.ndarray:
    """Every property of one position; returns the mask."""
    grammar = oracle.grammar
    mask = m.next_token_mask().copy()
    want = oracle.expected(vocab, text)
    assert np.array_equal(mask, want), describe(grammar, vocab, text, range(vocab.size), mask, want)

    # accept_token agrees with the mask for every token, on copies; refusals change nothing.
    for t in range(vocab.size):
        c = m.copy()
        assert c.accept_token(t) == mask[t], f"accept_token({t}) != mask[{t}] after {text!r}"
        if not mask[t]:
            assert c.state == m.state and c.is_terminated() == m.is_terminated()

    words = np.zeros((2, (vocab.size + 31) // 32 + 1), dtype=np.int32)
    m.fill_next_token_bitmask(words, index=1)
    assert np.array_equal(unpack(words[1], vocab.size), mask)
    assert not words[0].any() and words[1, -1] == 0

    viable = oracle.viable(text)
    accepting = oracle.accepts(text)
    assert m.is_accepting() == accepting, f"is_accepting wrong after {text!r}"
    # No dead ends: every single byte is a token, so a viable text always has a next token.
    assert mask.any() == viable, f"dead end after {text!r}"

    check_forced(m, oracle, text)
    return mask


def check_forced(m: Matcher, oracle: Oracle, text: bytes) -> None:
    forced = m.forced_bytes()
    if oracle.accepts(text) or not oracle.viable(text):
        assert forced == b"", f"forced {forced!r} after {text!r}, which is accepting or dead"
        return
    # Each forced byte is the only way on, and the text so far is not complete.
    for k in range(min(len(forced), 3)):
        here = text + forced[:k]
        assert not oracle.accepts(here), f"forced {forced!r} passes a complete text {here!r}"
        assert oracle.next_bytes(here) == [forced[k]], \
            f"forced {forced!r} after {text!r}, but {here!r} may go on with {oracle.next_bytes(here)}"
    assert oracle.viable(text + forced)
    # ... and the engine stops where the grammar stops forcing.
    end = text + forced
    assert len(forced) == MAX_FORCED_BYTES or oracle.accepts(end) or \
        len(oracle.next_bytes(end)) != 1, \
        f"forced {forced!r} after {text!r} stops early: {end!r} can only go on with one byte"


def pick_token(data, mask: np.ndarray, vocab: Vocabulary) -> int:
    """A random allowed non-EOS token, multi-byte ones half the time."""
    allowed = [int(t) for t in np.nonzero(mask)[0] if t not in vocab.eos_ids]
    long = [t for t in allowed if len(vocab.token_bytes[t]) > 1]
    if long and data.draw(st.booleans(), label="prefer multi-byte"):
        allowed = long
    return allowed[data.draw(st.integers(0, len(allowed) - 1), label="token")]


# ----------------------------------------------------------------------------- properties


def walk_and_check(grammar: Grammar, vocab: Vocabulary, data, max_steps: int = MAX_STEPS) -> None:
    """``_walk_and_check``; a grammar the engine refuses as too ambiguous (a documented,
    clear error) ends the example."""
    try:
        _walk_and_check(grammar, vocab, data, max_steps)
    except AmbiguousGrammarError:
        event("stopped: refused as too ambiguous")
        assume(False)


def _walk_and_check(grammar: Grammar, vocab: Vocabulary, data, max_steps: int) -> None:
    """A random walk under the mask: at each position every token's mask bit, EOS,
    accept_token, the bitmask, is_accepting and forced_bytes agree with the reference
    recognizer; a copy moved elsewhere leaves the walk alone; rollback restores each
    position's mask exactly; the same text fed as bytes (one chunk, or byte by byte) gives
    the same mask."""
    m = matcher_or_reject(grammar, vocab)
    oracle = Oracle(grammar)
    event("language is empty" if not oracle.viable(b"") else "language is not empty")
    text = b""
    masks = [check_position(m, vocab, oracle, text)]
    forced = [m.forced_bytes()]
    for _ in range(max_steps):
        mask = masks[-1]
        if not mask.any():
            break
        if mask[EOS] and data.draw(st.integers(0, 3), label="stop") == 0:
            before = m.copy()
            assert m.accept_token(EOS) and m.is_terminated()
            assert not m.next_token_mask().any() and m.forced_bytes() == b""
            assert not m.accept_token(EOS) and not m.accept_bytes(b"a")
            assert not before.is_terminated()  # the copy was not affected
            m.rollback(1)
            assert not m.is_terminated()
            assert np.array_equal(m.next_token_mask(), mask)
            break
        if not mask[2:].any():
            break
        t = pick_token(data, mask, vocab)
        side = m.copy()
        side_token = pick_token(data, mask, vocab)
        assert side.accept_token(side_token)
        assert m.accept_token(t)
        assume_not_exploding(m)
        assume_not_exploding(side)
        side_text = text + vocab.token_bytes[side_token]
        text += vocab.token_bytes[t]
        masks.append(check_position(m, vocab, oracle, text))
        forced.append(m.forced_bytes())
        # The copy went its own way and kept to it.
        fresh = Matcher(grammar, vocab)
        assert fresh.accept_bytes(side_text)
        assert np.array_equal(side.next_token_mask(), fresh.next_token_mask())
        side.rollback(1)
        assert np.array_equal(side.next_token_mask(), mask)

    event(f"walked {len(masks) - 1} tokens")
    # The mask depends on the text only, not on how it was cut into tokens.
    for chunks in ([text], [bytes([b]) for b in text]):
        other = Matcher(grammar, vocab)
        assert other.compiled is m.compiled
        for chunk in chunks:
            assert other.accept_bytes(chunk)
        assert np.array_equal(other.next_token_mask(), masks[-1])

    # Rollback restores each earlier position exactly, twice in a row.
    n = len(masks) - 1
    with pytest.raises(MatcherError):
        m.rollback(n + 1)
    for _ in range(2):
        back = data.draw(st.integers(0, n), label="rollback")
        m.rollback(back)
        n -= back
        assert np.array_equal(m.next_token_mask(), masks[n])
        assert m.forced_bytes() == forced[n]
    m.reset()
    assert np.array_equal(m.next_token_mask(), masks[0])


@fuzz_settings(60)
@given(grammar=grammars(), data=st.data())
def test_synthetic_vocab_walk_agrees_with_oracle(grammar, data):
    """Random grammars over random vocabularies: see ``walk_and_check``."""
    walk_and_check(grammar, data.draw(synthetic_vocabs(grammar)), data)


def _handcrafted() -> dict[str, Grammar]:
    """Grammars aimed at the engine's shortcuts: a non-recursive rule too big to inline (kept
    as a call), a loop over more than 32 bytes (token slices) inside recursion, deep nesting
    that tokens leave several frames at once, chains of nullable recursive rules, and
    character classes that straddle every UTF-8 length."""
    from formcast.grammar.ir import chars, choice, lit, opt, ref, repeat, seq, star

    not_bracket = chars("[]", negated=True)
    return {
        "inline_limit": Grammar({
            "root": seq(lit("<"), ref("big"), lit(">"), ref("big"), opt(lit("!"))),
            "big": choice(lit("q"), lit("rs"), lit("L" * 6001)),
        }),
        "lazy_repeats": Grammar({
            "root": seq(repeat(choice(lit("x"), lit("yz"), ref("inner")), 2, 40), lit(";"),
                        opt(ref("root"))),
            "inner": seq(lit("<"), repeat(chars("ab"), 0, 12), repeat(lit("c"), 9, 10), lit(">")),
        }),
        "slice_in_recursion": Grammar({
            "root": seq(lit("["), star(choice(ref("root"), not_bracket)), lit("]")),
        }),
        "deep_nesting": Grammar({"root": seq(lit("("), opt(ref("root")), lit(")"))}),
        "nullable_frames": Grammar({
            "root": seq(lit("x"), ref("ys"), ref("ys"), opt(ref("root")), lit(";")),
            "ys": opt(seq(lit("y"), ref("ys"), opt(lit("z")))),
        }),
        "utf8_edges": Grammar({
            "root": seq(repeat(chars([(0x7F, 0x80), (0x7FF, 0x800), (0xFFFF, 0x10000)]), 1, 3),
                        opt(ref("root"))),
        }),
        "negated_multibyte": Grammar({
            "root": seq(lit('"'), star(chars([('"', '"'), ("\\", "\\"), ("é", "中")], negated=True)),
                        lit('"'), opt(seq(lit(","), ref("root")))),
        }),
        "json_like": Grammar({
            "root": ref("value"),
            "value": choice(ref("object"), ref("array"), seq(lit('"'), star(chars('ab"', negated=True)), lit('"')),
                            lit("0"), lit("true")),
            "object": seq(lit("{"), opt(seq(lit('"k":'), ref("value"),
                                            star(seq(lit(',"k":'), ref("value"))))), lit("}")),
            "array": seq(lit("["), opt(seq(ref("value"), star(seq(lit(","), ref("value"))))), lit("]")),
        }),
    }


HANDCRAFTED = _handcrafted()


@pytest.mark.parametrize("name", sorted(HANDCRAFTED))
@fuzz_settings(5)
@given(data=st.data())
def test_handcrafted_grammar_walks_agree_with_oracle(name, data):
    """The same checks as the random walks, on grammars built to reach the engine's
    shortcuts (see ``_handcrafted``), with longer walks."""
    grammar = HANDCRAFTED[name]
    walk_and_check(grammar, data.draw(synthetic_vocabs(grammar)), data, max_steps=12)


@fuzz_settings(15)
@given(lo=st.integers(0, 45), extra=st.one_of(st.none(), st.integers(0, 20)),
       negated=st.booleans(), data=st.data())
def test_counted_runs_of_a_large_byte_set_agree_with_oracle(lo, extra, negated, data):
    """``[^>]{lo,hi}`` (or a plain ASCII range) between delimiters, inside recursion: the
    engine allows runs of such bytes as a block while they fit the count, so runs of every
    length around the bounds must be allowed or refused exactly."""
    hi = None if extra is None else lo + extra
    run = CharSet(((ord(">"), ord(">")),), negated=True) if negated else ByteSet(((0x20, 0x3D),))
    grammar = Grammar({"r0": Seq((Literal(b"<"), Repeat(run, lo, hi), Literal(b">"),
                                  Repeat(Ref("r0"), 0, 1)))}, start="r0")
    cut = data.draw(st.integers(1, 70), label="run length")
    tokens = [bytes([b]) for b in range(256)]
    tokens += [b"x" * k for k in range(2, 72)] + [b"x" * cut + b">", b"x" * cut + b"><x",
                                                  b"<" + b"x" * cut, "é".encode() * 3]
    vocab = Vocabulary.from_tokens([b"", b""] + tokens, eos_ids=[EOS], special_ids=[SPECIAL],
                                   name="runs")
    walk_and_check(grammar, vocab, data, max_steps=6)


@fuzz_settings(25)
@given(inner=st.tuples(st.integers(0, 9), st.integers(20, 40)),
       outer=st.tuples(st.integers(0, 4), st.integers(12, 20)), data=st.data())
def test_nested_counted_repetitions_share_verdicts_only_where_exact(inner, outer, data):
    """``<(x{a,b} ";"){c,d}>`` with both bounds well past the longest token (10 bytes):
    positions inside later copies of both repetitions share one token verdict with earlier
    ones (Automaton.copy_shape). Near either minimum or maximum the verdicts differ, so a
    walk through many copies is checked position by position against the oracle."""
    (a, extra_a), (c, extra_c) = inner, outer
    item = Seq((Repeat(ByteSet(((ord("x"), ord("x")),)), a, a + extra_a), Literal(b";")))
    grammar = Grammar({"root": Seq((Literal(b"<"), Repeat(item, c, c + extra_c),
                                    Literal(b">")))}, start="root")
    tokens = {b"<", b">", b";", b";>", b"x>", b"<x", b"<;"}
    tokens |= {b"x" * k for k in range(1, 11)} | {b"x" * k + b";" for k in range(1, 10)}
    tokens |= {(b"x" * k + b";") * r for k in range(0, 4) for r in range(2, 11)
               if (k + 1) * r <= 10}
    vocab = Vocabulary.from_tokens([b"", b""] + sorted(tokens), eos_ids=[EOS],
                                   special_ids=[SPECIAL], name="nested-runs")
    m = matcher_or_reject(grammar, vocab)
    walk_and_check(grammar, vocab, data, max_steps=80)
    shared = m.compiled.masks._horizon_verdicts
    event("verdicts shared" if shared else "no verdict shared")


@fuzz_settings(20)
@given(bounds=st.tuples(st.integers(0, 3), st.integers(9, 16)), depth=st.integers(1, 3),
       data=st.data())
def test_counted_run_inside_a_called_rule_shares_masks_only_where_exact(bounds, depth, data):
    """``r ::= "<" x{a,b} ">" | "[" r "]"``: inside brackets the run sits in a called frame,
    so tokens such as ``xx>]`` return below it mid-token and the mask comes from a walk of
    the whole parser state. That walk is shared by the same position in other copies of the
    run (MaskCache._full_walk) only while the maximum is further away than it looked: every
    position of the run, up to the maximum, is checked against the oracle, then a random
    walk goes on from there."""
    low, high = bounds
    run = Repeat(ByteSet(((ord("x"), ord("x")),)), low, high)
    grammar = Grammar({"r": Choice((Seq((Literal(b"<"), run, Literal(b">"))),
                                    Seq((Literal(b"["), Ref("r"), Literal(b"]")))))},
                      start="r")
    tokens = {b"<", b">", b"[", b"]", b"[<", b"[[", b">]", b"]]", b"[[<"}
    tokens |= {b"x" * k for k in range(1, 7)} | {b"x" * k + b">" for k in range(1, 6)}
    tokens |= {b"x" * k + b">]" for k in range(1, 5)} | {b"x" * k + b">]]" for k in range(1, 4)}
    vocab = Vocabulary.from_tokens([b"", b""] + sorted(tokens), eos_ids=[EOS],
                                   special_ids=[SPECIAL], name="called-runs")
    m = matcher_or_reject(grammar, vocab)
    oracle = Oracle(grammar)
    text = b"[" * depth + b"<"
    assert m.accept_bytes(text)
    for _ in range(high + 1):
        check_position(m, vocab, oracle, text)
        if not m.accept_bytes(b"x"):
            break
        text += b"x"
    assert len(text) == depth + 1 + high  # the run went exactly to its maximum
    walk_and_check(grammar, vocab, data, max_steps=30)


@pytest.mark.parametrize("maximum", [30, 41])
def test_long_tokens_are_walked_again_where_a_shared_verdict_looked_too_far(maximum):
    """``<[a-z]{0,max}>`` with tokens up to 13 bytes: the verdict of the run's first
    positions serves later ones while the maximum is more than a token away; closer to it,
    tokens shorter than the distance keep that verdict and only the longer ones are walked
    again (MaskCache._patched). Every position up to the maximum is checked against the
    oracle: a long run of ``x`` must stop being allowed exactly where it would overflow."""
    grammar = Grammar({"root": Seq((Literal(b"<"), Repeat(ByteSet(((ord("a"), ord("z")),)),
                                                               0, maximum),
                                    Literal(b">")))}, start="root")
    tokens = {b"x" * k for k in range(2, 13)} | {b"x" * k + b">" for k in range(1, 13)}
    vocab = Vocabulary.from_tokens([b"", b""] + [bytes([b]) for b in range(256)]
                                   + sorted(tokens), eos_ids=[EOS], special_ids=[SPECIAL],
                                   name="long-runs")
    m = Matcher(grammar, vocab)
    oracle = Oracle(grammar)
    text = b"<"
    assert m.accept_bytes(text)
    for _ in range(maximum):
        check_position(m, vocab, oracle, text)
        assert m.accept_bytes(b"x")
        text += b"x"
    check_position(m, vocab, oracle, text)


@pytest.mark.parametrize("maximum", [11, 14, 24])
def test_run_followed_by_more_agrees_with_oracle_at_every_position(maximum):
    """``<[A-Za-zé]{0,max}>!``, tokens up to 15 bytes, some ending in ``é`` or crossing
    ``>!``: the run's slice chain repeats copy after copy (its later entries are -1), tokens
    leave the slice at every depth, and near the maximum the long ones overflow. Every
    position up to the maximum, midway through ``é`` included, is checked against the
    oracle."""
    letters = CharSet(((ord("A"), ord("Z")), (ord("a"), ord("z")), (0xE9, 0xE9)))
    grammar = Grammar({"root": Seq((Literal(b"<"), Repeat(letters, 0, maximum),
                                    Literal(b">!")))}, start="root")
    e = "é".encode()
    tokens = {b"x" * k for k in range(2, 16)} | {b"x" * k + e for k in range(0, 13)}
    tokens |= {b"x" * k + b">" for k in range(1, 14)} | {b"x" * k + b">!" for k in range(1, 14)}
    tokens |= {e + b"x" * k for k in range(1, 13)} | {e + b">!"}
    singles = {bytes([b]) for b in range(256)}
    vocab = Vocabulary.from_tokens([b"", b""] + sorted(singles) + sorted(tokens - singles),
                                   eos_ids=[EOS], special_ids=[SPECIAL], name="folded-runs")
    m = Matcher(grammar, vocab)
    oracle = Oracle(grammar)
    text = b"<"
    assert m.accept_bytes(text)
    check_position(m, vocab, oracle, text)
    for step in range(maximum):
        for part in ([e[:1], e[1:]] if step % 3 == 2 else [b"x"]):
            assert m.accept_bytes(part)
            text += part
            check_position(m, vocab, oracle, text)
    assert len(text.decode()) == maximum + 1  # the run went exactly to its maximum


def test_counted_run_in_two_inlined_copies_of_a_rule_shares_verdicts_per_copy():
    """``text ::= "'" [a-zé]{0,12} "'"`` used twice, once before ``A`` and once before
    ``B``. Each inlined copy of ``text`` has its own lazy repetition: positions one copy
    apart share a verdict inside one use (Automaton.copy_shape), but never across the two
    uses, whose continuations differ. Midway through ``é`` a state holds no NFA state
    outside the repetition, so only the repetition's own identity keeps the uses apart: every
    position of both runs, bytes of ``é`` included, is checked against the oracle, the
    ``A`` use first."""
    text_rule = Seq((Literal(b"'"), Repeat(CharSet(((ord("a"), ord("z")), (0xE9, 0xE9))), 0, 12),
                     Literal(b"'")))
    grammar = Grammar({"root": Choice((Seq((Literal(b"1"), Ref("text"), Literal(b"A"))),
                                       Seq((Literal(b"2"), Ref("text"), Literal(b"B"))))),
                       "text": text_rule}, start="root")
    e1, e2 = "é".encode()
    tokens = {b"1'", b"2'", b"'A", b"'B", bytes([e1]), bytes([e2]), "é".encode()}
    tokens |= {b"a" * k for k in range(1, 4)} | {bytes([e2]) + b"'A", bytes([e2]) + b"'B",
                                                 bytes([e2]) + b"a'A", bytes([e2]) + b"a'B",
                                                 b"a'A", b"a'B"}
    vocab = Vocabulary.from_tokens([b"", b""] + [bytes([b]) for b in range(256)]
                                   + sorted(tokens - {bytes([b]) for b in range(256)}),
                                   eos_ids=[EOS], special_ids=[SPECIAL], name="two-texts")
    m = Matcher(grammar, vocab)
    oracle = Oracle(grammar)
    for opener in (b"1'", b"2'"):
        m.reset()
        text = opener
        assert m.accept_bytes(text)
        for step in range(8):  # a, é, a, é...: the é positions are mid-character
            for part in ([b"a"] if step % 2 == 0 else [bytes([e1]), bytes([e2])]):
                check_position(m, vocab, oracle, text)
                assert m.accept_bytes(part)
                text += part
        check_position(m, vocab, oracle, text)
    assert m.compiled.masks._horizon_verdicts  # shared within a use: the point of shapes


@fuzz_settings(40)
@given(grammar=grammars(), data=st.data())
def test_permuted_and_rebuilt_vocab_share_nothing_wrong(grammar, data):
    """The same grammar over a vocabulary with the same tokens in another order gives the
    permuted mask (token ids are mapped right through the trie and the cache), and a grammar
    rebuilt from equal rules shares the compiled cache and gives identical masks."""
    vocab = data.draw(synthetic_vocabs(grammar))
    m = matcher_or_reject(grammar, vocab)
    perm = data.draw(st.permutations(range(vocab.size)))
    inverse = np.argsort(perm)
    permuted = Vocabulary.from_tokens([vocab.token_bytes[p] for p in perm],
                                      eos_ids=[int(inverse[EOS])],
                                      special_ids=[int(inverse[SPECIAL])], name="permuted")
    rebuilt = Grammar(dict(grammar.rules), start=grammar.start)
    twin = Matcher(rebuilt, Vocabulary.from_tokens(vocab.token_bytes, eos_ids=[EOS],
                                                   special_ids=[SPECIAL], name="twin"))
    assert twin.compiled is m.compiled
    pm = Matcher(grammar, permuted)
    oracle = Oracle(grammar)
    text = b""
    for _ in range(MAX_STEPS):
        mask = m.next_token_mask()
        assert np.array_equal(twin.next_token_mask(), mask)
        assert np.array_equal(pm.next_token_mask(), mask[perm])
        allowed = np.nonzero(mask)[0]
        allowed = allowed[allowed != EOS]
        if allowed.size == 0:
            break
        t = int(allowed[data.draw(st.integers(0, allowed.size - 1), label="token")])
        assert m.accept_token(t) and twin.accept_token(t) and pm.accept_token(int(inverse[t]))
        assume_not_exploding(m)
        text += vocab.token_bytes[t]
    want = oracle.expected(vocab, text)
    assert np.array_equal(m.next_token_mask(), want), \
        describe(grammar, vocab, text, range(vocab.size), m.next_token_mask(), want)


@fuzz_settings(80)
@given(grammar=grammars(), data=st.data())
def test_language_samples_and_their_mutations_agree_with_oracle(grammar, data):
    """Random strings of the language are accepted (fed whole and byte by byte, with
    ``is_accepting`` right at every cut), and strings one edit away from them are accepted
    exactly when the oracle says so: the parser alone, without masks."""
    vocab = Vocabulary.from_tokens([b""] + [bytes([b]) for b in range(256)], eos_ids=[0])
    m = matcher_or_reject(grammar, vocab)
    oracle = Oracle(grammar)
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    samples = [s for s in (sample_text(grammar, rng, depth_limit=12) for _ in range(6))
               if s is not None]
    for text in samples:
        step = m.copy()
        for k in range(len(text)):
            assert step.is_accepting() == oracle.accepts(text[:k]), f"at {text[:k]!r}"
            assert step.accept_bytes(text[k:k + 1]), \
                f"{text[:k + 1]!r} refused, rules={dict(grammar.rules)!r}"
            assume_not_exploding(step)
        assert step.is_accepting(), f"{text!r} is not complete, rules={dict(grammar.rules)!r}"
        whole = m.copy()
        assert whole.accept_bytes(text) and whole.is_accepting()
        for _ in range(4):
            i = rng.randint(0, len(text))
            edit = rng.choice([b"", bytes([rng.randrange(256)]), rng.choice(samples)[:3]])
            mutant = text[:i] + edit + text[i + rng.randint(0, 1):]
            c = m.copy()
            assert c.accept_bytes(mutant) == oracle.viable(mutant), f"accept_bytes({mutant!r})"
            if oracle.viable(mutant):
                assert c.is_accepting() == oracle.accepts(mutant), f"is_accepting({mutant!r})"


@fuzz_settings(30)
@given(grammar=grammars(), data=st.data())
def test_tiny_internal_limits_do_not_change_answers(grammar, data):
    """The engine's bounded memos (parser steps and closures, numbered dense states, masks)
    evict and restart under load; with every bound shrunk to a few entries, so that eviction
    happens all the time, the answers must not change."""
    from formcast.engine import mask_cache, parser

    vocab = data.draw(synthetic_vocabs(grammar))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parser, "_MEMO_LIMIT", 3, raising=False)
        mp.setattr(mask_cache, "DENSE_STATE_LIMIT", 2, raising=False)
        mp.setattr(parser.DenseStates.__init__, "__defaults__", (2,))
        compiled = matcher_or_reject(grammar, vocab).compiled
        shared = compiled.masks
        compiled.masks = mask_cache.MaskCache(compiled.automaton, compiled.parser, compiled.table,
                                              budget=MemoBudget(2 * compiled.table.size))
        try:
            walk_and_check(grammar, vocab, data)
        finally:
            compiled.masks = shared


# ----------------------------------------------------------------------------- SmolLM2

_FIRST_BYTES: dict[str, np.ndarray] = {}


def _first_bytes(vocab: Vocabulary) -> np.ndarray:
    got = _FIRST_BYTES.get(vocab.fingerprint)
    if got is None:
        got = np.array([b[0] if b else -1 for b in vocab.token_bytes], dtype=np.int16)
        _FIRST_BYTES[vocab.fingerprint] = got
    return got


@pytest.mark.model
@fuzz_settings(15)
@given(grammar=grammars(pool=POOL_ASCII + "é€中", max_leaves=MAX_LEAVES + 2), data=st.data())
def test_smollm2_vocab_sampled_tokens_agree_with_oracle(smollm2_vocab, grammar, data):
    """Over the real SmolLM2 vocabulary: sampled allowed tokens, refused tokens that start
    with a viable byte (the hard ones) and random tokens agree with the oracle; EOS and the
    special tokens are right; a walk under the mask never dead-ends."""
    vocab = smollm2_vocab
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    # Only languages with some length to walk (tiny ones are covered by the synthetic runs).
    assume(any(len(sample_text(grammar, rng) or b"") >= 4 for _ in range(3)))
    m = matcher_or_reject(grammar, vocab)
    oracle = Oracle(grammar)
    first = _first_bytes(vocab)
    specials = sorted(vocab.special_ids)
    text = b""
    for _ in range(MAX_STEPS):
        assume_runs_stay_small(m)
        mask = m.next_token_mask()
        if not oracle.viable(text):
            assert not mask.any()
            break
        allowed = np.nonzero(mask)[0].tolist()
        starts = np.isin(first, oracle.next_bytes(text))
        if not allowed:  # a dead end, unless no token of this vocabulary can go on
            stuck = np.nonzero(starts)[0].tolist()
            assert not oracle.expected(vocab, text, stuck).any(), \
                f"dead end after {text!r}, rules={dict(grammar.rules)!r}"
            break
        hard = np.nonzero(starts & ~mask)[0].tolist()
        ids = (rng.sample(allowed, min(40, len(allowed))) + rng.sample(hard, min(40, len(hard)))
               + rng.sample(range(vocab.size), 40) + specials)
        want = oracle.expected(vocab, text, ids)
        assert np.array_equal(mask[ids], want), describe(grammar, vocab, text, ids, mask[ids], want)
        check_forced(m, oracle, text)
        candidates = [t for t in allowed if t not in vocab.eos_ids]
        if not candidates:
            break
        long = [t for t in candidates if len(vocab.token_bytes[t]) > 1]
        t = rng.choice(long if long and rng.random() < 0.7 else candidates)
        assert m.accept_token(t)
        assume_not_exploding(m)
        text += vocab.token_bytes[t]
    event(f"walked {len(text)} bytes")


# ----------------------------------------------------------------------------- regressions
#
# Found by this file on the engine before commit ccdb9a3: the parser stopped entering rule
# calls once a stack held MAX_STACK_DEPTH (2000) frames, so a right-recursive list of 2000
# items was refused mid-way, and at that depth the mask (per-state verdicts, blind to the
# depth) allowed tokens that accept_token refused.


def test_right_recursive_list_of_2500_items_is_accepted():
    grammar = Grammar({"root": Seq((Literal(b"["), Ref("items"), Literal(b"]"))),
                       "items": Seq((Literal(b"a"),
                                     Repeat(Seq((Literal(b","), Ref("items"))), 0, 1)))})
    vocab = Vocabulary.from_tokens([b"", b"a", b",", b"]", b"[", b"a,"], eos_ids=[0])
    m = Matcher(grammar, vocab)
    assert m.accept_token(4)
    for i in range(2500):
        assert m.next_token_mask()[5], f"item {i}"
        assert m.accept_token(5), f"item {i}"
    assert m.accept_bytes(b"a]") and m.is_accepting()
    assert recognizes(grammar, b"[" + b"a," * 30 + b"a]")


def test_mask_agrees_with_accept_token_beyond_2000_nested_frames():
    grammar = Grammar({"root": Seq((Literal(b"("), Repeat(Ref("root"), 0, 1), Literal(b")")))})
    vocab = Vocabulary.from_tokens([b"", b"(", b")", b"((((", b"))"], eos_ids=[0])
    m = Matcher(grammar, vocab)
    for depth in range(1, 2101):
        assert m.accept_token(1), f"depth {depth}"
        if depth % 500 == 0 or depth > 1995:
            mask = m.next_token_mask()
            assert mask.tolist() == [False, True, True, True, True], f"depth {depth}"
            for t in range(vocab.size):
                assert m.copy().accept_token(t) == mask[t], f"depth {depth}, token {t}"
    assert m.accept_bytes(b")" * 2100) and m.is_accepting()


# ----------------------------------------------------------------------------- known bugs

# A stack-set parser without shared stacks: in an ambiguous recursive grammar every
# combination of pending return states is a separate stack, so the state grows
# exponentially with the input (here ~1.85x per byte: 1.2 million stacks and 20 s after 24
# bytes) until the process runs out of memory; the reference recognizer (Earley) answers in
# 4 ms. The mask walks every token from the current state, so one long token (SmolLM2 has
# 64 '=' in a row) is enough: the very first mask exhausts memory. ``root ::= "a" root?
# root? root?`` grows the same way (~1.6x per byte).
_AMBIGUOUS_PROBE = """
import resource
resource.setrlimit(resource.RLIMIT_DATA, (200 * 2**20, resource.RLIM_INFINITY))
from formcast.engine.matcher import Matcher
from formcast.engine.vocab import Vocabulary
from formcast.errors import FormcastError
from formcast.grammar.ir import Grammar
from formcast.grammar.recognize import recognizes

grammar = Grammar.from_gbnf('root ::= "=" | "=" root{2,4}')
assert recognizes(grammar, b"=" * 40)
runs = Vocabulary.from_tokens([b""] + [b"=" * k for k in range(1, 65)], eos_ids=[0])
try:  # refusing with a clear error is acceptable; running out of memory is not
    mask = Matcher(grammar, runs).next_token_mask()
    assert mask[1:].all() and not mask[0]
    m = Matcher(grammar, Vocabulary.from_tokens([b"", b"="], eos_ids=[0]))
    for i in range(40):
        assert m.accept_bytes(b"="), f"refused byte {i}"
    assert m.is_accepting()
except FormcastError as exc:
    print("refused:", exc)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="needs RLIMIT_DATA")
def test_ambiguous_recursion_is_refused_within_memory():
    """root ::= "=" | "=" root{2,4} multiplies its pending parses at every byte: the first
    mask over a 64-byte '=' token, or 40 bytes of text, used to exhaust memory. Now it is
    answered or refused with a clear error under a 200 MB limit."""
    proc = subprocess.run([sys.executable, "-c", _AMBIGUOUS_PROBE], capture_output=True,
                          text=True, timeout=300)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    assert proc.returncode == 0, last[:300]
    if proc.stdout.startswith("refused:"):
        assert "too ambiguous" in proc.stdout and "'root'" in proc.stdout


def test_ambiguity_error_leaves_the_matcher_usable():
    grammar = Grammar.from_gbnf('root ::= "=" | "=" root{2,4}')
    m = Matcher(grammar, Vocabulary.from_tokens([b"", b"="], eos_ids=[0]))
    accepted = 0
    with pytest.raises(AmbiguousGrammarError) as info:
        for _ in range(60):
            assert m.accept_token(1)
            accepted += 1
    assert info.value.stacks > info.value.limit and info.value.rules == ["root"]
    assert 5 < accepted < 60
    m.rollback(accepted - 1)  # the refused token left the state as it was
    assert m.is_accepting() and m.accept_token(1)


def test_deep_unambiguous_recursion_is_not_refused():
    grammar = Grammar.from_gbnf('root ::= "[" root? "]"')
    m = Matcher(grammar, Vocabulary.from_tokens([b"", b"[", b"]"], eos_ids=[0]))
    assert m.accept_bytes(b"[" * 1500 + b"]" * 1500) and m.is_accepting()


# Regressions found by the random walks on commit fe73cf1 (introduced by 620bb2f, "inlined
# rules used again are copied from their first build"): a rule inlined inside a lazily copied
# repetition (bound >= 8) was remembered by its NFA state range, but compacting the
# repetition's item renumbers those states; the next use of the rule copied a stale range:
# an IndexError at compile time, or, when the range still existed, other states — a wrong
# language whose valid prefixes dead-end. Fixed: compaction forgets fragments inside it.
def test_rule_used_in_a_large_repetition_and_again_compiles():
    grammar = Grammar.from_gbnf('root ::= item{0,8} item\nitem ::= "a" | "b"')
    vocab = Vocabulary.from_tokens([b"", b"a", b"b"], eos_ids=[0])
    m = Matcher(grammar, vocab)
    assert m.accept_bytes(b"ab") and m.is_accepting()


def test_rule_used_in_a_large_repetition_and_after_a_literal_keeps_its_language():
    grammar = Grammar.from_gbnf('root ::= item{0,8} "xx" item\nitem ::= "a" | "b"')
    vocab = Vocabulary.from_tokens([b"", b"a", b"b", b"x", b"xx", b"xxa"], eos_ids=[0])
    assert recognizes(grammar, b"xxa") and recognizes(grammar, b"abxxb")
    m = Matcher(grammar, vocab)
    assert m.next_token_mask().tolist() == [False, True, True, True, True, True]
    assert m.accept_token(4)
    assert m.next_token_mask().tolist() == [False, True, True, False, False, False]
    assert m.accept_token(1) and m.is_accepting()
