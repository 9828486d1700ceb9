"""llama.cpp's GBNF dialect: parse it into the grammar IR and print the IR back as GBNF.

The parser accepts what llama.cpp accepts, with the same meaning, plus one convenience: a rule
may span several lines anywhere (llama.cpp only continues a rule inside parentheses or after a
trailing ``|``); a new rule starts where ``name ::=`` appears. Escapes are exactly llama.cpp's:
``\\n \\t \\r \\\\ \\" \\[ \\] \\xNN \\uNNNN \\UNNNNNNNN`` (``\\x`` names a code point, not a byte).
Groups are inlined as IR choices, so rule names are only those the author wrote.

The printer writes one rule per line in a form llama.cpp's own parser accepts: names are
sanitized to ``[a-zA-Z0-9-]+`` (uniquely, start rule as ``root``), and anything outside
printable text is escaped. GBNF matches whole characters, so byte sets beyond ASCII and literals
that are not valid UTF-8 cannot be printed and raise ``GrammarError``. llama.cpp also rejects
left-recursive grammars; the printer does not rewrite those.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from typing import Final

from formcast.errors import GBNFSyntaxError, GrammarError
from formcast.grammar.ir import (
    MAX_CODEPOINT,
    ByteSet,
    CharSet,
    Expr,
    Grammar,
    chars,
    choice,
    lit,
    merge_ranges,
    ref,
    repeat,
    seq,
)
from formcast.grammar.ir_kinds import BYTE_SET, CHAR_SET, CHOICE, LITERAL, REF, REPEAT, SEQ

__all__ = ["parse_gbnf", "print_gbnf", "gbnf_rule_names"]

_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_SIMPLE_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX_ESCAPES: Final = {"x": 2, "u": 4, "U": 8}
_ANY_CHAR: Final = CHAR_SET(((0, MAX_CODEPOINT),))


# ----------------------------------------------------------------------------- parsing


def parse_gbnf(text: str, start: str = "root") -> Grammar:
    """Parse GBNF ``text`` into a ``Grammar`` whose start rule is ``start``.

    Errors (``GBNFSyntaxError``) give the line and column and show the source line; references
    to undefined rules name the rule and where it is used.
    """
    if not isinstance(text, str):
        raise TypeError(f"GBNF text must be str, not {type(text).__name__}")
    return _Parser(text).parse(start)


class _Parser:
    def __init__(self, text: str) -> None:
        self.src = text
        self.pos = 0
        self._line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
        self.rules: dict[str, Expr] = {}
        self.defined_at: dict[str, int] = {}
        self.first_use: dict[str, int] = {}

    # -- positions and errors

    def where(self, at: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._line_starts, at)
        return line, at - self._line_starts[line - 1] + 1

    def error(self, message: str, at: int | None = None) -> GBNFSyntaxError:
        line, column = self.where(self.pos if at is None else at)
        # GrammarError shows the source line; give it the text with newlines it can split on.
        source = self.src.replace("\r\n", "\n").replace("\r", "\n")
        return GBNFSyntaxError(message, line=line, column=column, source=source)

    def peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.src[i] if i < len(self.src) else ""

    def describe_here(self) -> str:
        c = self.peek()
        return "end of input" if not c else repr(c)

    # -- lexical

    def skip_space(self) -> None:
        """Spaces, newlines and ``#`` comments (which run to the end of the line)."""
        src, n = self.src, len(self.src)
        while self.pos < n:
            c = src[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif c == "#":
                while self.pos < n and src[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                return

    def name(self) -> str:
        start = self.pos
        while self.peek() and self.peek() in _NAME_CHARS:
            self.pos += 1
        return self.src[start:self.pos]

    def at_rule_start(self) -> bool:
        """Whether ``name ::=`` starts here (so the current rule has ended)."""
        saved = self.pos
        try:
            if not self.name():
                return False
            self.skip_space()
            return self.src.startswith("::=", self.pos)
        finally:
            self.pos = saved

    # -- grammar

    def parse(self, start: str) -> Grammar:
        self.skip_space()
        while self.pos < len(self.src):
            self.rule()
            self.skip_space()
        for name, at in self.first_use.items():
            if name not in self.rules:
                raise self.error(f"undefined rule {name!r} is referenced here", at)
        if start not in self.rules:
            raise GBNFSyntaxError(
                f"the grammar has no {start!r} rule, which is where generation starts"
                + (f" (rules defined: {', '.join(sorted(self.rules))})" if self.rules else ""))
        return Grammar(self.rules, start, _refs_checked=True)

    def rule(self) -> None:
        at = self.pos
        name = self.name()
        if not name:
            raise self.error(f"expected a rule name (letters, digits, '-'), found {self.describe_here()}")
        self.skip_space()
        if not self.src.startswith("::=", self.pos):
            raise self.error(f"expected '::=' after rule name {name!r}, found {self.describe_here()}")
        if name in self.rules:
            line, column = self.where(self.defined_at[name])
            raise self.error(f"rule {name!r} is defined twice (first at line {line}, column {column})",
                             at)
        self.pos += 3
        self.defined_at[name] = at
        self.rules[name] = self.alternates(nested=False)
        if self.pos < len(self.src) and not self.at_rule_start():
            raise self.error(f"unexpected {self.describe_here()} in rule {name!r}")

    def alternates(self, nested: bool) -> Expr:
        branches = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence(nested))
        return choice(*branches)

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while True:
            self.skip_space()
            c = self.peek()
            if not c or c in "|)":
                break
            if c in "*+?{":
                if not items:
                    raise self.error(f"{c!r} has nothing before it to repeat")
                items[-1] = self.quantifier(items[-1])
                continue
            if c in _NAME_CHARS and self.at_rule_start():
                if nested:
                    raise self.error("a new rule starts here but a '(' is still open")
                break
            items.append(self.atom())
        return seq(*items)

    def atom(self) -> Expr:
        c = self.peek()
        at = self.pos
        if c == '"':
            return self.string()
        if c == "[":
            return self.char_class()
        if c == ".":
            self.pos += 1
            return _ANY_CHAR
        if c == "(":
            self.pos += 1
            inner = self.alternates(nested=True)
            self.skip_space()
            if self.peek() != ")":
                raise self.error("missing ')' for the group opened here", at)
            self.pos += 1
            return inner
        if c in _NAME_CHARS:
            name = self.name()
            self.first_use.setdefault(name, at)
            return ref(name)
        if c == "'":
            raise self.error("GBNF strings use double quotes, not single quotes")
        raise self.error(f"unexpected {self.describe_here()}")

    def quantifier(self, item: Expr) -> Expr:
        at = self.pos
        c = self.peek()
        self.pos += 1
        if c == "*":
            return repeat(item, 0, None)
        if c == "+":
            return repeat(item, 1, None)
        if c == "?":
            return repeat(item, 0, 1)
        self.skip_space()
        low = self.integer()
        self.skip_space()
        high: int | None = low
        if self.peek() == ",":
            self.pos += 1
            self.skip_space()
            high = self.integer() if self.peek().isdigit() else None
            self.skip_space()
        if self.peek() != "}":
            raise self.error(f"expected '}}' to close the repetition, found {self.describe_here()}")
        self.pos += 1
        if high is not None and high < low:
            raise self.error(f"repetition {{{low},{high}}} has its maximum below its minimum", at)
        return repeat(item, low, high)

    def integer(self) -> int:
        start = self.pos
        while self.peek() and self.peek() in "0123456789":
            self.pos += 1
        if start == self.pos:
            raise self.error(f"expected a number in the repetition, found {self.describe_here()}")
        return int(self.src[start:self.pos])

    def string(self) -> Expr:
        open_at = self.pos
        self.pos += 1
        out: list[str] = []
        while self.peek() != '"':
            if not self.peek():
                raise self.error("unterminated string (missing closing '\"')", open_at)
            out.append(chr(self.char()))
        self.pos += 1
        return lit("".join(out))

    def char_class(self) -> Expr:
        open_at = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if not self.peek():
                raise self.error("unterminated character class (missing ']')", open_at)
            lo_at = self.pos
            lo = self.char()
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = self.char()
                if hi < lo:
                    raise self.error("character range is reversed (its end is before its start)",
                                     lo_at)
            ranges.append((lo, hi))
        self.pos += 1
        if not ranges:
            raise self.error("empty character class", open_at)
        return chars(ranges, negated)

    def char(self) -> int:
        """One character of a string or class, escapes decoded; returns the code point."""
        at = self.pos
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = self.peek(1)
        if e in _SIMPLE_ESCAPES and e:
            self.pos += 2
            return ord(_SIMPLE_ESCAPES[e])
        if e in _HEX_ESCAPES and e:
            digits = _HEX_ESCAPES[e]
            text = self.src[self.pos + 2:self.pos + 2 + digits]
            if len(text) != digits or not all(h in "0123456789abcdefABCDEF" for h in text):
                raise self.error(f"'\\{e}' needs exactly {digits} hex digits", at)
            code = int(text, 16)
            if code > MAX_CODEPOINT:
                raise self.error(f"code point U+{code:X} is beyond U+10FFFF", at)
            self.pos += 2 + digits
            return code
        shown = "end of input" if not e else repr("\\" + e)
        raise self.error(f"unknown escape {shown}; GBNF knows \\n \\t \\r \\\\ \\\" \\[ \\] "
                         "\\xNN \\uNNNN \\UNNNNNNNN", at)


# ----------------------------------------------------------------------------- printing


def print_gbnf(grammar: Grammar) -> str:
    """GBNF text for ``grammar`` that llama.cpp accepts and that parses back to the same
    language. The start rule is printed first, as ``root``."""
    names = gbnf_rule_names(grammar)
    lines = []
    for name in [grammar.start, *(n for n in grammar.rules if n != grammar.start)]:
        try:
            body = _Printer(names, grammar.rules).expr(grammar.rules[name], _TOP)
        except _Unprintable as exc:
            raise GrammarError(f"rule {name!r} cannot be written as GBNF: {exc}") from None
        lines.append(f"{names[name]} ::= {body}")
    return "\n".join(lines) + "\n"


def gbnf_rule_names(grammar: Grammar) -> dict[str, str]:
    """The GBNF name each rule gets: ``[a-zA-Z0-9-]+``, unique, and ``root`` for the start
    rule. Names that are already valid (other than a non-start ``root``) are kept."""
    taken: set[str] = {"root"}
    names = {grammar.start: "root"}
    valid = [n for n in grammar.rules if n != grammar.start and _is_name(n) and n != "root"]
    taken.update(valid)
    names.update({n: n for n in valid})
    for name in grammar.rules:
        if name in names:
            continue
        base = re.sub(r"-+", "-", re.sub(r"[^a-zA-Z0-9-]", "-", name)).strip("-") or "rule"
        candidate, suffix = base, 2
        while candidate in taken:
            candidate, suffix = f"{base}-{suffix}", suffix + 1
        taken.add(candidate)
        names[name] = candidate
    return names


def _is_name(name: str) -> bool:
    return bool(name) and all(c in _NAME_CHARS for c in name)


class _Unprintable(Exception):
    pass


# Precedence of the context an expression is printed in: what needs parentheses there.
_TOP, _SEQ_ITEM, _REPEATED = 0, 1, 2


class _Printer:
    """Writes expressions so that llama.cpp's parser accepts them. Besides escaping, that means
    never writing a syntactically empty alternative where llama.cpp would repeat it: its
    left-recursion check rejects ``("a" | "")*`` and ``""*``, so empty alternatives become
    ``(...)?`` and repetitions of the empty string become ``""``."""

    def __init__(self, names: dict[str, str], rules: Mapping[str, Expr]) -> None:
        self.names = names
        self.rules = rules

    def is_empty(self, e: Expr, follow_refs: bool = False, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``e`` matches only the empty string, by its shape alone."""
        if isinstance(e, LITERAL):
            return not e.data
        if isinstance(e, SEQ):
            return all(self.is_empty(x, follow_refs, seen) for x in e.items)
        if isinstance(e, CHOICE):
            return bool(e.items) and all(self.is_empty(x, follow_refs, seen) for x in e.items)
        if isinstance(e, REPEAT):
            return e.max == 0 or self.is_empty(e.item, follow_refs, seen)
        if isinstance(e, REF) and follow_refs and e.name not in seen:
            return self.is_empty(self.rules[e.name], follow_refs, seen | {e.name})
        return False

    def expr(self, e: Expr, context: int) -> str:
        if isinstance(e, LITERAL):
            return self.literal(e.data)
        if isinstance(e, CHAR_SET):
            return self.charset(e)
        if isinstance(e, BYTE_SET):
            return self.byteset(e)
        if isinstance(e, REF):
            return self.names[e.name]
        if isinstance(e, SEQ):
            items = [x for x in e.items if not self.is_empty(x)]
            if not items:
                return '""'
            if len(items) == 1:
                return self.expr(items[0], context)
            text = " ".join(self.expr(item, _SEQ_ITEM) for item in items)
            return f"({text})" if context >= _REPEATED else text
        if isinstance(e, CHOICE):
            if not e.items:
                return "[^\\x00-\\U0010FFFF]"  # a character class that matches nothing
            rest = [x for x in e.items if not self.is_empty(x)]
            if not rest:
                return '""'
            if len(rest) < len(e.items):  # "x | ''" is written "(x)?"
                return self.expr(REPEAT(CHOICE(tuple(rest)), 0, 1), context)
            if len(rest) == 1:
                return self.expr(rest[0], context)
            text = " | ".join(self.expr(item, _TOP) for item in rest)
            return f"({text})" if context >= _SEQ_ITEM else text
        if isinstance(e, REPEAT):
            if self.is_empty(e.item, follow_refs=True):
                return '""'
            text = self.expr(e.item, _REPEATED) + _quantifier(e.min, e.max)
            return f"({text})" if context >= _REPEATED else text
        raise _Unprintable(f"not an IR expression: {e!r}")

    def literal(self, data: bytes) -> str:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Unprintable(f"literal {data!r} is not valid UTF-8 (GBNF matches whole "
                               "characters)") from exc
        return '"' + "".join(_escape(ord(c), in_class=False) for c in text) + '"'

    def charset(self, cs: CharSet) -> str:
        if cs.codepoint_ranges() == _ANY_CHAR.codepoint_ranges():
            return "."
        ranges = merge_ranges(cs.ranges)
        if not ranges:  # "[^]" or "[]": GBNF has no empty class, so spell the full range
            return "[\\x00-\\U0010FFFF]" if cs.negated else "[^\\x00-\\U0010FFFF]"
        body = "".join(_class_range(lo, hi) for lo, hi in ranges)
        return f"[{'^' if cs.negated else ''}{body}]"

    def byteset(self, bs: ByteSet) -> str:
        ranges = merge_ranges(bs.ranges)
        if any(hi > 0x7F for _, hi in ranges):
            raise _Unprintable(f"byte set {_show_bytes(ranges)} contains bytes >= 0x80, which "
                               "are parts of UTF-8 characters; GBNF can only match whole characters")
        if not ranges:
            return "[^\\x00-\\U0010FFFF]"
        return "[" + "".join(_class_range(lo, hi) for lo, hi in ranges) + "]"


def _quantifier(low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return "*"
    if (low, high) == (1, None):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    if high is None:
        return f"{{{low},}}"
    if high == low:
        return f"{{{low}}}"
    return f"{{{low},{high}}}"


def _class_range(lo: int, hi: int) -> str:
    if lo == hi:
        return _escape(lo, in_class=True)
    if hi == lo + 1:
        return _escape(lo, in_class=True) + _escape(hi, in_class=True)
    return f"{_escape(lo, in_class=True)}-{_escape(hi, in_class=True)}"


_PRINTABLE_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(code: int, *, in_class: bool) -> str:
    c = chr(code)
    if c in _PRINTABLE_ESCAPES:
        return _PRINTABLE_ESCAPES[c]
    if in_class and c in "[]":
        return "\\" + c
    if in_class and c in "^-":  # GBNF has no escape for these; a hex escape is never special
        return f"\\x{code:02X}"
    if 0xD800 <= code <= 0xDFFF or not c.isprintable():
        if code < 0x100:
            return f"\\x{code:02X}"
        if code < 0x10000:
            return f"\\u{code:04X}"
        return f"\\U{code:08X}"
    return c


def _show_bytes(ranges: tuple[tuple[int, int], ...]) -> str:
    return "[" + " ".join(f"{lo:#04x}" if lo == hi else f"{lo:#04x}-{hi:#04x}"
                          for lo, hi in ranges) + "]"
