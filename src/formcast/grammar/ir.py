"""The grammar IR: one tokenizer-independent representation that every front end targets.

A grammar is a set of named rules; each rule body is an expression tree of literals (exact
bytes), byte sets, Unicode character sets (matched as whole UTF-8 characters), sequences,
choices, bounded repetitions and references to other rules. GBNF, regex and JSON Schema all
compile to this, and the engine compiles this to byte automata, so a constraint means the same
thing whichever language wrote it.

Expressions are frozen dataclasses: hashable, comparable and safe to share across threads.
They are defined in ``ir_nodes``, the functions that build them in ``ir_build`` and the range
algebra in ``ir_ranges`` (both compiled by mypyc at install); this module gathers them and
holds ``Grammar``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from formcast.errors import GrammarError
from formcast.grammar.ir_build import (
    byte_set,
    chars,
    choice,
    factored_choice,
    is_nothing,
    lit,
    opt,
    plus,
    ref,
    repeat,
    seq,
    star,
)
from formcast.grammar.ir_nodes import (
    EMPTY,
    NOTHING,
    ByteSet,
    CharSet,
    Choice,
    Expr,
    Literal,
    Ref,
    Repeat,
    Seq,
)
from formcast.grammar.ir_ranges import (
    MAX_CODEPOINT,
    SURROGATES,
    complement_ranges,
    merge_ranges,
    subtract_ranges,
    utf8_byte_sequences,
)

if TYPE_CHECKING:  # pragma: no cover
    from formcast.grammar.report import CompileReport

__all__ = [
    "EMPTY", "MAX_CODEPOINT", "NOTHING", "SURROGATES", "ByteSet", "CharSet", "Choice", "Expr",
    "Grammar", "Literal", "ReadableRules", "Ref", "Repeat", "Seq", "byte_set", "chars",
    "choice", "complement_ranges", "factored_choice", "is_nothing", "iter_refs", "lit", "merge_ranges",
    "opt", "plus", "ref", "repeat", "seq", "star", "subtract_ranges", "utf8_byte_sequences",
]


# ----------------------------------------------------------------------------- grammar


class Grammar:
    """An immutable set of named rules with a start rule.

    Build one with a front end (``from_gbnf``, ``from_regex``, ``from_json_schema``) or from IR
    expressions directly. ``report`` is the ``CompileReport`` of the front end that built it
    (JSON Schema fills it; others leave ``None``).

    A front end may hand over its rules as built plus a ``readable`` form of them
    (``ReadableRules``: the JSON Schema compiler folds its single-use helper rules back in):
    ``rules``, the GBNF and the report's rule count show the readable form, made on first
    use; the engine compiles the rules as built (``engine_rules``), which define the same
    language, so a compile for a matcher never pays for the tidying.
    """

    __slots__ = ("_rules", "_start", "_report", "_fingerprint", "_readable")

    def __init__(self, rules: Mapping[str, Expr], start: str = "root", *,
                 report: CompileReport | None = None,
                 readable: ReadableRules | None = None, fingerprint: str | None = None,
                 _refs_checked: bool = False) -> None:
        # ``_refs_checked``: a front end that checked every reference itself (GBNF names the
        # line of an undefined one; the JSON Schema compiler defines each rule it refers to)
        # skips the walk over every node of every rule.
        frozen = dict(rules)
        if start not in frozen:
            raise GrammarError(f"start rule {start!r} is not defined")
        for name, body in frozen.items():
            if not isinstance(body, Expr):
                raise GrammarError(f"rule {name!r} is not an IR expression: {body!r}")
            if _refs_checked:
                continue
            for missing in _undefined_refs(body, frozen):
                raise GrammarError(f"rule {name!r} refers to undefined rule {missing!r}")
        object.__setattr__(self, "_rules", MappingProxyType(frozen))
        object.__setattr__(self, "_start", start)
        object.__setattr__(self, "_report", report)
        object.__setattr__(self, "_fingerprint", fingerprint)
        object.__setattr__(self, "_readable", readable)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Grammar objects are immutable")

    @property
    def rules(self) -> Mapping[str, Expr]:
        """The rules, in their readable form."""
        return self._rules if self._readable is None else self._readable.rules()

    @property
    def engine_rules(self) -> Mapping[str, Expr]:
        """The rules as the front end built them (the same language as ``rules``)."""
        return self._rules

    @property
    def start(self) -> str:
        return self._start

    @property
    def report(self) -> CompileReport | None:
        return self._report

    @property
    def fingerprint(self) -> str:
        """A stable hash of the grammar's content (for cache keys): of its rules as built,
        unless the front end named it by its input (a grammar that is a pure function of that
        input: the JSON Schema compiler passes its schema hash, version and options, which
        spares hashing the text of every rule, 1-2 ms of a schema compile)."""
        if self._fingerprint is None:
            text = repr((self._start, sorted(self._rules.items(), key=lambda kv: kv[0])))
            object.__setattr__(self, "_fingerprint", hashlib.sha256(text.encode()).hexdigest()[:32])
        return self._fingerprint

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grammar) and self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"Grammar(start={self._start!r}, rules={len(self.rules)})"

    # Front ends are imported lazily so that ``ir`` stays the bottom of the grammar layer.
    @classmethod
    def from_gbnf(cls, text: str, start: str = "root") -> Grammar:
        """Parse llama.cpp's GBNF dialect. Errors name the line and column."""
        from formcast.grammar.gbnf import parse_gbnf

        return parse_gbnf(text, start=start)

    def to_gbnf(self) -> str:
        """Print GBNF that llama.cpp accepts and that parses back to the same language."""
        from formcast.grammar.gbnf import print_gbnf

        return print_gbnf(self)

    @classmethod
    def from_regex(cls, pattern: str) -> Grammar:
        """A grammar whose language is the full match of ``pattern`` (JSON Schema dialect)."""
        from formcast.grammar.regex import regex_to_expr

        return cls({"root": regex_to_expr(pattern)})

    @classmethod
    def from_json_schema(cls, schema: Any, **options: Any) -> Grammar:
        """Compile a JSON Schema; the result's ``report`` says what was and was not enforced."""
        from formcast.grammar.json_schema import compile_json_schema

        return compile_json_schema(schema, **options)


