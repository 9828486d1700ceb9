"""The grammar IR: one tokenizer-independent representation that every front end targets.

A grammar is a set of named rules; each rule body is an expression tree of literals (exact
bytes), byte sets, Unicode character sets (matched as whole UTF-8 characters), sequences,
choices, bounded repetitions and references to other rules. GBNF, regex and JSON Schema all
compile to this, and the engine compiles this to byte automata, so a constraint means the same
thing whichever language wrote it.

Expressions are frozen dataclasses: hashable, comparable and safe to share across threads.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from formcast.errors import GrammarError

if TYPE_CHECKING:  # pragma: no cover
    from formcast.grammar.report import CompileReport

MAX_CODEPOINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)


class Expr:
    """Base class of grammar expressions."""

    __slots__ = ()


def _keep_hash(expr: Expr, h: int) -> int:
    """Store a composite expression's hash on it: expressions are deep trees, hashed again
    and again as dict and set keys (memos, duplicate choices) while a schema compiles."""
    object.__setattr__(expr, "_hash", h)
    return h


@dataclass(frozen=True, slots=True)
class Literal(Expr):
    """An exact byte string (UTF-8 for text)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ByteSet(Expr):
    """Exactly one byte whose value lies in one of the inclusive ``ranges``."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class CharSet(Expr):
    """Exactly one Unicode scalar value (encoded as UTF-8) in ``ranges``, or not in them when
    ``negated``. Surrogates are never matched: they cannot be encoded in UTF-8."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def codepoint_ranges(self) -> tuple[tuple[int, int], ...]:
        """The matched code points as sorted, merged, surrogate-free inclusive ranges."""
        merged = merge_ranges(self.ranges)
        if self.negated:
            merged = complement_ranges(merged, 0, MAX_CODEPOINT)
        return subtract_ranges(merged, (SURROGATES,))


