"""Objects: named properties in schema order (or any order when few), then the other keys.

Generated objects list their named properties in the order of ``properties`` (then keys that
are only ``required``), which lets a schema put ``reasoning`` before ``label`` and have the
model think first. Keys that are not named come after them; their language is exact: a key
that matches some ``patternProperties`` gets those schemas, a key that matches none gets
``additionalProperties``, and no such key can be one of the named properties (that would be a
duplicate that escapes the named property's schema). ``minProperties``/``maxProperties`` are
counted over both. With ``property_order="any"`` an object of at most ``ANY_ORDER_LIMIT``
named properties accepts them in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import lru_cache
from itertools import combinations
from typing import TYPE_CHECKING, Final

from formcast.grammar import charfa
from formcast.grammar.ir import Expr, choice, is_nothing, lit, opt, repeat, seq
from formcast.grammar.ir_kinds import CHOICE, EMPTY, NOTHING, REF, REPEAT, SEQ
from formcast.grammar.json_conj import Conj, Sub
from formcast.grammar.json_refs import Loc, join_pointer
from formcast.grammar.json_text import QUOTE, string_literal, union

if TYPE_CHECKING:  # pragma: no cover
    from formcast.grammar.json_schema import SchemaCompiler

ANY_ORDER_LIMIT: Final = 5
MAX_PATTERN_CLASSES: Final = 4

ANY_STRING_DFA: charfa.DFA | None = None


def _any_string() -> charfa.DFA:
    global ANY_STRING_DFA
    if ANY_STRING_DFA is None:
        ANY_STRING_DFA = charfa.language_of([])
    return ANY_STRING_DFA


def build_object(c: SchemaCompiler, conj: Conj, loc: Loc) -> Expr:
    """The grammar of the objects ``conj`` allows."""
    for issue in conj.object_issues:
        c.report(*issue)
    if (not conj.objects and not conj.required and not conj.property_names and not conj.dependencies
            and conj.min_props == 0 and conj.max_props is None):
        return c.prim("object")
    parts = conj.objects

    names = _property_names(c, conj)
    if names == "none":
        names_dfa: charfa.DFA | None = charfa.minimize(charfa.from_expr(NOTHING))
    else:
        names_dfa = names

    # patterns across all parts; a pattern the regex engine cannot compile makes the key
    # classification unknowable, so that part's pattern and additional schemas are dropped
    pattern_dfas: dict[str, charfa.DFA] = {}
    usable_parts = []
    for part in parts:
        ok = True
        for pat, (_, sub_loc) in part.patterns:
            if pat not in pattern_dfas:
                dfa = c.pattern_dfa(pat, sub_loc.pointer.rsplit("/", 1)[0])
                if dfa is None:
                    ok = False
                    continue
                pattern_dfas[pat] = dfa
        if not ok:
            ptr = join_pointer(part.loc.pointer, "patternProperties")
            c.report(ptr, "patternProperties", "a pattern uses a regex feature that is not "
                     "compiled (lookaround, backreference, property escape); patternProperties "
                     "and additionalProperties here are left to the validator")
            if part.additional is not None:
                c.report(join_pointer(part.loc.pointer, "additionalProperties"),
                         "additionalProperties", "depends on a pattern that is not compiled")
            part = type(part)(part.properties, [], None, part.loc)
        usable_parts.append(part)
    parts = usable_parts

    named: list[str] = []
    for part in parts:
        for k in part.properties:
            if k not in named:
                named.append(k)
    for k in conj.required:
        if k not in named:
            named.append(k)
    for k, needed, _ in conj.dependencies:  # dependentRequired: the keys become named too
        for name in (k, *needed):
            if name not in named:
                named.append(name)

    members: list[tuple[Expr, bool]] = []
    member_names: list[str] = []
    with c.consuming():
        for k in named:
            required = k in conj.required
            if names_dfa is not None and not names_dfa.accepts(k):
                if required:
                    return NOTHING
                continue
            subs: list[Sub] = []
            for part in parts:
                matched = [sub for pat, sub in part.patterns if pattern_dfas[pat].accepts(k)]
                if k in part.properties:
                    subs.append(part.properties[k])
                subs += matched
                if k not in part.properties and not matched and part.additional is not None:
                    subs.append(part.additional)
            value = c.compile_subs(subs, join_pointer(loc.pointer, "properties", k))
            if is_nothing(value):
                if required:
                    return NOTHING
                continue
            members.append((seq(string_literal(k), c.ws, lit(":"), c.ws, value), required))
            member_names.append(k)
        extra = _extra_members(c, parts, named, pattern_dfas, names_dfa, loc)
    deps = _dependencies(conj, member_names)
    if deps is None:
        return NOTHING
    for i in [i for i, needed in deps.items() if needed is None]:
        if members[i][1]:
            return NOTHING  # a required key that needs a key that cannot appear
        members[i] = (NOTHING, False)
    if extra is not None and _big(extra):
        extra = REF(c.new_rule(c.rule_base(loc) + "-additional", extra))

    if conj.max_props is not None and conj.max_props < conj.min_props:
        return NOTHING
    any_order = c.options.property_order == "any"
    if any_order and len(members) > ANY_ORDER_LIMIT:
        c.note(f"property_order='any' applies to objects of at most {ANY_ORDER_LIMIT} "
               f"properties; {loc.pointer or '/'} has {len(members)}, so they come in schema order")
        any_order = False
    elif len(members) >= 2 and not any_order:
        c.note("object properties are generated in the order of 'properties' (then keys that "
               "are only 'required', then any other keys)")
    body = _members(c, members, extra, conj.min_props, conj.max_props, any_order,
                    c.rule_base(loc) + "-m", {i: d for i, d in deps.items() if d is not None})
    return seq(lit("{"), c.ws, body, lit("}"))


def _dependencies(conj: Conj, member_names: list[str]) -> dict[int, frozenset[int] | None] | None:
    """``dependentRequired`` as member indices: key index -> indices it needs (None when a
    needed key cannot appear at all, so the key cannot either)."""
    index = {k: i for i, k in enumerate(member_names)}
    out: dict[int, frozenset[int] | None] = {}
    for key, needed, _ in conj.dependencies:
        if key not in index:
            continue  # the key itself cannot appear: nothing to enforce
        i = index[key]
        if any(n not in index for n in needed):
            out[i] = None
        elif out.get(i, frozenset()) is not None:
            out[i] = (out.get(i) or frozenset()) | frozenset(index[n] for n in needed if n != key)
    return out


def _property_names(c: SchemaCompiler, conj: Conj) -> charfa.DFA | None | str:
    result: charfa.DFA | None = None
    for sub, sub_loc in conj.property_names:
        got = c.key_language(sub, sub_loc)
        if got == "none":
            return "none"
        if got is None:
            continue
        assert isinstance(got, charfa.DFA)
        result = got if result is None else charfa.intersect(result, got)
    return result


def _extra_members(c: SchemaCompiler, parts, named: list[str],
                   pattern_dfas: dict[str, charfa.DFA], names_dfa: charfa.DFA | None,
                   loc: Loc) -> Expr | None:
    """One member whose key is not named: a choice over the classes of keys (which patterns
    they match), each with the schemas that apply to it."""
    pats = list(pattern_dfas)
    if len(pats) > MAX_PATTERN_CLASSES:
        for part in parts:
            if part.patterns:
                c.report(join_pointer(part.loc.pointer, "patternProperties"), "patternProperties",
                         f"more than {MAX_PATTERN_CLASSES} patterns: keys that are not named "
                         "properties are not checked against them")
            if part.additional is not None:
                c.report(join_pointer(part.loc.pointer, "additionalProperties"),
                         "additionalProperties", "depends on too many patterns to compile")
        pats = []
        parts = [type(p)(p.properties, [], None, p.loc) for p in parts]
    classes: list[Expr] = []
    for size in range(len(pats) + 1):
        for chosen in combinations(range(len(pats)), size):
            in_class = {pats[i] for i in chosen}
            subs: list[Sub] = []
            for part in parts:
                own = [(pat, sub) for pat, sub in part.patterns if pat in in_class]
                subs += [sub for _, sub in own]
                if not own and part.additional is not None:
                    subs.append(part.additional)
            value = c.compile_subs(subs, join_pointer(loc.pointer, "additionalProperties"))
            if is_nothing(value):
                continue
            key = _class_key(c, pats, in_class, pattern_dfas, names_dfa, tuple(named), loc)
            if is_nothing(key):
                continue
            classes.append(seq(key, c.ws, lit(":"), c.ws, value))
    return choice(*classes) if classes else None


def _class_key(c: SchemaCompiler, pats: list[str], in_class: set[str],
               pattern_dfas: dict[str, charfa.DFA], names_dfa: charfa.DFA | None,
               named: tuple[str, ...], loc: Loc) -> Expr:
    if not pats and names_dfa is None and not named:
        return c.prim("string")
    dfa = _any_string()
    for pat in pats:
        d = pattern_dfas[pat]
        dfa = charfa.intersect(dfa, d if pat in in_class else charfa.complement(d))
    if names_dfa is not None:
        dfa = charfa.intersect(dfa, names_dfa)
    if named:
        dfa = charfa.difference(dfa, _names_dfa(named))
    if dfa.is_empty():
        return NOTHING
    content = c.spell(dfa, c.rule_base(loc) + "-key")
    return seq(QUOTE, content, QUOTE)


@lru_cache(maxsize=256)
def _names_dfa(names: tuple[str, ...]) -> charfa.DFA:
    """The automaton of exactly these key strings (shared: objects repeat their key lists)."""
    return charfa.minimize(charfa.from_expr(union(lit(k) for k in names)))


# ----------------------------------------------------------------------------- member lists


def _extras(extra: Expr | None, comma: Expr, ws: Expr, min_p: int, max_p: int | None,
            k: int, started: bool) -> Expr:
    """The members beyond the listed ones (``extra`` each), ``k`` members already written
    (``started``: at least one, so each extra one begins with a comma)."""
    lo = max(0, min_p - k)
    hi = None if max_p is None else max_p - k
    if hi is not None and hi < lo:
        return NOTHING
    if extra is None or hi == 0:
        return EMPTY if lo == 0 else NOTHING
    more = seq(comma, extra, ws)
    if started:
        return repeat(more, lo, hi)
    body = seq(extra, ws, repeat(more, max(lo - 1, 0), None if hi is None else hi - 1))
    return body if lo > 0 else opt(body)


def _members_in_order(members: list[tuple[Expr, bool]], extra: Expr | None, comma: Expr,
                      ws: Expr) -> Expr:
    """``_members`` in the common case, which needs no counting: a readable nesting,
    quadratic at worst. Loops, not closures: compiled, a nested function is a reference
    cycle that outlives the compile."""
    n = len(members)
    # Some member is required: then whatever optional member comes before the first one
    # is followed by a comma, and the members before it are each ``(m ws , ws)?`` in a
    # row, not a choice that repeats the rest of the object in every branch.
    first_required = next((i for i, (_, req) in enumerate(members) if req), n)
    tails: list[Expr] = [EMPTY] * (n + 1)  # tails[i]: the members from i on, each after a comma
    tails[n] = _extras(extra, comma, ws, 0, None, 0, True)
    for i in range(n - 1, first_required if first_required < n else 0, -1):
        m, req = members[i]
        item = seq(comma, m, ws)
        tails[i] = seq(item if req else opt(item), tails[i + 1])
    if first_required < n:
        out = seq(members[first_required][0], ws, tails[first_required + 1])
        for i in range(first_required - 1, -1, -1):
            out = seq(opt(seq(members[i][0], ws, comma)), out)
        return out
    out = _extras(extra, comma, ws, 0, None, 0, False)
    for i in range(n - 1, -1, -1):
        out = choice(seq(members[i][0], ws, tails[i + 1]), out)
    return out


def _members(c: SchemaCompiler, members: list[tuple[Expr, bool]], extra: Expr | None,
             min_p: int, max_p: int | None, any_order: bool, prefix: str,
             deps: dict[int, frozenset[int]] | None = None) -> Expr:
    """What goes between ``{ ws`` and ``}``: each member is followed by ``ws``, and every
    member after the first is preceded by ``, ws`` (so the empty object is ``{ ws }``).
    ``deps`` maps a member to the members that must be present when it is."""
    deps = {i: d for i, d in (deps or {}).items() if d}
    ws = c.ws
    comma = seq(lit(","), ws)
    if not any_order and min_p == 0 and max_p is None and not deps:
        return _members_in_order(members, extra, comma, ws)
    moves: Callable[[Hashable], list[tuple[Expr, Hashable | None]]]
    if any_order:
        moves = _AnyOrderMoves(members, extra, comma, ws, min_p, max_p, deps)
        start: Hashable = (frozenset(), False)
    else:
        moves = _InOrderMoves(members, extra, comma, ws, min_p, max_p, deps)
        start = (0, 0, False, frozenset(), frozenset())
    return emit_graph(c, start, moves, prefix)


# The graphs' moves are classes, not closures: compiled by mypyc, a nested function is a
# reference cycle with its environment, which would keep the compiler alive after a compile.


class _AnyOrderMoves:
    """Members in any order: a state is (members written, whether any was)."""

    def __init__(self, members: list[tuple[Expr, bool]], extra: Expr | None, comma: Expr,
                 ws: Expr, min_p: int, max_p: int | None,
                 deps: dict[int, frozenset[int]]) -> None:
        self.members, self.extra, self.comma, self.ws = members, extra, comma, ws
        self.min_p, self.max_p, self.deps = min_p, max_p, deps
        self.required = frozenset(i for i, (_, req) in enumerate(members) if req)

    def __call__(self, state: Hashable) -> list[tuple[Expr, Hashable | None]]:
        done, started = state  # type: ignore[misc]
        out: list[tuple[Expr, Hashable | None]] = []
        k = len(done)
        max_p = self.max_p
        for j, (m, _) in enumerate(self.members):
            if j not in done and (max_p is None or k < max_p):
                out.append((seq(self.comma if started else EMPTY, m, self.ws),
                            (done | {j}, True)))
        if self.required <= done and all(self.deps[j] <= done for j in done if j in self.deps):
            out.append((_extras(self.extra, self.comma, self.ws, self.min_p, max_p, k, started),
                        None))
        return out


class _InOrderMoves:
    """Members in order, counted (min/maxProperties) or with dependencies: a state is (next
    member, members written up to the cap, whether any was, the relevant members present,
    the later members some present one needs)."""

    def __init__(self, members: list[tuple[Expr, bool]], extra: Expr | None, comma: Expr,
                 ws: Expr, min_p: int, max_p: int | None,
                 deps: dict[int, frozenset[int]]) -> None:
        self.members, self.extra, self.comma, self.ws = members, extra, comma, ws
        self.min_p, self.max_p, self.deps = min_p, max_p, deps
        self.cap = max(min_p, max_p or 0)
        self.relevant = set(deps) | {j for d in deps.values() for j in d}

    def __call__(self, state: Hashable) -> list[tuple[Expr, Hashable | None]]:
        i, k, started, present, owed = state  # type: ignore[misc]
        max_p = self.max_p
        if i == len(self.members):
            return [] if owed else [(_extras(self.extra, self.comma, self.ws, self.min_p,
                                             max_p, k, started), None)]
        m, req = self.members[i]
        out: list[tuple[Expr, Hashable | None]] = []
        needs = self.deps.get(i, frozenset())
        if (max_p is None or k < max_p) and all(j in present for j in needs if j < i):
            now = present | {i} if i in self.relevant else present
            out.append((seq(self.comma if started else EMPTY, m, self.ws),
                        (i + 1, min(k + 1, self.cap), True, now,
                         (owed - {i}) | frozenset(j for j in needs if j > i))))
        if not req and i not in owed:
            out.append((EMPTY, (i + 1, k, started, present, owed)))
        return out


def emit_graph(c: SchemaCompiler, start: Hashable,
               moves: Callable[[Hashable], list[tuple[Expr, Hashable | None]]],
               prefix: str) -> Expr:
    """The expression of a finite acyclic graph of states; states reached from more than one
    place become rules (so the grammar stays linear in the number of states)."""
    edges: dict[Hashable, list[tuple[Expr, Hashable | None]]] = {}
    indegree: dict[Hashable, int] = {start: 1}
    order = [start]
    queued = {start}
    i = 0
    while i < len(order):
        s = order[i]
        i += 1
        edges[s] = moves(s)
        for _, t in edges[s]:
            if t is None:
                continue
            indegree[t] = indegree.get(t, 0) + 1
            if t not in queued:
                queued.add(t)
                order.append(t)
    emitter = _GraphEmitter(c, edges, indegree, prefix)
    for s in reversed(order):  # children before parents: no deep recursion
        emitter.expr(s)
    return emitter.expr(start)


class _GraphEmitter:
    """The expressions of ``emit_graph``'s states, memoised (a class, not a recursive
    closure: see the moves classes)."""

    def __init__(self, c: SchemaCompiler, edges: dict[Hashable, list[tuple[Expr, Hashable | None]]],
                 indegree: dict[Hashable, int], prefix: str) -> None:
        self.c, self.edges, self.indegree, self.prefix = c, edges, indegree, prefix
        self.names: dict[Hashable, str] = {}
        self.memo: dict[Hashable, Expr] = {}

    def expr(self, s: Hashable) -> Expr:
        got = self.memo.get(s)
        if got is not None:
            return got
        alts = [seq(e, self.expr(t)) if t is not None else e for e, t in self.edges[s]]
        body = choice(*alts) if alts else NOTHING
        if self.indegree[s] > 1 and not is_nothing(body) and _big(body):
            name = self.names[s] = self.c.new_rule(f"{self.prefix}{len(self.names)}", body)
            got = REF(name)
        else:
            got = body
        self.memo[s] = got
        return got


def _big(e: Expr) -> bool:
    count = 0
    stack = [e]
    while stack and count < 6:
        x = stack.pop()
        count += 1
        if isinstance(x, SEQ | CHOICE):
            stack.extend(x.items)
        elif isinstance(x, REPEAT):
            stack.append(x.item)
    return count >= 6

