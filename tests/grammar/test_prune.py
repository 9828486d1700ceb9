"""Rule pruning gives exactly what the plain one-rule-at-a-time algorithm gives (same rules,
same bodies, same order), on compiled schemas and on random rule sets built to hit its corner
cases: shared subtrees, aliases, recursion, alternatives that become duplicates, impossible
sequence parts, and bodies not in constructor-normal form."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formcast.grammar.ir import (
    EMPTY,
    NOTHING,
    Choice,
    Expr,
    Literal,
    Ref,
    Repeat,
    Seq,
    chars,
    choice,
    iter_refs,
    lit,
    repeat,
    seq,
)
from formcast.grammar.json_schema import CompileOptions, SchemaCompiler
from formcast.grammar.json_text import union
from formcast.grammar.prune import prune_rules

ROOT = Path(__file__).resolve().parents[2]


def reference_prune(rules: dict[str, Expr], keep: set[str]) -> dict[str, Expr]:
    """The straightforward algorithm: recompute everything, inline the first candidate."""
    prims = {"ws", "string", "number", "integer", "char", "unicode-escape", "value", "object",
             "array"}
    rules = dict(rules)
    while True:
        live = _reachable(rules, "root")
        rules = {k: v for k, v in rules.items() if k in live}
        counts: Counter[str] = Counter()
        for body in rules.values():
            counts.update(iter_refs(body))
        inline = {name for name, n in counts.items()
                  if (n == 1 or isinstance(rules[name], Ref | Literal) and name not in keep)
                  and name not in keep and name not in prims and name != "root"
                  and not name.startswith(("value-d", "object-d", "array-d"))
                  and name not in _reachable(rules, name, from_body=True)}
        if not inline:
            return rules
        name = sorted(inline)[0]
        body = rules.pop(name)
        rules = {k: (_substitute(v, name, body) if name in set(iter_refs(v)) else v)
                 for k, v in rules.items()}


def _reachable(rules: dict[str, Expr], start: str, from_body: bool = False) -> set[str]:
    seen = set() if from_body else {start}
    stack = list(iter_refs(rules[start])) if from_body else [start]
    while stack:
        name = stack.pop()
        if from_body and name in seen:
            continue
        seen.add(name)
        for ref_name in iter_refs(rules[name]):
            if ref_name not in seen:
                stack.append(ref_name)
    return seen


def _substitute(expr: Expr, name: str, body: Expr) -> Expr:
    if isinstance(expr, Ref):
        return body if expr.name == name else expr
    if isinstance(expr, Seq):
        return seq(*(_substitute(x, name, body) for x in expr.items))
    if isinstance(expr, Choice):
        return union(_substitute(x, name, body) for x in expr.items)
    if isinstance(expr, Repeat):
        return repeat(_substitute(expr.item, name, body), expr.min, expr.max)
    return expr


SCHEMAS = sorted(ROOT.glob("examples/**/*.json")) + sorted(
    ROOT.glob("benchmarks/grammars/schema/*.schema.json"))


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
@pytest.mark.parametrize("options", [CompileOptions(), CompileOptions(
    whitespace="compact", property_order="any", max_depth=2)], ids=["default", "compact-any"])
def test_compiled_rules_prune_like_the_reference(path: Path, options: CompileOptions) -> None:
    compiler = SchemaCompiler(json.loads(path.read_text()), options)
    compiler.compile()
    got = prune_rules(compiler.rules, compiler.keep)
    assert list(got.items()) == list(reference_prune(compiler.rules, compiler.keep).items())


NAMES = ["root", "a", "b", "c", "d", "e", "f", "g", "h", "ws", "value-d1", "i-2"]


@st.composite
def rule_sets(draw: st.DrawFn) -> tuple[dict[str, Expr], set[str]]:
    names = ["root"] + draw(st.lists(st.sampled_from(NAMES[1:]), max_size=9, unique=True))
    leaves = st.one_of(
        st.sampled_from([lit("a"), lit("b"), lit("ab"), EMPTY, NOTHING, chars("xy")]),
        st.sampled_from(names).map(Ref),
    )

    def grow(inner: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        items = st.lists(inner, min_size=1, max_size=4)
        return st.one_of(
            items.map(lambda xs: seq(*xs)),
            items.map(lambda xs: choice(*xs)),
            st.tuples(inner, st.integers(0, 2), st.integers(0, 2)).map(
                lambda t: repeat(t[0], min(t[1], t[2]), max(t[1], t[2]))),
            items.map(lambda xs: Seq(tuple(xs))),  # not constructor-normal
            items.map(lambda xs: Choice(tuple(xs))),
            inner.map(lambda x: Repeat(x, 1, 1)),
        )

    exprs = st.recursive(leaves, grow, max_leaves=8)
    shared = draw(st.lists(exprs, min_size=1, max_size=3))  # the same objects in several rules
    # rules that use several helpers once each (helpers inlined into a kept rule together)
    hubs = st.lists(st.one_of(st.sampled_from(names).map(Ref), exprs), min_size=2, max_size=6)
    body = st.one_of(exprs, st.sampled_from(shared),
                     st.tuples(st.sampled_from(shared), exprs).map(lambda t: seq(*t)),
                     st.tuples(st.sampled_from(shared), exprs).map(lambda t: choice(*t)),
                     hubs.map(lambda xs: seq(*xs)), hubs.map(lambda xs: choice(*xs)),
                     hubs.map(lambda xs: choice(seq(*xs[:2]), seq(*xs[2:]))))
    rules = {name: draw(body) for name in names}
    keep = set(draw(st.lists(st.sampled_from(names), max_size=4)))
    return rules, keep


@st.composite
def hub_sets(draw: st.DrawFn) -> tuple[dict[str, Expr], set[str]]:
    """A kept rule using many helpers, as compiled objects use their property rules: the
    helpers are inlined together, unless inlining one changes what the next choice sees."""
    helpers = [f"h{i}" for i in range(draw(st.integers(2, 8)))]
    others = ["root", "k", "value-d1", *helpers]
    leaves = st.one_of(
        st.sampled_from([lit("a"), lit("b"), EMPTY, NOTHING, chars("xy")]),
        st.sampled_from(others).map(Ref))

    def grow(inner: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        items = st.lists(inner, min_size=1, max_size=3)
        return st.one_of(items.map(lambda xs: seq(*xs)), items.map(lambda xs: choice(*xs)),
                         items.map(lambda xs: Seq(tuple(xs))), inner.map(lambda x: Repeat(x, 1, 1)),
                         inner.map(lambda x: repeat(x, 0, 1)))

    exprs = st.recursive(leaves, grow, max_leaves=5)
    uses = [Ref(h) for h in helpers] + draw(st.lists(exprs, max_size=3))
    order = draw(st.permutations(uses))
    cut = draw(st.integers(0, len(order)))
    hub = draw(st.sampled_from([seq(*order), choice(*order),
                                choice(seq(*order[:cut]), seq(*order[cut:]))]))
    rules = {"root": seq(lit("["), Ref("k"), lit("]")), "k": hub}
    for h in helpers:
        rules[h] = draw(exprs)
    rules["value-d1"] = draw(exprs)
    return rules, {"k"}


@settings(max_examples=400, deadline=None)
@given(st.one_of(rule_sets(), hub_sets()))
def test_random_rule_sets_prune_like_the_reference(case: tuple[dict[str, Expr], set[str]]) -> None:
    rules, keep = case
    # Compared in the IR constructors' normal form: the generated rules may hold nodes the
    # constructors never make (``Seq((x,))``), and where such a body lands decides whether a
    # later rebuild normalises it, in either algorithm.
    got = [(k, _normal_form(v)) for k, v in prune_rules(rules, keep).items()]
    assert got == [(k, _normal_form(v)) for k, v in reference_prune(rules, keep).items()]


def _normal_form(expr: Expr) -> Expr:
    """``expr`` rebuilt bottom-up through the IR constructors."""
    if isinstance(expr, Seq):
        return seq(*(_normal_form(x) for x in expr.items))
    if isinstance(expr, Choice):
        return union(_normal_form(x) for x in expr.items)
    if isinstance(expr, Repeat):
        return repeat(_normal_form(expr.item), expr.min, expr.max)
    return expr
