"""String values and property names: character-level languages spelled as JSON string text.

``pattern`` (a search, unanchored), ``format``, ``minLength`` and ``maxLength`` all constrain the
*decoded* string. Each becomes a character-level IR expression; one alone is spelled directly,
several are intersected as automata (``charfa``). Lengths count characters (code points), so
an escape such as ``\\n`` or a surrogate pair counts as one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from formcast.errors import RegexSyntaxError, SchemaError, UnsupportedRegexError
from formcast.grammar import charfa
from formcast.grammar.formats import FORMATS, UNSUPPORTED_FORMATS, format_expr
from formcast.grammar.ir import (
    ByteSet,
    CharSet,
    Choice,
    Expr,
    Literal,
    Repeat,
    Seq,
    merge_ranges,
    repeat,
    seq,
    star,
)
from formcast.grammar.json_text import ANY_CODEPOINT, string_content, union
from formcast.grammar.regex import regex_to_expr

ANY_CHAR = CharSet(ANY_CODEPOINT)


def json_spelled(expr: Expr, label: Callable[[tuple[tuple[int, int], ...]], Expr]) -> Expr:
    """Map a character-level expression to the JSON string text that spells its strings;
    ``label`` spells one character of a set (``json_text.char_forms``)."""
    memo: dict[int, Expr] = {}

    def walk(e: Expr) -> Expr:
        got = memo.get(id(e))
        if got is not None:
            return got
        if isinstance(e, CharSet):
            out = label(e.codepoint_ranges())
        elif isinstance(e, Literal):
            out = string_content(e.data.decode("utf-8"))
        elif isinstance(e, ByteSet):
            if any(hi > 0x7F for _, hi in e.ranges):
                raise charfa.NotCharacterLevel("byte sets beyond ASCII")
            out = label(merge_ranges(e.ranges))
        elif isinstance(e, Seq):
            out = seq(*(walk(x) for x in e.items))
        elif isinstance(e, Choice):
            out = union(walk(x) for x in e.items)
        elif isinstance(e, Repeat):
            out = repeat(walk(e.item), e.min, e.max)
        else:
            raise charfa.NotCharacterLevel(f"cannot spell {e!r} as JSON string text")
        memo[id(e)] = out
        return out

    return walk(expr)


@dataclass
class Constraint:
    """One character-level constraint on a string: its expression, the keyword that set it and
    where (for the report when it cannot be combined with the others)."""

    expr: Expr
    sources: list[tuple[str, str]]  # (pointer, keyword) of the keywords that set it


def pattern_expr(pattern: str, pointer: str) -> Expr | str:
    """The search language of a JSON Schema ``pattern``, or the reason it cannot be compiled
    (lookaround, backreferences, Unicode property escapes); a malformed regex is a schema
    error."""
    try:
        return regex_to_expr(pattern, search=True)
    except UnsupportedRegexError as exc:
        return exc.reason
    except RegexSyntaxError as exc:
        raise SchemaError(f"invalid regular expression {pattern!r}: {exc.reason}",
                          pointer=pointer) from None


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


def combine(constraints: Sequence[Constraint], *, label: Callable, rules: dict[str, Expr],
            prefix: str, report: Callable[[str, str, str], None],
            dfas: Sequence[charfa.DFA] = ()) -> Expr:
    """JSON-spelled contents satisfying every constraint (their intersection).

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
        return charfa.to_expr(dfa, label, rules, prefix)
    except (charfa.AutomatonTooLarge, charfa.NotCharacterLevel):
        if not constraints:
            raise
        kept = constraints[0].sources[0][1]
        for c in constraints[1:]:
            for pointer, keyword in c.sources:
                report(pointer, keyword, f"{keyword} cannot be combined with {kept} in one "
                       f"automaton of reasonable size; only {kept} is enforced")
        return json_spelled(constraints[0].expr, label)
