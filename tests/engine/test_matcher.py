"""Matcher correctness on real vocabularies: masks agree with accept_token and with the slow
reference recognizer, walks under the mask never dead-end, rollback restores masks exactly."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formcast.engine.lexer import compile_automaton
from formcast.engine.matcher import Matcher
from formcast.errors import GrammarError, LeftRecursionError, MatcherError
from formcast.grammar.ir import Grammar, chars, choice, lit, opt, plus, ref, repeat, seq, star
from formcast.grammar.recognize import recognizes
from formcast.grammar.regex import regex_to_expr

WS = repeat(chars(" \n\t"), 0, 8)
STRING = seq(
    lit('"'),
    star(choice(chars([(0, 0x1F), '"', "\\"], negated=True),
                seq(lit("\\"), chars('"\\/bfnrt')),
                seq(lit("\\u"), repeat(chars([("0", "9"), ("a", "f"), ("A", "F")]), 4, 4)))),
    lit('"'),
)
NUMBER = regex_to_expr(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def json_grammar() -> Grammar:
    member = seq(STRING, WS, lit(":"), WS, ref("value"))
    return Grammar({
        "root": seq(WS, ref("value"), WS),
        "value": choice(ref("object"), ref("array"), STRING, NUMBER, lit("true"), lit("false"),
                        lit("null")),
        "object": seq(lit("{"), WS, opt(seq(member, star(seq(WS, lit(","), WS, member)))), WS,
                      lit("}")),
        "array": seq(lit("["), WS, opt(seq(ref("value"), star(seq(WS, lit(","), WS, ref("value"))))),
                     WS, lit("]")),
    })


def grammars() -> dict[str, Grammar]:
    return {
        "json": json_grammar(),
        "tool_call": Grammar({"root": seq(
            lit('{"name": '), choice(lit('"get_weather"'), lit('"search"')),
            lit(', "arguments": {"city": '), STRING, lit(', "days": '),
            regex_to_expr("[1-9]|1[0-4]"), lit("}}"))}),
        "arith": Grammar({
            "root": ref("expr"),
            "expr": seq(ref("term"), star(seq(WS, chars("+-"), WS, ref("term")))),
            "term": seq(ref("factor"), star(seq(WS, chars("*/"), WS, ref("factor")))),
            "factor": choice(plus(chars([("0", "9")])), seq(lit("("), WS, ref("expr"), WS, lit(")"))),
        }),
        "date": Grammar({"root": regex_to_expr(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])")}),
        "cjk_list": Grammar({"root": seq(lit("["), opt(seq(ref("item"), star(seq(lit(", "), ref("item"))))),
                                         lit("]")),
                             "item": seq(lit('"'), repeat(chars([("一", "龥"), ("a", "z")]), 1, 6), lit('"'))}),
        "literal": Grammar({"root": lit("The quick brown fox jumps over the lazy dog, then naps.")}),
    }


GRAMMARS = grammars()


def structural_tokens(vocab, limit: int = 600) -> list[int]:
    """Tokens that straddle grammar boundaries or split UTF-8: the ones that go wrong first."""
    marks = set(b'{}[]":,\\ \n0123456789-+*/()')
    out = []
    for tid, data in enumerate(vocab.token_bytes):
        if data and (len(set(data) & marks) >= 2 or any(b >= 0x80 for b in data)):
            out.append(tid)
    random.Random(0).shuffle(out)
    return out[:limit]


def check_mask_against_accept(m: Matcher, vocab, rng: random.Random, probe: list[int]) -> np.ndarray:
    mask = m.next_token_mask()
    allowed = np.nonzero(mask)[0].tolist()
    refused = np.nonzero(~mask)[0].tolist()
    sample = rng.sample(allowed, min(150, len(allowed))) + rng.sample(refused, min(150, len(refused)))
    for tid in sample + probe:
        assert m.copy().accept_token(tid) == bool(mask[tid]), (
            f"mask and accept_token disagree on token {tid} {vocab.token_bytes[tid]!r}")
    return mask


def walk(grammar: Grammar, vocab, seed: int, steps: int = 40, probe_oracle: bool = True) -> bytes:
    """A random walk under the mask; checks the invariants at every step."""
    rng = random.Random(seed)
    m = Matcher(grammar, vocab)
    probe = structural_tokens(vocab, 200)
    text = b""
    eos = sorted(vocab.eos_ids)[0]
    for step in range(steps):
        mask = check_mask_against_accept(m, vocab, rng, probe if step < 3 else probe[:40])
        allowed = np.nonzero(mask)[0]
        assert allowed.size, f"dead end after {text!r}"
        assert bool(mask[eos]) == m.is_accepting()
        if probe_oracle:
            for tid in rng.sample(allowed.tolist(), min(5, allowed.size)):
                if tid not in vocab.eos_ids:
                    assert recognizes(grammar, text + vocab.token_bytes[tid], prefix=True)
        if mask[eos] and (rng.random() < 0.3 or step == steps - 1):
            assert m.accept_token(eos) and m.is_terminated()
            assert recognizes(grammar, text), text
            return text
        choices = [t for t in allowed.tolist() if t not in vocab.eos_ids] or [eos]
        tid = rng.choice(choices)
        assert m.accept_token(tid)
        if tid not in vocab.eos_ids:
            text += vocab.token_bytes[tid]
        else:
            return text
    assert recognizes(grammar, text, prefix=True)
    return text


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_random_walks_smollm2(name, smollm2_vocab):
    for seed in range(3):
        walk(GRAMMARS[name], smollm2_vocab, seed)


@pytest.mark.parametrize("name", ["json", "cjk_list", "tool_call"])
def test_random_walks_gemma3(name, gemma3_vocab):
    walk(GRAMMARS[name], gemma3_vocab, 7, steps=25, probe_oracle=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), name=st.sampled_from(sorted(GRAMMARS)))
def test_property_walks(seed, name, smollm2_vocab):
    walk(GRAMMARS[name], smollm2_vocab, seed, steps=20, probe_oracle=False)


def test_walk_always_finishes_when_steered_to_eos(smollm2_vocab):
    # Steer towards short tokens and EOS: the walk must end accepted (no dead end).
    vocab = smollm2_vocab
    eos = sorted(vocab.eos_ids)[0]
    for seed in range(5):
        rng = random.Random(seed)
        m = Matcher(GRAMMARS["json"], vocab)
        text = b""
        for _ in range(400):
            mask = m.next_token_mask()
            if mask[eos] and rng.random() < 0.5:
                break
            allowed = [t for t in np.nonzero(mask)[0].tolist() if t not in vocab.eos_ids]
            if not allowed:
                break
            # prefer closing brackets late in the walk so it tends to finish
            closing = [t for t in allowed if vocab.token_bytes[t] in (b"}", b"]", b'"', b"0")]
            tid = rng.choice(closing) if closing and rng.random() < 0.6 else rng.choice(allowed)
            assert m.accept_token(tid)
            text += vocab.token_bytes[tid]
        if m.next_token_mask()[eos]:
            assert m.accept_token(eos)
            json.loads(text)
        else:
            assert m.next_token_mask().any(), f"dead end after {text!r}"


def tokenize(vocab_tokenizer, text: str) -> list[int]:
    return vocab_tokenizer(text)


def test_real_json_tokens_straddle_boundaries(smollm2_vocab, smollm2_tokenize):
    doc = {"name": "Zoë Åkesson", "city": "東京", "tags": ["a", "b c"], "n": [1, -2.5e3, 0],
           "ok": True, "none": None, "nested": {"x": {"y": []}}, "esc": "line\nnext \"q\" \\"}
    for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False, indent=2)):
        ids = smollm2_tokenize(text)
        assert b"".join(smollm2_vocab.token_bytes[t] for t in ids) == text.encode()
        pieces = {smollm2_vocab.token_bytes[t] for t in ids}
        assert pieces & {b'{"', b'":', b'",', b' "', b'["', b'"]'}, "sample has no straddling tokens"
        m = Matcher(GRAMMARS["json"], smollm2_vocab)
        for t in ids:
            assert m.next_token_mask()[t], f"token {smollm2_vocab.token_bytes[t]!r} refused"
            assert m.accept_token(t)
        assert m.is_accepting()
        assert m.accept_token(sorted(smollm2_vocab.eos_ids)[0])


def test_multibyte_character_split_across_tokens(smollm2_vocab):
    vocab = smollm2_vocab
    grammar = GRAMMARS["cjk_list"]
    # Find tokens that hold only part of a UTF-8 character.
    partial = [t for t, b in enumerate(vocab.token_bytes) if b and _is_partial_utf8(b)]
    assert partial, "byte-level vocabulary should have partial UTF-8 tokens"
    m = Matcher(grammar, vocab)
    assert m.accept_bytes(b'["')
    mask = m.next_token_mask()
    first_half = "中".encode()[:2]
    lead_tokens = [t for t in partial if vocab.token_bytes[t] == first_half[:len(vocab.token_bytes[t])]
                   and len(vocab.token_bytes[t]) <= 2]
    for t in lead_tokens:
        assert mask[t], "a token with the first bytes of 中 must be allowed inside the string"
    # A lone continuation byte can never start a character.
    cont = [t for t, b in enumerate(vocab.token_bytes) if b and 0x80 <= b[0] <= 0xBF]
    assert cont and not mask[cont].any()
    assert m.accept_bytes(first_half)
    mask = m.next_token_mask()
    allowed = [vocab.token_bytes[t] for t in np.nonzero(mask)[0]]
    assert allowed and all(0x80 <= b[0] <= 0xBF for b in allowed)
    assert m.accept_bytes("中".encode()[2:] + b'"]')
    assert m.is_accepting()


def _is_partial_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_literal_spread_over_many_tokens(smollm2_vocab, smollm2_tokenize):
    grammar = GRAMMARS["literal"]
    text = "The quick brown fox jumps over the lazy dog, then naps."
    ids = smollm2_tokenize(text)
    assert len(ids) > 8
    m = Matcher(grammar, smollm2_vocab)
    assert m.forced_bytes() == text.encode()
    for t in ids:
        mask = m.next_token_mask()
        assert mask[t]
        assert m.accept_token(t)
    assert m.is_accepting() and m.forced_bytes() == b""


def test_rollback_restores_exact_masks(smollm2_vocab, smollm2_tokenize):
    ids = smollm2_tokenize(json.dumps({"a": [1, {"b": "c"}], "d": "e"}))
    m = Matcher(GRAMMARS["json"], smollm2_vocab)
    masks = [m.next_token_mask().copy()]
    for t in ids:
        assert m.accept_token(t)
        masks.append(m.next_token_mask().copy())
    for k in range(1, len(ids) + 1):
        m.rollback(1)
        assert np.array_equal(m.next_token_mask(), masks[-1 - k])
    with pytest.raises(MatcherError, match="only 0 accepted"):
        m.rollback(1)
    m.accept_tokens(ids[:5])
    c = m.copy()
    c.accept_token(ids[5])
    assert np.array_equal(m.next_token_mask(), masks[5])
    m.reset()
    assert np.array_equal(m.next_token_mask(), masks[0])


def test_refused_token_leaves_state_unchanged(smollm2_vocab):
    m = Matcher(GRAMMARS["tool_call"], smollm2_vocab)
    before = m.next_token_mask().copy()
    refused = int(np.nonzero(~before)[0][0])
    assert not m.accept_token(refused)
    assert np.array_equal(m.next_token_mask(), before)


def test_eos_only_when_accepting(smollm2_vocab):
    m = Matcher(GRAMMARS["date"], smollm2_vocab)
    eos = sorted(smollm2_vocab.eos_ids)
    assert not m.next_token_mask()[eos].any()
    assert not m.accept_token(eos[0])
    assert m.accept_bytes(b"2024-02-2")
    assert not m.is_accepting()
    assert m.accept_bytes(b"9")
    assert m.next_token_mask()[eos].all()
    assert m.accept_token(eos[0]) and m.is_terminated()
    assert not m.next_token_mask().any()


def test_special_tokens_never_allowed(smollm2_vocab):
    m = Matcher(Grammar({"root": star(chars([(0, 0x10FFFF)]))}), smollm2_vocab)
    mask = m.next_token_mask()
    specials = [t for t in smollm2_vocab.special_ids if t not in smollm2_vocab.eos_ids]
    assert specials and not mask[specials].any()
    assert mask.sum() > 40_000


def test_bitmask_layout_matches_bool_mask(smollm2_vocab):
    m = Matcher(GRAMMARS["json"], smollm2_vocab)
    m.accept_bytes(b'{"k": ')
    mask = m.next_token_mask()
    words = (smollm2_vocab.size + 31) // 32
    bitmask = np.full((2, words), -1, dtype=np.int32)
    m.fill_next_token_bitmask(bitmask, index=1)
    bits = np.unpackbits(bitmask[1].view(np.uint8), bitorder="little")[: smollm2_vocab.size]
    assert np.array_equal(bits.astype(bool), mask)
    assert (bitmask[0] == -1).all()


def test_forced_bytes_for_jump_forward(smollm2_vocab):
    m = Matcher(GRAMMARS["tool_call"], smollm2_vocab)
    assert m.forced_bytes() == b'{"name": "'
    m.accept_bytes(b'{"name": "s')
    assert m.forced_bytes() == b'earch", "arguments": {"city": "'
    m.accept_bytes(m.forced_bytes() + b'Oslo", "days": 1')
    assert m.forced_bytes() == b""  # "1" may be followed by "}" or by 0-4


def test_stats_count_cache_hits(smollm2_vocab):
    a = Matcher(GRAMMARS["date"], smollm2_vocab)
    a.next_token_mask()
    b = Matcher(GRAMMARS["date"], smollm2_vocab)
    b.next_token_mask()
    s = b.stats
    assert s.cache_hits >= 1 and s.masks_requested == 1 and s.mask_p50_us is not None


def test_left_recursion_is_reported_with_the_cycle(smollm2_vocab):
    g = Grammar({"root": ref("expr"), "expr": choice(seq(ref("expr"), lit("+"), lit("1")), lit("1"))})
    with pytest.raises(LeftRecursionError, match="expr"):
        Matcher(g, smollm2_vocab)


@pytest.mark.parametrize("text", [
    'root ::= "x"{0,50} root "y" | "z"',  # a repetition that may match nothing, then the call
    'root ::= ("x"?){5,100} root "y" | "z"',  # the same behind a lazily copied repetition
    'root ::= a "q"\na ::= ("x"?){5,100} root "y" | "z"',  # through another rule
])
def test_left_recursion_behind_a_repetition_that_may_match_nothing_is_refused(text):
    """The check skips grammars whose rules all consume a byte before any call; a
    repetition that can match nothing, built on demand or not, does not count as one."""
    with pytest.raises(LeftRecursionError, match="left-recursive"):
        compile_automaton(Grammar.from_gbnf(text))


def test_an_undefined_rule_is_named_even_when_the_front_end_vouched_for_its_rules(smollm2_vocab):
    # Front ends that check their own references skip Grammar()'s walk; a slip there must
    # still come out as a GrammarError naming the rule, not a KeyError inside the builder.
    g = Grammar({"root": seq(lit("a"), ref("missing"))}, _refs_checked=True)
    with pytest.raises(GrammarError, match="'root' refers to undefined rule 'missing'"):
        Matcher(g, smollm2_vocab)


def test_matcher_needs_a_vocabulary():
    with pytest.raises(MatcherError, match="vocabulary"):
        Matcher(GRAMMARS["date"])



def _gbnf_corpus() -> dict:
    """The GBNF corpus of the grammar tests (llama.cpp-style grammars with good/bad samples)."""
    path = Path(__file__).parents[1] / "grammar" / "test_gbnf.py"
    spec = importlib.util.spec_from_file_location("_gbnf_corpus", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CORPUS


GBNF_CORPUS = _gbnf_corpus()


@pytest.mark.parametrize("name", sorted(GBNF_CORPUS))
def test_gbnf_corpus_through_the_matcher(name, smollm2_vocab, smollm2_tokenize):
    text, good, bad = GBNF_CORPUS[name]
    grammar = Grammar.from_gbnf(text)
    eos = sorted(smollm2_vocab.eos_ids)[0]
    for sample in good:
        ids = smollm2_tokenize(sample.decode("utf-8"))
        m = Matcher(grammar, smollm2_vocab)
        for t in ids:
            assert m.next_token_mask()[t], f"{name}: token {smollm2_vocab.token_bytes[t]!r} refused in {sample!r}"
            assert m.accept_token(t)
        assert m.next_token_mask()[eos] and m.accept_token(eos)
    for sample in bad:
        m = Matcher(grammar, smollm2_vocab)
        assert not (m.accept_bytes(sample) and m.is_accepting()), f"{name}: accepted {sample!r}"
    walk(grammar, smollm2_vocab, seed=11, steps=25)


REPEAT_PATTERNS = [
    r"a{3,12}",
    r"(ab?){2,9}c",
    r"(x{2,9}y){1,10}",
    r"((a|bc){0,8}-){3,9}",
    r"([0-9]{1,12}(\.[0-9]{1,8})?,){0,5}",
    r"(é{1,9}|z){2,3}",
    r"q{0,40}(r{8,8}){0,2}",
    r"(x{2,9}y){1,3}",
    r"((a{8,10}b){2}c){0,9}",
    # one byte class up to 64 times is a chain of states (nfa._build_byte_chain); past it,
    # and for longer items, copies are lazy
    r"[ab]{2,64}c",
    r"a{60,70}",
    r"(-{0,20}a){2,3}",
    r"(ab){0,40}c",
]


@pytest.mark.parametrize("pattern", REPEAT_PATTERNS)
def test_long_bounded_repetitions_match_python_regex(pattern):
    # Large bounded repeats are copied lazily; masks and acceptance must still equal the
    # language: checked against the `regex` module's partial (viable-prefix) matching.
    regex = pytest.importorskip("regex")
    from formcast.engine.vocab import Vocabulary

    alphabet = sorted({c for c in pattern if c.isalnum() or c in "-.,é"})
    tokens = [b""] + [c.encode() for c in alphabet]
    vocab = Vocabulary.from_tokens(tokens, eos_ids=[0], special_ids=[0])
    grammar = Grammar.from_regex(pattern)
    compiled = regex.compile(pattern)
    rng = random.Random(pattern)
    for _ in range(40):
        m = Matcher(grammar, vocab)
        text = ""
        for _ in range(rng.randint(0, 60)):
            mask = m.next_token_mask()
            for tid, char in enumerate(alphabet, start=1):
                viable = compiled.fullmatch(text + char, partial=True) is not None
                assert bool(mask[tid]) == viable, (pattern, text, char)
            assert bool(mask[0]) == (compiled.fullmatch(text) is not None)
            allowed = [t for t in np.nonzero(mask)[0].tolist() if t != 0]
            if not allowed:
                break
            tid = rng.choice(allowed)
            assert m.accept_token(tid)
            text += alphabet[tid - 1]
        assert m.is_accepting() == (compiled.fullmatch(text) is not None), (pattern, text)


def test_mask_is_exact_deep_inside_a_long_bounded_string(smollm2_vocab):
    # Regression: automaton states built lazily while a mask was being computed were read
    # from a stale transition table, refusing every token longer than ~12 bytes mid-string.
    grammar = Grammar.from_regex(r'"[^"\\]{0,400}"')
    m = Matcher(grammar, smollm2_vocab)
    assert m.accept_bytes(b'"The customer')
    for chunk in (b"'s issue", b" is that the invoice", b" was charged twice"):
        mask = m.next_token_mask()
        refused = [t for t in range(smollm2_vocab.size) if m.copy().accept_token(t) != mask[t]]
        assert refused == []
        assert mask[[t for t, b in enumerate(smollm2_vocab.token_bytes) if b == b" " * 16]].all()
        assert m.accept_bytes(chunk)


def test_masks_stay_exact_up_to_the_bound_of_a_long_string(smollm2_vocab):
    # Far from the bounds, positions of a long repetition share one token verdict (the same
    # automaton for the next max-token-length bytes); near maxLength they must not: a token
    # longer than the room left is refused, and the closing quote is required at the end.
    vocab = smollm2_vocab
    grammar = Grammar.from_regex(r'"[a-z ]{0,300}"')
    m = Matcher(grammar, vocab)
    assert m.accept_bytes(b'"')
    long_tokens = [t for t, b in enumerate(vocab.token_bytes) if b == b" " * 16]
    for done in range(0, 300, 13):
        mask = m.next_token_mask()
        sample = [t for t, b in enumerate(vocab.token_bytes)
                  if b and (b.strip(b" ") == b"" or b.isalpha() and b.islower() or b'"' in b)]
        for t in sample:
            assert bool(mask[t]) == m.copy().accept_token(t), (done, vocab.token_bytes[t])
        assert bool(mask[long_tokens].all()) == (300 - done >= 16), done
        assert m.accept_bytes(b"abcdefghijklm"[: min(13, 300 - done)])
    # 300 characters in: only the closing quote is left.
    assert m.forced_bytes() == b'"'
    assert not m.copy().accept_bytes(b"a")


def _benchmark_workloads() -> list:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from _workloads import load_workloads

    return load_workloads()


@pytest.mark.parametrize("workload", _benchmark_workloads(), ids=lambda w: w.name)
def test_benchmark_samples_pass_mask_and_matcher_alike(workload, smollm2_vocab, smollm2_tokenize):
    """Every benchmark sample, tokenized by the model, token by token: each token is in the
    mask and accepted, and the text ends accepting. The benchmark found FOLLOW too small once
    (three arithmetic tokens masked out, then accepted); this keeps that check in the suite."""
    from benchmark_grammars import GRAMMARS as GRAMMAR_DIR
    from benchmark_grammars import load_grammar

    grammar = load_grammar(GRAMMAR_DIR / workload.section / workload.name)
    for text in workload.samples:
        m = Matcher(grammar, smollm2_vocab)
        for step, t in enumerate(smollm2_tokenize(text)):
            assert m.next_token_mask()[t], (workload.name, step, smollm2_vocab.token_bytes[t])
            assert m.accept_token(t)
        assert m.is_accepting()


def test_masks_shared_between_copies_of_a_bounded_string_equal_masks_walked_alone(smollm2_vocab):
    """Inside a ``maxLength: 40`` string, a position's verdict is patched from an earlier
    copy's (SmolLM2 has tokens longer than the string may get: those are walked again). Every
    mask along a real text equals the one walked from scratch with no sharing at all."""
    from formcast.engine.mask_cache import MaskCache

    schema = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 40}},
              "required": ["note"]}
    grammar = Grammar.from_json_schema(schema)
    text = '{"note": "Caf\u00e9 au lait,  tr\u00e8s chaud \\u00e9t\u00e9 \\"ok\\" -- fi"}'.encode()
    shared = Matcher(grammar, smollm2_vocab)
    compiled = shared.compiled
    alone = MaskCache(compiled.automaton, compiled.parser, compiled.table)
    alone.auto = type("NoShapes", (), {"__getattr__": lambda _, name: getattr(
        compiled.automaton, name), "copy_shape": lambda _, q: None})()
    patched = 0
    for i in range(len(text)):
        want = alone.mask_for(shared.state)
        got = shared.next_token_mask()
        assert np.array_equal(got, want), (i, text[:i])
        patched = len(compiled.masks._near_verdicts) + len(compiled.masks._horizon_verdicts)
        assert shared.accept_bytes(text[i:i + 1])
    assert patched  # the shared path was taken
