"""The grammar IR: constructors normalise, range algebra is exact, UTF-8 splitting covers exactly
the code points asked for, and Grammar validates its rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formcast.errors import GrammarError
from formcast.grammar.ir import (
    EMPTY,
    MAX_CODEPOINT,
    NOTHING,
    CharSet,
    Choice,
    Grammar,
    Literal,
    Repeat,
    Seq,
    byte_set,
    chars,
    choice,
    complement_ranges,
    factored_choice,
    iter_refs,
    lit,
    merge_ranges,
    opt,
    plus,
    ref,
    repeat,
    seq,
    star,
    subtract_ranges,
    utf8_byte_sequences,
)


def test_literals_are_utf8_and_empty_is_the_empty_sequence() -> None:
    assert lit("é") == Literal(b"\xc3\xa9")
    assert lit(b"\xff") == Literal(b"\xff")
    assert lit("") == EMPTY


def test_seq_flattens_merges_literals_and_absorbs_nothing() -> None:
    a, b = ref("a"), ref("b")
    assert seq(lit("x"), seq(lit("y"), a), lit("z"), lit("w")) == Seq((Literal(b"xy"), a, Literal(b"zw")))
    assert seq(a) == a
    assert seq() == EMPTY
    assert seq(a, EMPTY, b) == Seq((a, b))
    assert seq(a, NOTHING, b) == NOTHING


def test_choice_flattens_and_drops_duplicates_in_order() -> None:
    a, b, c = ref("a"), ref("b"), ref("c")
    assert choice(b, choice(a, b), c) == Choice((b, a, c))
    assert choice(a, a) == a


def test_factored_choice_shares_first_items() -> None:
    a, b, c, d = ref("a"), ref("b"), ref("c"), ref("d")
    assert factored_choice(seq(a, b, c), seq(a, b, d), seq(c, d)) == \
        choice(seq(a, b, choice(c, d)), seq(c, d))
    assert factored_choice(seq(a, b), a) == seq(a, choice(b, EMPTY))


_ATOMS = [lit("a"), lit("b"), ref("x"), opt(lit("a"))]
_ALTS = st.lists(st.lists(st.sampled_from(range(len(_ATOMS))), max_size=4), max_size=6)


@given(_ALTS)
@settings(max_examples=200, deadline=None)
def test_factored_choice_keeps_the_language(alts: list[list[int]]) -> None:
    from itertools import product

    from formcast.grammar.recognize import recognizes

    exprs = [seq(*(_ATOMS[i] for i in alt)) for alt in alts]
    rules = {"x": choice(lit("b"), lit("ab"))}
    plain = Grammar({"root": choice(*exprs), **rules})
    factored = Grammar({"root": factored_choice(*exprs), **rules})
    for n in range(7):
        for text in map(bytes, product(b"ab", repeat=n)):
            assert recognizes(plain, text) == recognizes(factored, text), (alts, text)


def test_repeat_normalises_and_validates_bounds() -> None:
    x = lit("x")
    assert repeat(x, 1, 1) == x
    assert repeat(x, 0, 0) == EMPTY
    assert (opt(x), star(x), plus(x)) == (Repeat(x, 0, 1), Repeat(x, 0, None), Repeat(x, 1, None))
    with pytest.raises(GrammarError, match="bounds"):
        repeat(x, 3, 2)
    with pytest.raises(GrammarError, match="bounds"):
        repeat(x, -1)


def test_chars_accepts_code_points_characters_and_strings() -> None:
    assert chars([("a", "c"), "xz", (0x30, 0x39)]) == CharSet(((0x30, 0x39), (0x61, 0x63), (0x78, 0x78), (0x7A, 0x7A)))
    with pytest.raises(GrammarError, match="reversed"):
        chars([("z", "a")])


def test_negated_charset_never_matches_surrogates() -> None:
    assert chars("a", negated=True).codepoint_ranges() == (
        (0, 0x60), (0x62, 0xD7FF), (0xE000, MAX_CODEPOINT))
    assert chars([(0xD000, 0xE000)]).codepoint_ranges() == ((0xD000, 0xD7FF), (0xE000, 0xE000))


def test_byte_set_rejects_values_outside_a_byte() -> None:
    assert byte_set([(0, 10), (5, 20)]).ranges == ((0, 20),)
    with pytest.raises(GrammarError, match="0-255"):
        byte_set([(250, 256)])


_RANGES = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1])),
                   max_size=6)


@given(_RANGES, _RANGES)
def test_range_algebra_matches_set_arithmetic(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    def points(rs) -> set[int]:
        return {x for lo, hi in rs for x in range(lo, hi + 1)}

    merged = merge_ranges(a)
    assert points(merged) == points(a)
    assert all(merged[i][1] + 1 < merged[i + 1][0] for i in range(len(merged) - 1))
    # a tuple (merged or not) takes the path that may return it unchanged
    assert merge_ranges(tuple(a)) == merged and merge_ranges(merged) == merged
    assert points(complement_ranges(merged, 0, 400)) == set(range(401)) - points(a)
    assert points(subtract_ranges(merged, b)) == points(a) - points(b)
    assert subtract_ranges(merged, tuple(b)) == merge_ranges(
        [(x, x) for x in points(a) - points(b)])


def _expand(byte_ranges: list[tuple[int, int]]) -> set[bytes]:
    out = {b""}
    for lo, hi in byte_ranges:
        out = {prefix + bytes([x]) for prefix in out for x in range(lo, hi + 1)}
    return out


@pytest.mark.parametrize(("lo", "hi"), [
    (0x70, 0x90), (0x7F0, 0x810), (0xFFF0, 0x10010), (0xD7F0, 0xE010), (0x10FFF0, MAX_CODEPOINT),
    (0x41, 0x41), (0x0, 0x7F),
])
def test_utf8_splitting_at_length_boundaries_is_exact(lo: int, hi: int) -> None:
    covered: set[bytes] = set()
    for byte_ranges in utf8_byte_sequences(lo, hi):
        part = _expand(byte_ranges)
        assert not covered & part  # the sequences never overlap
        covered |= part
    assert covered == {chr(c).encode("utf-8", "surrogatepass") for c in range(lo, hi + 1)}


@settings(max_examples=300)
@given(st.integers(0, MAX_CODEPOINT), st.integers(0, MAX_CODEPOINT), st.data())
def test_utf8_splitting_of_any_range(a: int, b: int, data: st.DataObject) -> None:
    lo, hi = min(a, b), max(a, b)
    seqs = utf8_byte_sequences(lo, hi)
    count = 0
    for byte_ranges in seqs:
        size = 1
        for x, y in byte_ranges:
            assert 0 <= x <= y <= 0xFF
            size *= y - x + 1
        count += size
    assert count == hi - lo + 1  # with the overlap check below: covers exactly [lo, hi]

    def matches(code: int) -> int:
        enc = chr(code).encode("utf-8", "surrogatepass")
        return sum(len(r) == len(enc) and all(x <= c <= y for c, (x, y) in zip(enc, r, strict=True))
                   for r in seqs)

    for code in (lo, hi, data.draw(st.integers(lo, hi))):
        assert matches(code) == 1
    for outside in (lo - 1, hi + 1):
        if 0 <= outside <= MAX_CODEPOINT:
            assert matches(outside) == 0


def test_grammar_validates_references_and_start() -> None:
    with pytest.raises(GrammarError, match="'root' refers to undefined rule 'missing'"):
        Grammar({"root": seq(lit("a"), ref("missing"))})
    with pytest.raises(GrammarError, match="start rule 'main'"):
        Grammar({"root": lit("a")}, start="main")
    with pytest.raises(GrammarError, match="not an IR expression"):
        Grammar({"root": "a"})  # type: ignore[dict-item]


def test_grammar_is_immutable_and_fingerprinted_by_content() -> None:
    rules = {"root": seq(lit("a"), ref("b")), "b": lit("b")}
    g1, g2 = Grammar(rules), Grammar(dict(reversed(list(rules.items()))))
    assert g1 == g2 and hash(g1) == hash(g2) and g1.fingerprint == g2.fingerprint
    assert Grammar({"root": lit("a")}).fingerprint != g1.fingerprint
    with pytest.raises(AttributeError):
        g1.start = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        g1.rules["root"] = lit("x")  # type: ignore[index]
    rules["root"] = lit("changed")
    assert g1.rules["root"] == seq(lit("a"), ref("b"))


def test_iter_refs_lists_direct_references() -> None:
    body = seq(ref("a"), choice(ref("b"), star(ref("c"))), ref("a"))
    assert sorted(iter_refs(body)) == ["a", "a", "b", "c"]


def test_a_kept_hash_does_not_travel_with_a_pickled_expression():
    """Expressions keep their hash once computed; str hashes differ between processes, so a
    pickled expression must not carry it (equal expressions would hash apart)."""
    import pickle

    from formcast.grammar.ir import choice, lit, ref, repeat, seq

    expr = seq(ref("value"), repeat(choice(lit(","), ref("ws")), 1, 3))
    hash(expr)
    copy = pickle.loads(pickle.dumps(expr))
    assert copy == expr and hash(copy) == hash(expr)
    assert copy._hash is not None and pickle.loads(pickle.dumps(expr))._hash is None


def _node_classes() -> list:
    from formcast.grammar import ir_nodes

    current = (ir_nodes.Literal, ir_nodes.ByteSet, ir_nodes.CharSet, ir_nodes.Seq,
               ir_nodes.Choice, ir_nodes.Repeat, ir_nodes.Ref)
    sets = [pytest.param(ir_nodes.DATACLASS_NODES, id="dataclasses")]
    if ir_nodes.NATIVE_NODES:
        sets.append(pytest.param(current, id="c-types"))
    return sets


@pytest.mark.parametrize("classes", _node_classes())
def test_expressions_built_by_the_fast_constructors_have_every_field(classes):
    # ir_nodes replaces the dataclass __init__ of each expression class with one that sets the
    # slots directly, and binds C types in their place where _ir_nodes is built; a field
    # added to a class but not to its constructor would be unset.
    import dataclasses
    import pickle

    from formcast.grammar import ir_nodes

    Literal, ByteSet, CharSet, Seq, Choice, Repeat, Ref = classes
    # Pickles name a class by module and name: only the classes bound there load back.
    bound = Literal is ir_nodes.Literal
    a = Literal(b"a")
    built = [a, ByteSet(((0, 9),)), CharSet(((97, 122),), True), CharSet(((1, 2),)),
             Seq((a, a)), Choice((a, Ref("r"))), Repeat(a, 1, 3), Repeat(a), Ref("r")]
    for expr in built:
        for name in type(expr).__match_args__:
            getattr(expr, name)  # AttributeError if the constructor left it unset
        if bound:
            assert pickle.loads(pickle.dumps(expr)) == expr
        with pytest.raises(dataclasses.FrozenInstanceError):
            expr.__setattr__(type(expr).__match_args__[0], None)
    assert Repeat(item=a, max=2) == Repeat(a, 0, 2)
    assert CharSet(ranges=((1, 2),)).negated is False
    with pytest.raises(TypeError, match="items"):
        Seq()
    with pytest.raises(TypeError, match="unexpected keyword"):
        Repeat(a, mn=1)
    with pytest.raises(TypeError, match="multiple values"):
        Repeat(a, 1, min=2)


@st.composite
def _node_recipes(draw, depth: int = 0):
    """A node as a recipe (kind, fields), built later with either set of classes."""
    kinds = ["lit", "bytes", "chars", "ref"] + (["seq", "choice", "repeat"] if depth < 3 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "lit":
        return ("lit", draw(st.binary(min_size=1, max_size=3)))
    if kind == "bytes":
        return ("bytes", draw(st.tuples(st.integers(0, 9), st.integers(10, 20))))
    if kind == "chars":
        return ("chars", draw(st.tuples(st.integers(0, 99), st.integers(100, 300))),
                draw(st.booleans()))
    if kind == "ref":
        return ("ref", draw(st.sampled_from(["a", "ws", "x"])))
    if kind == "repeat":
        return ("repeat", draw(_node_recipes(depth + 1)), draw(st.integers(0, 2)),
                draw(st.one_of(st.none(), st.integers(2, 4))))
    return (kind, tuple(draw(st.lists(_node_recipes(depth + 1), max_size=3))))


def _build_node(recipe, classes):
    Literal, ByteSet, CharSet, Seq, Choice, Repeat, Ref = classes
    kind = recipe[0]
    if kind == "lit":
        return Literal(recipe[1])
    if kind == "bytes":
        return ByteSet((recipe[1],))
    if kind == "chars":
        return CharSet((recipe[1],), recipe[2])
    if kind == "ref":
        return Ref(recipe[1])
    if kind == "repeat":
        return Repeat(_build_node(recipe[1], classes), recipe[2], recipe[3])
    items = tuple(_build_node(r, classes) for r in recipe[1])
    return (Seq if kind == "seq" else Choice)(items)


@pytest.mark.skipif(len(_node_classes()) < 2, reason="the C node types are not built here")
@given(a=_node_recipes(), b=_node_recipes())
@settings(max_examples=300, deadline=None)
def test_c_node_types_behave_as_the_dataclasses(a, b):
    """Equality, hashes, reprs, pickles and code points of the C types are the dataclasses'
    (the GBNF, the fingerprints and every memo keyed by nodes rely on them)."""
    import pickle

    py, c = (p.values[0] for p in _node_classes())
    pa, pb, ca, cb = (_build_node(a, py), _build_node(b, py), _build_node(a, c),
                      _build_node(b, c))
    assert repr(ca) == repr(pa) and repr(cb) == repr(pb)
    assert (ca == cb) == (pa == pb) and (ca != cb) == (pa != pb)
    assert hash(ca) == hash(pa) and hash(cb) == hash(pb)
    assert (ca == cb) == (hash(ca) == hash(cb) and repr(ca) == repr(cb))
    assert pickle.loads(pickle.dumps(ca)) == ca and repr(pickle.loads(pickle.dumps(ca))) == repr(pa)
    if a[0] == "chars":
        assert ca.codepoint_ranges() == pa.codepoint_ranges()
