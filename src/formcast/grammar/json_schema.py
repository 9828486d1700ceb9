"""JSON Schema (2020-12, and draft 7 style documents) -> grammar IR, with a CompileReport.

``compile_json_schema(schema)`` returns an immutable ``Grammar`` whose language is the JSON
texts of the values the schema allows, up to spelling (see below); ``grammar.report`` lists
what was enforced and what was not. With ``strict=True`` (the default) any keyword the grammar
cannot enforce raises ``UnsupportedSchemaError`` naming them all; with ``strict=False`` the
grammar over-approximates there (it never rejects a valid value) and the report says where.

How it works: each schema object is flattened into a conjunction (``json_conj``): ``allOf`` and
``$ref`` with siblings merge, ``anyOf``/``oneOf`` distribute over the rest. A ``$ref`` alone
becomes a reference to ONE rule per target, named after the target's path, so shared and
recursive definitions are never copied. ``enum``/``const`` compile to the listed values that
pass the whole schema (checked with ``jsonschema``), which makes them exact whatever keywords
surround them. Objects, arrays, strings and numbers have their own builders.

Spelling: the grammar accepts at least one spelling of every valid value, not every spelling.
Whitespace between tokens is bounded ("flexible": one optional newline then up to 20 spaces or
tabs; "compact": none; or a regex). Named object properties come in schema order. Constrained
numbers have no exponent, integers no fraction (``1.0`` is the integer ``1``); constrained
strings do not accept ``\\u`` escapes of printable ASCII. The report's ``notes`` say which of
these apply.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from formcast.errors import (
    FormcastError,
    GrammarError,
    SchemaError,
    SchemaSyntaxError,
    UnsupportedSchemaError,
)
from formcast.gc_pause import gc_paused
from formcast.grammar import charfa
from formcast.grammar.cache import (
    DEFAULT_CACHE,
    CompileCache,
    Memo,
    canonical_utf8,
    schema_hash,
)
from formcast.grammar.ir import (
    Expr,
    Grammar,
    ReadableRules,
    chars,
    choice,
    factored_choice,
    is_nothing,
    lit,
    opt,
    repeat,
    seq,
    star,
)
from formcast.grammar.ir_kinds import CHOICE, EMPTY, NOTHING, REF, REPEAT, SEQ
from formcast.grammar.json_arrays import build_array
from formcast.grammar.json_conj import (
    ALL_TYPES,
    ANNOTATIONS,
    CONSTRAINTS,
    Accumulator,
    Conj,
    Group,
    Negated,
    Sub,
    expand_types,
    json_key,
    json_type,
)
from formcast.grammar.json_metacheck import certainly_valid_2020_12
from formcast.grammar.json_negate import negate
from formcast.grammar.json_numbers import build_number
from formcast.grammar.json_objects import build_object
from formcast.grammar.json_refs import (
    Loc,
    SchemaIndex,
    join_pointer,
    split_pointer,
    unescape_token,
)
from formcast.grammar.json_strings import (
    build_string,
    pattern_expr,
    string_constraints,
)
from formcast.grammar.json_text import (
    GENERIC_INTEGER,
    GENERIC_NUMBER,
    GENERIC_STRING,
    JSON_CHAR,
    U_ALL,
    char_forms_cached,
    string_union,
    to_decimal,
    union,
    value_literal,
)
from formcast.grammar.prune import prune_rules
from formcast.grammar.regex import regex_to_expr
from formcast.grammar.report import CompileReport, Unenforced

COMPILER_VERSION: Final = "1.0"
FLEXIBLE_INDENT: Final = 20
# Built once: every schema compile with the default whitespace uses this body.
FLEXIBLE_WS: Final[Expr] = seq(opt(choice(lit("\n"), lit("\r\n"))), repeat(chars(" \t"), 0, FLEXIBLE_INDENT))
# One JSON string character of a constrained string, its \u escapes in the rule named below.
CHAR_BODY: Final[Expr] = JSON_CHAR
MAX_BRANCH_PRODUCT: Final = 256

__all__ = ["compile_json_schema", "CompileOptions", "COMPILER_VERSION", "load_schema_text",
           "clear_memos"]

# charfa.to_expr results with the compiler's character labels, for automata that need no helper
# rules: (expression, whether a label was spelled, which creates the "unicode-escape" rule)
_SPELLED: Final = Memo(512)


@dataclass(frozen=True)
class CompileOptions:
    """Options that change the grammar (all of them are part of the cache key)."""

    whitespace: str = "flexible"  # "flexible" | "compact" | a regex over " \t\n\r"
    max_depth: int | None = None  # nesting bound for generic values (schema `true`, untyped)
    property_order: str = "schema"  # "schema" | "any" (objects of at most 5 properties)
    formats: str = "assert"  # "assert": enforce known formats | "annotate": formats are notes

    def __post_init__(self) -> None:
        if not isinstance(self.whitespace, str) or not self.whitespace:
            raise FormcastError("whitespace must be 'flexible', 'compact' or a regex")
        if self.max_depth is not None and (not isinstance(self.max_depth, int)
                                           or self.max_depth < 0):
            raise FormcastError(f"max_depth must be a non-negative integer, not {self.max_depth!r}")
        if self.property_order not in ("schema", "any"):
            raise FormcastError(f"property_order must be 'schema' or 'any', "
                                f"not {self.property_order!r}")
        if self.formats not in ("assert", "annotate"):
            raise FormcastError(f"formats must be 'assert' or 'annotate', not {self.formats!r}")

    def as_dict(self) -> dict[str, Any]:
        """The options by name (``dataclasses.asdict`` deep-copies every field: a tenth of
        a small schema's compile, twice)."""
        return {"whitespace": self.whitespace, "max_depth": self.max_depth,
                "property_order": self.property_order, "formats": self.formats}


def load_schema_text(text: str | bytes, source: str = "<schema>") -> Any:
    """Parse JSON schema text; a syntax error names the source, line and column."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaSyntaxError(exc.msg, source=source, line=exc.lineno,
                                column=exc.colno) from None


def clear_memos() -> None:
    """Forget the pieces compiles share (automata, spelled automata, number languages, regex
    languages, key sets, rule names). Compiled grammars do not change; the next compiles
    only redo that work. For tests and for releasing memory."""
    from formcast.grammar import json_numbers, json_objects, json_strings, prune

    for memoised in (charfa.from_expr, charfa.intersect, charfa.union, charfa.complement,
                     charfa._minimize, json_objects._names_dfa, json_strings._search_language):
        memoised.cache_clear()
    for memo in (_SPELLED, json_numbers._NUMBER_EXPRS, prune._SHARED_BODY_REFS):
        memo.clear()


def compile_json_schema(schema: Any, *, whitespace: str = "flexible", strict: bool = True,
                        max_depth: int | None = None, property_order: str = "schema",
                        formats: str = "assert", cache: CompileCache | None = DEFAULT_CACHE
                        ) -> Grammar:
    """Compile ``schema`` (a dict, a boolean, or JSON text) to a ``Grammar`` with a report.

    Compiled grammars are cached by schema hash, compiler version and options; the same
    immutable grammar is returned to every caller. ``strict`` only decides whether an inexact
    compile raises, so it is not part of the key.
    """
    if isinstance(schema, str | bytes):
        schema = load_schema_text(schema)
    options = CompileOptions(whitespace, max_depth, property_order, formats)
    data = canonical_utf8(schema)
    digest = hashlib.sha256(data).hexdigest()  # schema_hash, from the text made once
    anchored = _names_resources(data)

    def build() -> Grammar:
        with gc_paused():
            return SchemaCompiler(schema, options, digest, anchored).compile()

    if cache is None:
        grammar = build()
    else:
        key = (digest, COMPILER_VERSION, tuple(sorted(options.as_dict().items())))
        grammar = cache.get_or_compile(key, build)
    report = grammar.report
    if strict and report is not None and report.unenforced:
        raise UnsupportedSchemaError([u.as_tuple() for u in report.unenforced])
    return grammar


def _names_resources(data: bytes) -> bool:
    """Whether the schema whose canonical JSON (UTF-8) is ``data`` may hold an ``$id`` or an
    anchor (a key spelled so, or a string that reads like one: then the document is
    indexed)."""
    return b'"$id"' in data or b'"$anchor"' in data or b'"$dynamicAnchor"' in data


_DRAFT_2020_12_URIS: Final = ("https://json-schema.org/draft/2020-12/schema",
                       "https://json-schema.org/draft/2020-12/schema#")


def _check_schema(schema: Any) -> tuple[Any, bool]:
    """Validate the schema against its metaschema; returns the validator class (None for
    draft 2020-12, resolved when first needed: importing ``jsonschema`` costs more than most
    compiles) and whether the dialect is draft 7 or older (where siblings of ``$ref`` are
    ignored)."""
    if not isinstance(schema, dict | bool):
        raise SchemaError(f"a schema must be a JSON object or a boolean, not {type(schema).__name__}")
    if ((not isinstance(schema, dict) or schema.get("$schema", _DRAFT_2020_12_URIS[0])
         in _DRAFT_2020_12_URIS) and certainly_valid_2020_12(schema)):
        return None, False
    from jsonschema import exceptions, validators

    unknown = object()
    cls = validators.validator_for(schema, default=unknown)
    if cls is unknown:
        if isinstance(schema, dict) and "$schema" in schema:
            raise SchemaError(f"unknown $schema {schema['$schema']!r}: formcast compiles the "
                              "standard dialects (2020-12, 2019-09, draft 7/6/4); remove $schema "
                              "or use one of their URIs", pointer="/$schema")
        cls = validators.Draft202012Validator
    # No format checker: metaschema "regex" checks use Python's re, which rejects valid ECMA
    # patterns such as \p{Letter}; patterns are checked by formcast's own regex parser.
    error = exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is not None:
        pointer = join_pointer("", *error.path)
        raise SchemaError(f"invalid schema: {error.message}", pointer=pointer)
    legacy = cls.__name__ in ("Draft3Validator", "Draft4Validator", "Draft6Validator",
                              "Draft7Validator")
    return cls, legacy


class SchemaCompiler:
    """One compile of one schema. Not reusable; ``compile()`` returns the grammar."""

    def __init__(self, schema: Any, options: CompileOptions, digest: str = "",
                 anchored: bool = True) -> None:
        # ``anchored``: False when the document holds no $id or anchor (_names_resources).
        self.schema = schema
        self.options = options
        self.digest = digest or schema_hash(schema)
        self._validator_cls, legacy = _check_schema(schema)
        self.index = SchemaIndex(schema, anchored)
        self.acc = Accumulator(self.index, legacy_refs=legacy)
        self.rules: dict[str, Expr] = {}
        self.keep: set[str] = set()
        self.ref_rules: dict[str, str] = {}
        self.node_rules: dict[tuple[str, ...], str] = {}
        self.open: list[str] = []
        self.unenforced: dict[tuple[str, str], str] = {}
        self.seen: set[tuple[str, str]] = set()
        self.notes: list[str] = []
        self._validators: dict[str, Any] = {}
        self._pattern_dfas: dict[str, charfa.DFA | None] = {}
        # String enums by their values: schemas repeat a list (country, billing_country).
        self._string_enums: dict[tuple[str, ...], Expr] = {}
        self._rule_names: dict[str, str] = {}  # pointer -> rule base name (_rule_base)
        self.ws = self._whitespace()

    @property
    def validator_cls(self) -> Any:
        """The ``jsonschema`` validator class of the schema's dialect."""
        if self._validator_cls is None:
            from jsonschema import Draft202012Validator

            self._validator_cls = Draft202012Validator
        return self._validator_cls

    # -- services for the builders

    def report(self, pointer: str, keyword: str, reason: str) -> None:
        self.unenforced.setdefault((pointer, keyword), reason)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def consuming(self) -> _Consuming:
        """Children of a container come after input was consumed: reset left-recursion
        tracking for them (a ``with`` block)."""
        return _Consuming(self)

    def rule_base(self, loc: Loc) -> str:
        return _rule_base(loc.pointer, self._rule_names)

    def new_rule(self, name: str, body: Expr) -> str:
        """Add a rule named ``name`` (suffixed when taken by a different body)."""
        candidate, n = name, 2
        while candidate in self.rules and self.rules[candidate] != body:
            candidate, n = f"{name}-{n}", n + 1
        self.rules[candidate] = body
        return candidate

    def reserve_rule(self, name: str) -> str:
        """A fresh rule name based on ``name`` (its body is filled in later)."""
        candidate, n = name, 2
        while candidate in self.rules:
            candidate, n = f"{name}-{n}", n + 1
        self.rules[candidate] = NOTHING
        return candidate

    def prim(self, name: str) -> Expr:
        """A shared rule for a generic JSON piece: value, object, array, string, number..."""
        depth = self.options.max_depth
        if name in ("value", "object", "array") and depth is not None:
            return REF(self._bounded(name, depth))
        if name not in self.rules:
            self.rules[name] = NOTHING
            self.rules[name] = self._prim_body(name)
        return REF(name)

    def _prim_body(self, name: str) -> Expr:
        if name == "string":
            return GENERIC_STRING
        if name == "number":
            return GENERIC_NUMBER
        if name == "integer":
            return GENERIC_INTEGER
        if name == "char":
            self.prim("unicode-escape")
            return CHAR_BODY
        if name == "unicode-escape":
            return U_ALL
        if name == "value":
            return self._value_body(self.prim("object"), self.prim("array"))
        if name == "object":
            return self._object_body(self.prim("value"))
        if name == "array":
            return self._array_body(self.prim("value"))
        raise AssertionError(name)

    def _bounded(self, kind: str, depth: int) -> str:
        name = f"{kind}-d{depth}"
        if name in self.rules:
            return name
        self.rules[name] = NOTHING
        if kind == "value":
            if depth == 0:
                body = self._value_body(None, None)
            else:
                body = self._value_body(REF(self._bounded("object", depth)),
                                        REF(self._bounded("array", depth)))
        else:
            inner = (REF(self._bounded("value", depth - 1)) if depth > 0 else NOTHING)
            body = self._object_body(inner) if kind == "object" else self._array_body(inner)
        self.rules[name] = body
        return name

    def _value_body(self, obj: Expr | None, arr: Expr | None) -> Expr:
        alts = [a for a in (obj, arr) if a is not None]
        return choice(*alts, self.prim("string"), self.prim("number"), lit("true"),
                      lit("false"), lit("null"))

    def _object_body(self, value: Expr) -> Expr:
        if is_nothing(value):
            return seq(lit("{"), self.ws, lit("}"))
        member = seq(self.prim("string"), self.ws, lit(":"), self.ws, value, self.ws)
        return seq(lit("{"), self.ws, opt(seq(member, star(seq(lit(","), self.ws, member)))),
                   lit("}"))

    def _array_body(self, value: Expr) -> Expr:
        if is_nothing(value):
            return seq(lit("["), self.ws, lit("]"))
        item = seq(value, self.ws)
        return seq(lit("["), self.ws, opt(seq(item, star(seq(lit(","), self.ws, item)))),
                   lit("]"))

    def label(self, ranges: tuple[tuple[int, int], ...]) -> Expr:
        """The JSON spellings of one character of ``ranges`` (shares the \\u escape rule)."""
        return char_forms_cached(ranges, self.prim("unicode-escape"))

    def spell(self, dfa: charfa.DFA, prefix: str) -> Expr:
        """``dfa``'s strings as JSON string contents (``charfa.to_expr`` with ``label``);
        helper rules for cycles are named ``{prefix}-{n}``. Shared across compiles when the
        automaton needs no helper rules."""
        got = _SPELLED.get(dfa)
        if got is not None:
            expr, labelled = got
            if labelled:
                self.prim("unicode-escape")
            return expr
        before = set(self.rules)
        labelled = False

        def label(ranges: tuple[tuple[int, int], ...]) -> Expr:
            nonlocal labelled
            labelled = True
            return self.label(ranges)

        expr = charfa.to_expr(dfa, label, self.rules, prefix)
        if set(self.rules) - before <= {"unicode-escape"}:
            _SPELLED.put(dfa, (expr, labelled))
        return expr

    def any_value(self) -> Expr:
        return self.prim("value")

    def _whitespace(self) -> Expr:
        mode = self.options.whitespace
        if mode == "compact":
            return EMPTY
        if mode == "flexible":
            body = FLEXIBLE_WS
            self.note(f"whitespace between tokens is bounded: at most one newline and "
                      f"{FLEXIBLE_INDENT} spaces or tabs")
        else:
            try:
                body = regex_to_expr(mode)
                dfa = charfa.minimize(charfa.from_expr(body))
                allowed = charfa.minimize(charfa.from_expr(star(chars(" \t\n\r"))))
            except (charfa.AutomatonTooLarge, charfa.NotCharacterLevel, GrammarError) as exc:
                raise FormcastError(f"whitespace regex {mode!r} cannot be used: {exc}") from None
            if not charfa.difference(dfa, allowed).is_empty():
                raise FormcastError(f"whitespace regex {mode!r} matches characters other than "
                                    "space, tab, newline and carriage return")
            if dfa.is_empty():
                raise FormcastError(f"whitespace regex {mode!r} matches nothing")
            if not dfa.is_finite():
                self.note("the whitespace regex allows unbounded whitespace: a model can get "
                          "stuck emitting spaces")
        self.rules["ws"] = body
        return REF("ws")

    def pattern_dfa(self, pattern: str, pointer: str) -> charfa.DFA | None:
        """The search language of a pattern as an automaton (None: not compilable)."""
        if pattern not in self._pattern_dfas:
            expr = pattern_expr(pattern, pointer)
            dfa = None
            if not isinstance(expr, str):
                try:
                    dfa = charfa.minimize(charfa.from_expr(expr))
                except (charfa.AutomatonTooLarge, charfa.NotCharacterLevel):
                    dfa = None
            self._pattern_dfas[pattern] = dfa
        return self._pattern_dfas[pattern]

    def key_language(self, schema: Any, loc: Loc) -> charfa.DFA | None | str:
        """``propertyNames`` as an automaton over key strings; "none" when no key is allowed,
        None when unconstrained or not compilable (then reported)."""
        if schema is True:
            return None
        if schema is False:
            return "none"
        conj = Conj()
        self.acc.add(conj, schema, loc, (loc.pointer,))
        self.seen.update(conj.seen)
        if conj.false:
            return "none"
        if conj.values is not None:
            valid = self.checker(conj)
            keys = [v for v in conj.values if isinstance(v, str) and valid(v)]
            if not keys:
                return "none"
            return charfa.minimize(charfa.from_expr(union(lit(k) for k in keys)))
        if conj.groups or conj.nots or conj.issues:
            for ptr, kw in conj.seen:
                if kw in ("anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef"):
                    self.report(ptr, kw, "propertyNames: only type, enum, const, pattern, format "
                                "and lengths are compiled; the key check is left to the validator")
            return None
        if conj.types is not None and "string" not in conj.types:
            return "none"
        cons = string_constraints(self, conj)
        if not cons and not conj.string_dfas:
            return None
        try:
            dfa = charfa.language_of(c.expr for c in cons)
            for extra in conj.string_dfas:
                dfa = charfa.intersect(dfa, extra)
            return dfa
        except (charfa.AutomatonTooLarge, charfa.NotCharacterLevel):
            for c in cons:
                for ptr, kw in c.sources:
                    self.report(ptr, kw, "propertyNames constraint too large to compile")
            return None

    # -- compiling schemas

    def compile(self) -> Grammar:
        started = time.perf_counter()
        root_loc = self.index.loc_of("")
        self.ref_rules[""] = "root"
        self.keep.add("root")
        self.rules["root"] = NOTHING
        self.open.append("root")
        self.rules["root"] = self.compile_node(self.schema, root_loc)
        self.open.pop()
        keep = frozenset(self.keep)
        readable = ReadableRules(dict(self.rules), lambda built: prune_rules(built, set(keep)))
        if self.acc.unknown:
            self.note("unknown keywords ignored (they are annotations in JSON Schema): "
                      + ", ".join(sorted(self.acc.unknown)))
        unenforced = tuple(Unenforced(p, k, r) for (p, k), r in sorted(self.unenforced.items()))
        compiled = Counter(kw for ptr, kw in self.seen if (ptr, kw) not in self.unenforced)
        report = CompileReport(
            compiled=dict(compiled), unenforced=unenforced, notes=tuple(self.notes),
            readable_rules=readable, compile_seconds=time.perf_counter() - started,
            schema_hash=self.digest, compiler_version=COMPILER_VERSION,
            options=self.options.as_dict())
        # Named by its input: the compiler is deterministic, so equal inputs give equal rules.
        # (One repr, of the only free-form option: a repr of the whole key tuple made ~20.)
        o = self.options
        named = (f"{self.digest}\0{COMPILER_VERSION}\0{o.whitespace!r}\0{o.max_depth}\0"
                 f"{o.property_order}\0{o.formats}")
        fingerprint = "s" + hashlib.sha256(named.encode()).hexdigest()[:31]
        return Grammar(self.rules, "root", report=report, readable=readable,
                       fingerprint=fingerprint, _refs_checked=True)

    def compile_node(self, schema: Any, loc: Loc) -> Expr:
        """The grammar of one subschema."""
        if schema is True:
            return self.any_value()
        if schema is False:
            return NOTHING
        if isinstance(schema, Negated):
            conj = Conj()
            self.acc.add(conj, schema, loc)
            return self.compile_conj(conj, loc)
        if not isinstance(schema, dict):
            raise SchemaError("a schema must be an object or a boolean", pointer=loc.pointer)
        if self._ref_only(schema):
            for k in schema:
                if k not in CONSTRAINTS and k not in ANNOTATIONS:
                    self.acc.unknown.add(k)
            return self._ref(schema["$ref"], loc)
        conj = Conj()
        self.acc.add(conj, schema, loc, (loc.pointer,))
        return self.compile_conj(conj, loc)

    def _ref(self, ref: Any, loc: Loc) -> Expr:
        ptr = join_pointer(loc.pointer, "$ref")
        self.seen.add((ptr, "$ref"))
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", pointer=ptr)
        target = self.index.resolve(ref, loc.base)
        if target is None:
            self.report(ptr, "$ref", f"$ref {ref!r} points outside this document (remote "
                        "references are not fetched); any value is accepted there")
            return self.any_value()
        name = self.ref_rules.get(target)
        if name is None:
            node = self.index.node_at(target)
            name = self.ref_rules[target] = self.reserve_rule(_rule_base(target, self._rule_names))
            self.keep.add(name)
            self.open.append(name)
            try:
                body = self.compile_node(node, self.index.loc_of(target))
            finally:
                self.open.pop()
            self.rules[name] = body
            return REF(name)
        if name in self.open:
            self.report(ptr, "$ref", f"$ref {ref!r} refers back to itself before any input "
                        "(left recursion); that branch is dropped")
            return NOTHING
        return REF(name)

    def compile_subs(self, subs: list[Sub], pointer: str) -> Expr:
        """The grammar of the conjunction of ``subs`` (none: any value) as a rule named after
        ``pointer``. The same conjunction always gets the same rule: that shares it and ends
        recursion through merged references (``{"$ref": "#", "minItems": 1}``)."""
        subs = [s for s in subs if s[0] is not True]
        if not subs:
            return self.any_value()
        first = subs[0][0]
        # (compile_node(sub, loc), not compile_node(*subs[0]): under mypyc, passing a tuple on
        # as arguments is a generic Python call)
        if len(subs) == 1 and (first is False or (isinstance(first, dict) and self._ref_only(first))):
            return self.compile_node(first, subs[0][1])
        key = tuple(("not:" if isinstance(sub, Negated) else "") + loc.pointer
                    for sub, loc in subs)
        name = self.node_rules.get(key)
        if name is not None:
            if name in self.open:
                self.report(subs[0][1].pointer, "$ref", "this schema refers back to itself "
                            "before any input (left recursion); that branch is dropped")
                return NOTHING
            return REF(name)
        name = self.node_rules[key] = self.reserve_rule(_rule_base(pointer, self._rule_names))
        self.open.append(name)
        try:
            if len(subs) == 1:
                expr = self.compile_node(first, subs[0][1])
            else:
                conj = Conj()
                for sub, loc in subs:
                    self.acc.add(conj, sub, loc, (loc.pointer,))
                expr = self.compile_conj(conj, subs[0][1])
        finally:
            self.open.pop()
        self.rules[name] = expr
        if _size(expr, 40) >= 40:
            self.keep.add(name)
        return REF(name)

    def _ref_only(self, schema: dict) -> bool:
        return "$ref" in schema and (self.acc.legacy_refs or all(
            k == "$ref" or k in ANNOTATIONS or k not in CONSTRAINTS for k in schema))

    def compile_conj(self, conj: Conj, loc: Loc) -> Expr:
        self.seen.update(conj.seen)
        if conj.false:
            return NOTHING
        if conj.values is not None:
            return self._finite(conj)
        for issue in conj.issues:
            self.report(*issue)
        nots, conj.nots = conj.nots, []
        for sub, sub_loc in nots:
            if not self._apply_not(conj, sub, sub_loc):
                return NOTHING
        if conj.groups:
            return self._distribute(conj, loc)
        return self._build(conj, loc)

    def _apply_not(self, conj: Conj, sub: Any, sub_loc: Loc) -> bool:
        """Fold ``not`` into the conjunction (as a disjunction of the negated schema's failure
        sets) where exact; False when nothing can pass."""
        pieces = negate(self, sub, sub_loc)
        if pieces is None:
            self.report(sub_loc.pointer, "not", "'not' is compiled for schemas of types, "
                        "values, bounds, lengths, patterns, required and counts; this one is "
                        "left to the validator")
            return True
        if not pieces:
            return False
        if len(pieces) == 1:
            conj.merge(pieces[0])
        else:
            conj.groups.append(Group("pieces", [], sub_loc, pieces))
        return True

    def _finite(self, conj: Conj) -> Expr:
        assert conj.values is not None
        keep = []
        dfas, excluded = conj.string_dfas, conj.excluded_numbers
        if not dfas and not self._checked_sources(conj) and \
                all(isinstance(v, str) for v in conj.values) and \
                (conj.types is None or "string" in conj.types):
            keep = list(conj.values)  # a string enum nothing else constrains: every value
        else:
            valid = self.checker(conj)
            for v in conj.values:
                if isinstance(v, str):
                    if dfas and not all(d.accepts(v) for d in dfas):
                        continue
                elif excluded and json_type(v) in ("number", "integer") and any(
                        to_decimal(v) == x for x in excluded):
                    continue
                if valid(v):
                    keep.append(v)
        if not keep:
            return NOTHING
        if all(type(v) is str for v in keep):
            key = tuple(keep)
            got = self._string_enums.get(key)
            if got is None:
                got = self._string_enums[key] = string_union(keep)
            return got
        limit = 5 if self.options.property_order == "any" else 0
        return union(value_literal(v, self.ws, limit) for v in keep)

    @staticmethod
    def _checked_sources(conj: Conj) -> list[tuple[Any, Any]]:
        """The source schemas of ``conj`` a value must still be validated against: those with
        a constraint other than enum, const and type (applied when the values were listed)."""
        return [(schema, loc) for schema, loc in conj.sources if not (
            isinstance(schema, dict) and all(
                k in ("enum", "const", "type") or k not in CONSTRAINTS for k in schema))]

    def checker(self, conj: Conj) -> Callable[[Any], bool]:
        """Whether a value satisfies every source schema of ``conj`` (by ``jsonschema``), as a
        function: what does not depend on the value is worked out once (a 700-value enum spent
        most of its compile redoing it per value).

        Sources made only of enum/const/type were already applied when the value list was
        intersected, so only the type is checked for them (a 5,000-value enum would otherwise
        cost jsonschema's quadratic enum check)."""
        types = None if conj.types is None else (
            expand_types(conj.types) | ({"number"} if "number" in conj.types else set()))
        checked = self._checked_sources(conj)

        def valid(value: Any) -> bool:
            if types is not None and json_type(value) not in types:
                return False
            for _, loc in checked:
                validator = self._validator(loc.pointer)
                try:
                    if not validator.is_valid(value):
                        return False
                except Exception as exc:  # unresolvable refs, recursion: keep the value, say so
                    self.report(join_pointer(loc.pointer, "enum"), "enum",
                                f"could not check enum values against the rest of the schema "
                                f"({type(exc).__name__}); all listed values are accepted")
            return True

        return valid

    def _validator(self, pointer: str) -> Any:
        got = self._validators.get(pointer)
        if got is None:
            from jsonschema import FormatChecker
            from referencing import Registry, Resource
            from referencing.jsonschema import DRAFT202012

            resource = Resource.from_contents(self.schema, default_specification=DRAFT202012)
            registry = Registry().with_resource(self.index.root_base, resource)
            if self.index.root_base != "https://formcast.invalid/schema.json":
                registry = registry.with_resource("https://formcast.invalid/schema.json", resource)
            registry = registry.crawl()
            checker = FormatChecker() if self.options.formats == "assert" else None
            wrapper = {"$ref": f"{self.index.root_base}#{quote(pointer, safe='/~')}"}
            # Two statements: mypyc compiled ``got = store[k] = self.validator_cls(...)`` so
            # that the class itself was stored, never called.
            validator_cls = self.validator_cls
            got = validator_cls(wrapper, registry=registry, format_checker=checker)
            self._validators[pointer] = got
        return got

    def _distribute(self, conj: Conj, loc: Loc) -> Expr:
        product = 1
        for i, g in enumerate(conj.groups):
            product *= len(g.pieces) if g.pieces is not None else len(g.branches)
            if product > MAX_BRANCH_PRODUCT:
                for late in conj.groups[i:]:
                    self.report(join_pointer(late.loc.pointer, late.kind), late.kind,
                                f"combining the {late.kind} here with the other anyOf/oneOf "
                                f"alternatives needs more than {MAX_BRANCH_PRODUCT} branches")
                conj.groups = conj.groups[:i]
                break
        if not conj.groups:
            return self._build(conj, loc)
        group = conj.groups[0]
        rest = conj.clone()
        rest.groups = conj.groups[1:]
        rest.seen = []
        rest.issues = []
        if group.kind == "if":
            return self._if_then_else(rest, group, loc)
        if group.pieces is not None:
            return factored_choice(*(self._with(rest, piece, loc) for piece in group.pieces))
        if group.kind == "oneOf" and not self._disjoint(group.branches):
            exact = self._exactly_one(rest, group, loc)
            if exact is not None:
                return exact
            self.report(join_pointer(group.loc.pointer, "oneOf"), "oneOf",
                        "oneOf is compiled as anyOf: its branches may overlap, so 'exactly one' "
                        "is left to the validator")
        simple = not rest.constrains_anything()
        alts = []
        for sub, sub_loc in group.branches:
            if simple:
                alts.append(self.compile_node(sub, sub_loc))
            else:
                branch = rest.clone()
                self.acc.add(branch, sub, sub_loc, (sub_loc.pointer, *sorted(rest.inlined)))
                alts.append(self.compile_conj(branch, loc))
        return factored_choice(*alts)

    def _with(self, rest: Conj, piece: Conj, loc: Loc) -> Expr:
        branch = rest.clone()
        branch.merge(piece)
        return self.compile_conj(branch, loc)

    def _exactly_one(self, rest: Conj, group: Group, loc: Loc) -> Expr | None:
        """oneOf as the OR over i of (branch i AND NOT every other branch), when every branch
        can be negated and the expansion stays small; None otherwise."""
        negations = [negate(self, sub, sub_loc) for sub, sub_loc in group.branches]
        if any(n is None for n in negations):
            return None
        alternatives: list[Expr] = []
        total = 0
        stack = tuple(sorted(rest.inlined))
        for i, (sub, sub_loc) in enumerate(group.branches):
            combos: list[list[Conj]] = [[]]
            for j, neg in enumerate(negations):
                if j != i:
                    assert neg is not None
                    combos = [combo + [p] for combo in combos for p in neg]
            total += len(combos)
            if total > MAX_BRANCH_PRODUCT:
                return None
            for combo in combos:
                branch = rest.clone()
                self.acc.add(branch, sub, sub_loc, (sub_loc.pointer, *stack))
                for piece in combo:
                    branch.merge(piece)
                alternatives.append(self.compile_conj(branch, loc))
        return factored_choice(*alternatives)

    def _if_then_else(self, rest: Conj, group: Group, loc: Loc) -> Expr:
        (cond, cond_loc), (then, then_loc), (other, other_loc) = group.branches
        stack = tuple(sorted(rest.inlined))
        failing = negate(self, cond, cond_loc)
        if failing is not None:  # exact: (if AND then) OR (NOT if AND else)
            yes = rest.clone()
            self.acc.add(yes, cond, cond_loc, (cond_loc.pointer, *stack))
            self.acc.add(yes, then, then_loc, (then_loc.pointer, *stack))
            alts = [self.compile_conj(yes, loc)]
            for piece in failing:
                no = rest.clone()
                no.merge(piece)
                self.acc.add(no, other, other_loc, (other_loc.pointer, *stack))
                alts.append(self.compile_conj(no, loc))
            return choice(*alts)
        yes, no = rest.clone(), rest.clone()
        self.report(cond_loc.pointer, "if", "if/then/else: the condition is not compiled (it uses "
                    "keywords without a simple negation); the grammar accepts values that satisfy "
                    "'then' or 'else'")
        self.acc.add(yes, then, then_loc, (then_loc.pointer, *stack))
        self.acc.add(no, other, other_loc, (other_loc.pointer, *stack))
        return choice(self.compile_conj(yes, loc), self.compile_conj(no, loc))

    def _disjoint(self, branches: list[Sub]) -> bool:
        """Whether no value can satisfy two of ``branches`` (proved from types, finite value
        sets, or a required discriminator property with disjoint values)."""
        sigs = [self._signature(sub, loc) for sub, loc in branches]
        for i in range(len(sigs)):
            for j in range(i + 1, len(sigs)):
                if not _sig_disjoint(sigs[i], sigs[j]):
                    return False
        return True

    def _signature(self, sub: Any, loc: Loc) -> tuple:
        conj = Conj()
        self.acc.add(conj, sub, loc, (loc.pointer,))
        if conj.false:
            return (set(), set(), {})
        values = None
        types = expand_types(conj.types) if conj.types is not None else set(ALL_TYPES)
        if conj.values is not None:
            values = {json_key(v) for v in conj.values}
            types &= {json_type(v) for v in conj.values} | (
                {"number"} if any(json_type(v) == "integer" for v in conj.values) else set())
        discriminators: dict[str, set] = {}
        if not conj.groups:
            for name in conj.required:
                for part in conj.objects:
                    if name in part.properties:
                        inner = Conj()
                        psub, ploc = part.properties[name]
                        self.acc.add(inner, psub, ploc, (ploc.pointer,))
                        if inner.values is not None:
                            keys = {json_key(v) for v in inner.values}
                            discriminators[name] = (discriminators[name] & keys
                                                    if name in discriminators else keys)
        return (types, values, discriminators)

    def _build(self, conj: Conj, loc: Loc) -> Expr:
        types = conj.types if conj.types is not None else set(ALL_TYPES)
        if conj.types is None and not conj.constrains_anything():
            return self.any_value()
        alts: list[Expr] = []
        if "object" in types:
            alts.append(build_object(self, conj, loc))
        if "array" in types:
            alts.append(build_array(self, conj, loc))
        if "string" in types:
            alts.append(build_string(self, conj, loc))
        if "number" in types or "integer" in types:
            alts.append(build_number(self, conj, loc, integer="number" not in types))
        if "boolean" in types:
            alts += [lit("true"), lit("false")]
        if "null" in types:
            alts.append(lit("null"))
        return choice(*alts) if alts else NOTHING

    # -- numbers

def _rule_base(pointer: str, memo: dict[str, str]) -> str:
    """The rule name for the subschema at ``pointer``: its tokens as words, ``root-...`` (or
    ``defs-...`` / ``definitions-...`` below those). Built from the parent pointer's name,
    which the compile asked for first (kept in ``memo``, one per compile: a process-wide
    ``lru_cache`` cost a Python-level call per lookup): a child costs one token, not its
    depth."""
    got = memo.get(pointer)
    if got is not None:
        return got
    if not pointer:
        return "root"
    parent, slash, token = pointer.rpartition("/")
    if not slash:
        split_pointer(pointer)  # raises: not a JSON pointer
    if "~" in token:
        token = unescape_token(token)
    if not parent and token in ("$defs", "definitions"):
        return token.lstrip("$")
    name = memo[pointer] = f"{_rule_base(parent, memo)}-{_word(token)}"
    return name


def _word(token: str) -> str:
    """``token`` as a word of a rule name: runs of characters other than ASCII letters and
    digits become one ``-``, none at either end."""
    # Most tokens are plain words ("properties", "items", "0") or snake_case property names
    # ("departure_date"): both without the regex, which took ~1.4 us a token.
    if token.isascii():
        if token.isalnum():
            return token
        word = token.replace("_", "-")
        if (word.replace("-", "").isalnum() and "--" not in word
                and not word.startswith("-") and not word.endswith("-")):
            return word
    return _NOT_WORD.sub("-", token).strip("-") or "x"


_NOT_WORD: Final = re.compile(r"[^A-Za-z0-9]+")


def _sig_disjoint(a: tuple, b: tuple) -> bool:
    ta, va, da = a
    tb, vb, db = b
    common = expand_types(ta) & expand_types(tb)
    if not common:
        return True
    if va is not None and vb is not None and not (va & vb):
        return True
    if common <= {"object"}:
        for name, keys in da.items():
            if name in db and not (keys & db[name]):
                return True
    return False


def _size(expr: Expr, limit: int) -> int:
    """Node count of ``expr``, stopping at ``limit``."""
    count = 0
    stack = [expr]
    while stack and count < limit:
        e = stack.pop()
        count += 1
        kind = type(e)
        if kind is SEQ or kind is CHOICE:
            stack.extend(e.items)  # type: ignore[attr-defined]
        elif kind is REPEAT:
            stack.append(e.item)  # type: ignore[attr-defined]
    return count


class _Consuming:
    """``SchemaCompiler.consuming``: a class, not a ``contextlib.contextmanager`` generator
    (a few of those a compile, each ~3 us to make and run)."""

    def __init__(self, compiler: SchemaCompiler) -> None:
        self.compiler = compiler
        self.saved: list[str] = []

    def __enter__(self) -> None:
        self.saved = self.compiler.open
        self.compiler.open = []

    def __exit__(self, *exc: object) -> None:
        self.compiler.open = self.saved
