"""String values and property names: character-level languages spelled as JSON string text.

``pattern`` (a search, unanchored), ``format``, ``minLength`` and ``maxLength`` all constrain the
*decoded* string. Each becomes a character-level IR expression; one alone is spelled directly,
several are intersected as automata (``charfa``). Lengths count characters (code points), so
an escape such as ``\\n`` or a surrogate pair counts as one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Final

from formcast.errors import RegexSyntaxError, SchemaError, UnsupportedRegexError
from formcast.grammar import charfa
from formcast.grammar.formats import FORMATS, UNSUPPORTED_FORMATS, format_expr, leap_seconds
from formcast.grammar.ir import Expr, merge_ranges, repeat, seq, star
from formcast.grammar.ir_kinds import (
    BYTE_SET,
    CHAR_SET,
    CHOICE,
    LITERAL,
    NOTHING,
    REF,
    REPEAT,
    SEQ,
)
from formcast.grammar.json_text import (
    ANY_CODEPOINT,
    QUOTE,
    char_forms_cached,
    is_plain,
    string_content,
    union,
)
from formcast.grammar.regex import regex_to_expr

if TYPE_CHECKING:  # pragma: no cover
    from formcast.grammar.json_conj import Conj
    from formcast.grammar.json_refs import Loc
    from formcast.grammar.json_schema import SchemaCompiler

ANY_CHAR: Final = CHAR_SET(ANY_CODEPOINT)


def json_spelled(expr: Expr, label: Callable[[tuple[tuple[int, int], ...]], Expr],
                 memo: dict[int, tuple[Expr, Expr]] | None = None) -> Expr:
    """Map a character-level expression to the JSON string text that spells its strings;
    ``label`` spells one character of a set (``json_text.char_forms``). ``memo`` (node id ->
    (node, spelling)) may be shared by calls with the same ``label`` over long-lived nodes."""
    return _Speller(label, {} if memo is None else memo).walk(expr)


class _Speller:
    """The walk of ``json_spelled`` (a class, not a closure calling itself: compiled, such a
    closure is a reference cycle that would keep ``label``'s compiler alive after it)."""

    def __init__(self, label: Callable[[tuple[tuple[int, int], ...]], Expr],
                 memo: dict[int, tuple[Expr, Expr]]) -> None:
        self.label = label
        self.memo = memo

    def walk(self, e: Expr) -> Expr:
        got = self.memo.get(id(e))
        if got is not None:
            return got[1]
        kind = type(e)
        out: Expr
        if kind is LITERAL:
            text = e.data.decode("utf-8")  # type: ignore[attr-defined]
            out = e if is_plain(text) else string_content(text)
        elif kind is SEQ:
            out = seq(*[self.walk(x) for x in e.items])  # type: ignore[attr-defined]
        elif kind is CHOICE:
            out = union([self.walk(x) for x in e.items])  # type: ignore[attr-defined]
        elif kind is CHAR_SET:
            out = self.label(e.codepoint_ranges())  # type: ignore[attr-defined]
        elif kind is REPEAT:
            out = repeat(self.walk(e.item), e.min, e.max)  # type: ignore[attr-defined]
        elif kind is BYTE_SET:
            if any(hi > 0x7F for _, hi in e.ranges):  # type: ignore[attr-defined]
                raise charfa.NotCharacterLevel("byte sets beyond ASCII")
            out = self.label(merge_ranges(e.ranges))  # type: ignore[attr-defined]
        else:
            raise charfa.NotCharacterLevel(f"cannot spell {e!r} as JSON string text")
        self.memo[id(e)] = (e, out)
        return out


class Constraint:
    """One character-level constraint on a string: its expression, the keyword that set it and
    where (for the report when it cannot be combined with the others)."""

    def __init__(self, expr: Expr, sources: list[tuple[str, str]]) -> None:
        self.expr = expr
        self.sources = sources  # (pointer, keyword) of the keywords that set it


def pattern_expr(pattern: str, pointer: str) -> Expr | str:
    """The search language of a JSON Schema ``pattern``, or the reason it cannot be compiled
    (lookaround, backreferences, Unicode property escapes); a malformed regex is a schema
    error."""
    try:
        return _search_language(pattern)
    except RegexSyntaxError as exc:
        raise SchemaError(f"invalid regular expression {pattern!r}: {exc.reason}",
                          pointer=pointer) from None


@lru_cache(maxsize=1024)
def _search_language(pattern: str) -> Expr | str:
    try:
        return regex_to_expr(pattern, search=True)
    except UnsupportedRegexError as exc:
        return exc.reason


def length_expr(min_len: int, max_len: int | None) -> Expr:
    return repeat(ANY_CHAR, min_len, max_len)


def format_constraint(name: str, pointer: str,
                      report: Callable[[str, str, str], None]) -> Expr | None:
    """The language of a ``format``; reports formats that are not enforced or only loosely."""
    fmt = FORMATS.get(name)
    if fmt is None:
        if name in UNSUPPORTED_FORMATS:
            report(pointer, "format", f"format {name!r}: {UNSUPPORTED_FORMATS[name]}")
        return None
    if not fmt.exact:
        report(pointer, "format", f"format {name!r} is enforced loosely: {fmt.loose_reason}")
    return format_expr(name)


def combine(constraints: Sequence[Constraint], *, label: Callable,
            spell: Callable[[charfa.DFA, str], Expr], prefix: str,
            report: Callable[[str, str, str], None], dfas: Sequence[charfa.DFA] = ()) -> Expr:
    """JSON-spelled contents satisfying every constraint (their intersection). ``label`` spells
    one character set, ``spell`` an automaton (``SchemaCompiler.spell``).

    When the intersection automaton is too large, the first constraint (formats come first,
    then patterns, then lengths) is kept and the others are reported as not enforced.
    """
    if not constraints and not dfas:
        return star(label(ANY_CODEPOINT))
    if len(constraints) == 1 and not dfas:
        return json_spelled(constraints[0].expr, label)
    try:
        dfa = charfa.language_of(c.expr for c in constraints)
        for extra in dfas:
            dfa = charfa.intersect(dfa, extra)
        return spell(dfa, prefix)
    except (charfa.AutomatonTooLarge, charfa.NotCharacterLevel):
        if not constraints:
            raise
        kept = constraints[0].sources[0][1]
        for c in constraints[1:]:
            for pointer, keyword in c.sources:
                report(pointer, keyword, f"{keyword} cannot be combined with {kept} in one "
                       f"automaton of reasonable size; only {kept} is enforced")
        return json_spelled(constraints[0].expr, label)


# ----------------------------------------------------------------------------- builder


def string_constraints(c: SchemaCompiler, conj: Conj) -> list[Constraint]:
    """The character-level constraints on the strings ``conj`` allows."""
    cons: list[Constraint] = []
    if c.options.formats == "assert":
        for name, ptr in conj.formats:
            expr = format_constraint(name, ptr, c.report)
            if expr is not None:
                cons.append(Constraint(expr, [(ptr, "format")]))
            elif name not in FORMATS and name not in UNSUPPORTED_FORMATS:
                c.note(f"format {name!r} is not a JSON Schema format; treated as an "
                       "annotation")
    for pattern, ptr in conj.patterns:
        compiled = pattern_expr(pattern, ptr)
        if isinstance(compiled, str):
            c.report(ptr, "pattern", f"pattern {pattern!r} is not compiled: {compiled}")
        else:
            cons.append(Constraint(compiled, [(ptr, "pattern")]))
    if conj.min_len or conj.max_len is not None:
        sources = [(p, p.rsplit("/", 1)[1]) for p in conj.length_ptrs] or [("", "maxLength")]
        if conj.max_len is not None and conj.max_len < conj.min_len:
            cons.append(Constraint(NOTHING, sources))
        else:
            cons.append(Constraint(length_expr(conj.min_len, conj.max_len), sources))
    return cons


def build_string(c: SchemaCompiler, conj: Conj, loc: Loc) -> Expr:
    """The JSON strings ``conj`` allows."""
    cons = string_constraints(c, conj)
    dfas = conj.string_dfas
    if not cons and not dfas:
        return c.prim("string")
    c.note("constrained strings spell printable ASCII characters raw (not as \\u "
           "escapes); other characters may be raw or escaped")
    if dfas:
        try:
            content = combine(cons, label=c.label, spell=c.spell, dfas=dfas,
                              prefix=c.rule_base(loc) + "-str", report=c.report)
        except charfa.AutomatonTooLarge:
            c.report(loc.pointer, "not", "a negated string constraint makes an automaton "
                     "too large to compile; it is left to the validator")
            content = combine(cons, label=c.label, spell=c.spell,
                              prefix=c.rule_base(loc) + "-str", report=c.report)
        return seq(QUOTE, content, QUOTE)
    if len(cons) == 1 and cons[0].sources[0][1] in ("minLength", "maxLength"):
        if conj.max_len is not None and conj.max_len < conj.min_len:
            return NOTHING
        return seq(QUOTE, repeat(c.prim("char"), conj.min_len, conj.max_len), QUOTE)
    if len(cons) == 1 and cons[0].sources[0][1] == "format":
        name = "format-" + next(n for n, p in conj.formats if p == cons[0].sources[0][0])
        if name not in c.rules:  # one shared rule per format
            c.prim("unicode-escape")
            c.rules[name] = format_body(name[len("format-"):])
            c.keep.add(name)
        return REF(name)
    content = combine(cons, label=c.label, spell=c.spell,
                      prefix=c.rule_base(loc) + "-str", report=c.report)
    return seq(QUOTE, content, QUOTE)

# -- arrays


@lru_cache(maxsize=64)
def format_body(name: str) -> Expr:
    """The JSON string of a format (shared by every compile: the date-time table is large)."""
    expr = format_expr(name)
    assert expr is not None
    if name in ("time", "date-time"):
        # the 1440 leap-second alternatives spell as themselves (see formats.leap_seconds):
        # walking their 8,000 nodes would be most of the first date-time compile
        for alt in leap_seconds().items:
            _FORMAT_SPELLINGS.setdefault(id(alt), (alt, alt))
    spelled = json_spelled(expr, _format_label, _FORMAT_SPELLINGS)
    return seq(QUOTE, spelled, QUOTE)


_UNICODE_ESCAPE: Final = REF("unicode-escape")
# spellings of format expression nodes (cached for the process, like the formats themselves):
# "time" and "date-time" share the leap-second table
_FORMAT_SPELLINGS: Final[dict[int, tuple[Expr, Expr]]] = {}


def _format_label(ranges: tuple[tuple[int, int], ...]) -> Expr:
    return char_forms_cached(ranges, _UNICODE_ESCAPE)