class ReadableRules:
    """The readable form of a front end's rules, ``tidy(built)``, made once, on first use,
    by whichever thread asks first (grammars and reports are shared across threads)."""

    __slots__ = ("_built", "_tidy", "_lock", "_rules")

    def __init__(self, built: Mapping[str, Expr],
                 tidy: Callable[[Mapping[str, Expr]], Mapping[str, Expr]]) -> None:
        self._built = built
        self._tidy = tidy
        self._lock = threading.Lock()
        self._rules: Mapping[str, Expr] | None = None

    def rules(self) -> Mapping[str, Expr]:
        got = self._rules
        if got is None:
            with self._lock:
                if self._rules is None:
                    self._rules = MappingProxyType(dict(self._tidy(self._built)))
                got = self._rules
        return got


def _undefined_refs(expr: Expr, rules: Mapping[str, Expr]) -> list[str]:
    # Exact type checks: every grammar's construction walks all of its rules (an enum's
    # hundreds of literals included).
    missing: list[str] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        kind = type(e)
        if kind is Ref:
            if e.name not in rules:  # type: ignore[attr-defined]
                missing.append(e.name)  # type: ignore[attr-defined]
        elif kind is Seq or kind is Choice:
            stack.extend(e.items)  # type: ignore[attr-defined]
        elif kind is Repeat:
            stack.append(e.item)  # type: ignore[attr-defined]
    return missing


def iter_refs(expr: Expr) -> Iterable[str]:
    """Names of the rules that ``expr`` refers to directly."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Ref):
            yield e.name
        elif isinstance(e, Seq | Choice):
            stack.extend(e.items)
        elif isinstance(e, Repeat):
            stack.append(e.item)