@dataclass(frozen=True, slots=True)
class Seq(Expr):
    """The items one after another. ``Seq(())`` matches the empty string."""

    items: tuple[Expr, ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        return _keep_hash(self, hash(self.items)) if h is None else h

    def __reduce__(self) -> tuple:
        return Seq, (self.items,)  # not the kept hash: str hashes differ between processes


@dataclass(frozen=True, slots=True)
class Choice(Expr):
    """Any one of the items. ``Choice(())`` matches nothing at all."""

    items: tuple[Expr, ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        return _keep_hash(self, hash(self.items)) if h is None else h

    def __reduce__(self) -> tuple:
        return Choice, (self.items,)  # not the kept hash (see Seq)


@dataclass(frozen=True, slots=True)
class Repeat(Expr):
    """``item`` repeated between ``min`` and ``max`` times (``max=None``: unbounded)."""

    item: Expr
    min: int = 0
    max: int | None = None
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        return _keep_hash(self, hash((self.item, self.min, self.max))) if h is None else h

    def __reduce__(self) -> tuple:
        return Repeat, (self.item, self.min, self.max)  # not the kept hash (see Seq)


@dataclass(frozen=True, slots=True)
class Ref(Expr):
    """A reference to another rule by name (this is how recursion is written)."""

    name: str


def _slot_setters(cls: type, *names: str) -> tuple:
    """The slot descriptors' setters of a frozen dataclass's fields."""
    return tuple(cls.__dict__[name].__set__ for name in names)


# Faster constructors than the dataclass ones, which set each field through
# object.__setattr__ (frozen): a schema compile makes about a thousand expressions, and the
# generated __init__ was the largest single line of its profile. Same fields, same values.
_SET_DATA, = _slot_setters(Literal, "data")
_SET_BYTE_RANGES, = _slot_setters(ByteSet, "ranges")
_SET_CHAR_RANGES, _SET_NEGATED = _slot_setters(CharSet, "ranges", "negated")
_SET_SEQ_ITEMS, _SET_SEQ_HASH = _slot_setters(Seq, "items", "_hash")
_SET_CHOICE_ITEMS, _SET_CHOICE_HASH = _slot_setters(Choice, "items", "_hash")
_SET_ITEM, _SET_MIN, _SET_MAX, _SET_REPEAT_HASH = _slot_setters(Repeat, "item", "min", "max",
                                                                "_hash")
_SET_NAME, = _slot_setters(Ref, "name")


def _literal_init(self: Literal, data: bytes) -> None:
    _SET_DATA(self, data)


def _byte_set_init(self: ByteSet, ranges: tuple[tuple[int, int], ...]) -> None:
    _SET_BYTE_RANGES(self, ranges)


def _char_set_init(self: CharSet, ranges: tuple[tuple[int, int], ...],
                   negated: bool = False) -> None:
    _SET_CHAR_RANGES(self, ranges)
    _SET_NEGATED(self, negated)


def _seq_init(self: Seq, items: tuple[Expr, ...]) -> None:
    _SET_SEQ_ITEMS(self, items)
    _SET_SEQ_HASH(self, None)


def _choice_init(self: Choice, items: tuple[Expr, ...]) -> None:
    _SET_CHOICE_ITEMS(self, items)
    _SET_CHOICE_HASH(self, None)


def _repeat_init(self: Repeat, item: Expr, min: int = 0,  # noqa: A002
                 max: int | None = None) -> None:  # noqa: A002
    _SET_ITEM(self, item)
    _SET_MIN(self, min)
    _SET_MAX(self, max)
    _SET_REPEAT_HASH(self, None)


def _ref_init(self: Ref, name: str) -> None:
    _SET_NAME(self, name)


for _cls, _init in ((Literal, _literal_init), (ByteSet, _byte_set_init),
                    (CharSet, _char_set_init), (Seq, _seq_init), (Choice, _choice_init),
                    (Repeat, _repeat_init), (Ref, _ref_init)):
    _init.__qualname__ = f"{_cls.__name__}.__init__"
    _cls.__init__ = _init  # type: ignore[method-assign]

EMPTY = Seq(())
NOTHING = Choice(())


# ----------------------------------------------------------------------------- constructors


def lit(text: str | bytes) -> Expr:
    """A literal; ``str`` is encoded as UTF-8."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return Literal(data) if data else EMPTY


def seq(*items: Expr) -> Expr:
    """A sequence, flattening nested sequences and merging adjacent literals."""
    # Exact type checks, one pass: the schema compiler calls this a few hundred times a
    # schema, and the isinstance version was a tenth of its front end.
    flat: list[Expr] = []
    after_literal = False
    for item in items:
        for part in item.items if type(item) is Seq else (item,):
            kind = type(part)
            if kind is Literal:
                if after_literal:
                    flat[-1] = Literal(flat[-1].data + part.data)  # type: ignore[attr-defined]
                    continue
                after_literal = True
            elif kind is Choice and not part.items:  # type: ignore[attr-defined]
                return NOTHING
            else:
                after_literal = False
            flat.append(part)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def choice(*items: Expr) -> Expr:
    """An alternation, flattening nested choices and dropping duplicates (order is kept)."""
    flat: list[Expr] = []
    seen: set[Expr] = set()
    for item in items:
        for part in item.items if type(item) is Choice else (item,):  # type: ignore
            if part not in seen:
                seen.add(part)
                flat.append(part)
    return flat[0] if len(flat) == 1 else Choice(tuple(flat))


def factored_choice(*items: Expr) -> Expr:
    """:func:`choice`, with alternatives that begin with the same item sharing it:
    ``a b | a c`` becomes ``a (b | c)``, level by level. Same language; the automaton holds
    the shared beginning once instead of once per alternative (the branches of an anyOf of
    tool calls all begin ``{ ws "name" ws : ws``)."""
    flat = choice(*items)
    return _factored(flat.items) if type(flat) is Choice else flat


def _factored(alts: tuple[Expr, ...] | list[Expr]) -> Expr:
    """The alternatives ``alts`` (distinct) with common first items shared. Tails of distinct
    alternatives with the same beginning are distinct, so they go into a Choice as they are
    (hashing the tails to drop duplicates cost more than the factoring saved)."""
    groups: dict[Expr, list[Expr]] = {}  # by first item, in order of first appearance
    for alt in alts:
        groups.setdefault(alt.items[0] if type(alt) is Seq and alt.items else alt,
                          []).append(alt)
    if len(groups) == len(alts):
        return Choice(tuple(alts)) if len(alts) != 1 else alts[0]
    out = []
    for head, group in groups.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        # The whole common beginning at once, not one item a level.
        shared = 1
        if all(type(a) is Seq for a in group):
            rows = [a.items for a in group]  # type: ignore[attr-defined]
            first, shortest = rows[0], min(len(r) for r in rows)
            while shared < shortest and all(r[shared] == first[shared] for r in rows[1:]):
                shared += 1
        else:
            first = (head,)
        tails = [_rest(a, shared) for a in group]
        out.append(seq(*first[:shared], _factored(tails)))
    return out[0] if len(out) == 1 else Choice(tuple(out))


def _rest(alt: Expr, shared: int) -> Expr:
    """What follows the first ``shared`` items of ``alt``."""
    if type(alt) is not Seq:
        return EMPTY
    items = alt.items  # type: ignore[attr-defined]
    left = len(items) - shared
    return EMPTY if left <= 0 else items[shared] if left == 1 else Seq(items[shared:])


def repeat(item: Expr, min: int = 0, max: int | None = None) -> Expr:  # noqa: A002
    """``item{min,max}``; validates the bounds."""
    if min < 0 or (max is not None and max < min):
        raise GrammarError(f"bad repetition bounds {{{min},{'' if max is None else max}}}")
    if max == 0:
        return EMPTY
    if min == 1 and max == 1:
        return item
    return Repeat(item, min, max)


def opt(item: Expr) -> Expr:
    """``item?``"""
    return repeat(item, 0, 1)


def star(item: Expr) -> Expr:
    """``item*``"""
    return repeat(item, 0, None)


def plus(item: Expr) -> Expr:
    """``item+``"""
    return repeat(item, 1, None)


def ref(name: str) -> Ref:
    """A reference to the rule ``name``."""
    return Ref(name)


def chars(ranges: Iterable[tuple[int, int] | tuple[str, str] | str], negated: bool = False) -> CharSet:
    """A character set from ``(lo, hi)`` pairs (code points or characters) or strings of
    single characters."""
    out: list[tuple[int, int]] = []
    for r in ranges:
        if isinstance(r, str):
            out.extend((ord(c), ord(c)) for c in r)
        else:
            lo, hi = (ord(x) if isinstance(x, str) else x for x in r)
            if lo > hi:
                raise GrammarError(f"character range {lo:#x}-{hi:#x} is reversed")
            out.append((lo, hi))
    return CharSet(merge_ranges(out), negated)


def byte_set(ranges: Iterable[tuple[int, int]]) -> ByteSet:
    """A set of single bytes."""
    rs = merge_ranges(ranges)
    for lo, hi in rs:
        if not 0 <= lo <= hi <= 255:
            raise GrammarError(f"byte range {lo}-{hi} is outside 0-255")
    return ByteSet(rs)


# ----------------------------------------------------------------------------- range algebra


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort and merge overlapping or adjacent inclusive ranges."""
    # Called thousands of times a schema compile (character classes, their JSON spellings,
    # UTF-8 splits): one pass with the open range in locals.
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
    keep = complement_ranges(removed, 0, MAX_CODEPOINT)
    out = []
    for a, b in ranges:
        for c, d in keep:
            lo, hi = max(a, c), min(b, d)
            if lo <= hi:
                out.append((lo, hi))
    return merge_ranges(out)


_UTF8_BOUNDS = ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODEPOINT))


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
