"""Regular expressions (the ECMA-262 subset JSON Schema uses) -> grammar IR.

The IR has no assertions, so everything a finite automaton over characters can express is
supported and the rest is refused with ``UnsupportedRegexError`` naming the column: lookarounds,
backreferences, word boundaries, Unicode property escapes and inline flags.

Character semantics follow ECMA-262 (what JSON Schema specifies), not Python's ``re``:

* ``\\d`` is ``[0-9]`` and ``\\w`` is ``[A-Za-z0-9_]`` (ASCII only, as in JavaScript).
* ``\\s`` is ECMA whitespace: ``[\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f
  \\u205f\\u3000\\ufeff]``.
* ``.`` is any character except the line terminators ``\\n \\r \\u2028 \\u2029``.
* ``^`` only matches at the start of the input and ``$`` only at its end (no multiline mode).
* ``[]`` matches nothing and ``[^]`` matches any character; ``{`` that does not start a valid
  quantifier is a literal (Annex B), so ``a{,3}`` is the three characters ``{,3}`` after ``a``.
* Lazy quantifiers (``*?``) match the same strings as greedy ones: only the language matters.

Escapes of surrogate pairs (``\\uD83D\\uDE00``) are combined into one code point, as JSON
Schema patterns written inside JSON often spell astral characters that way.
"""

from __future__ import annotations

from typing import Final

from formcast.errors import RegexSyntaxError, UnsupportedRegexError
from formcast.grammar.ir import (
    MAX_CODEPOINT,
    Expr,
    chars,
    choice,
    complement_ranges,
    is_nothing,
    lit,
    merge_ranges,
    repeat,
    seq,
    star,
)
from formcast.grammar.ir_kinds import (
    BYTE_SET,
    CHAR_SET,
    CHOICE,
    EMPTY,
    LITERAL,
    NOTHING,
    REPEAT,
    SEQ,
)

__all__ = ["regex_to_expr", "nullable", "DIGIT", "WORD", "SPACE", "DOT", "ANY_CHAR"]

Ranges = tuple[tuple[int, int], ...]

DIGIT: Final[Ranges] = ((0x30, 0x39),)
WORD: Final[Ranges] = merge_ranges([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
SPACE: Final[Ranges] = merge_ranges([
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
])
LINE_TERMINATORS: Final[Ranges] = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
DOT: Final = CHAR_SET(LINE_TERMINATORS, negated=True)
ANY_CHAR: Final = CHAR_SET(((0, MAX_CODEPOINT),))

_CLASS_ESCAPES: Final[dict[str, tuple[Ranges, bool]]] = {
    "d": (DIGIT, False), "D": (DIGIT, True),
    "w": (WORD, False), "W": (WORD, True),
    "s": (SPACE, False), "S": (SPACE, True),
}
_CONTROL_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_SYNTAX_CHARS: Final = set("^$\\.*+?()[]{}|/-")


def regex_to_expr(pattern: str, *, search: bool = False) -> Expr:
    """The IR for ``pattern``.

    With ``search=False`` (the default) the expression matches exactly the strings the whole
    pattern matches, as ``re.fullmatch`` would. With ``search=True`` it matches the strings that
    *contain* a match, which is what JSON Schema's ``pattern`` keyword means: each side that is
    not anchored by ``^`` / ``$`` is padded with any characters (newlines included).
    """
    if not isinstance(pattern, str):
        raise TypeError(f"regex pattern must be str, not {type(pattern).__name__}")
    variants = _Parser(pattern).parse()
    if not search:
        return choice(*variants.values()) if variants else NOTHING
    pad = star(ANY_CHAR)
    parts = []
    for (at_start, at_end), expr in variants.items():
        parts.append(seq(EMPTY if at_start else pad, expr, EMPTY if at_end else pad))
    return choice(*parts) if parts else NOTHING


def nullable(expr: Expr) -> bool:
    """Whether ``expr`` (without rule references) matches the empty string."""
    if isinstance(expr, LITERAL):
        return not expr.data
    if isinstance(expr, BYTE_SET | CHAR_SET):
        return False
    if isinstance(expr, SEQ):
        return all(nullable(e) for e in expr.items)
    if isinstance(expr, CHOICE):
        return any(nullable(e) for e in expr.items)
    if isinstance(expr, REPEAT):
        return expr.min == 0 or nullable(expr.item)
    raise TypeError(f"nullable() does not follow rule references: {expr!r}")


# A parsed fragment is kept split by which anchors it used: the key (used_start, used_end) says
# whether the strings rely on sitting at the very start / end of the input. An anchor inside a
# fragment is only legal where everything before (after) it matched nothing, and the splitting
# lets sequences check that while keeping the IR free of assertions.
Variants = dict[tuple[bool, bool], Expr]
_PLAIN_KEY: Final = (False, False)  # the key of strings that rely on no anchor
_QUANTIFIER_BOUNDS: Final[dict[str, tuple[int, int | None]]] = {"*": (0, None), "+": (1, None),
                                                        "?": (0, 1)}


def _plain(expr: Expr) -> Variants:
    return {} if is_nothing(expr) else {(False, False): expr}


def _add(out: Variants, key: tuple[bool, bool], expr: Expr) -> None:
    if is_nothing(expr):
        return
    out[key] = choice(out[key], expr) if key in out else expr


def _concat(left: Variants, right: Variants) -> Variants:
    out: Variants = {}
    for (ls, le), lx in left.items():
        for (rs, re_), rx in right.items():
            key = (ls or rs, le or re_)
            if le and rs:  # "$" then "^": both sides must be empty
                if nullable(lx) and nullable(rx):
                    _add(out, key, EMPTY)
            elif rs:  # "^" on the right: the left part must have matched nothing
                if nullable(lx):
                    _add(out, key, rx)
            elif le:  # "$" on the left: the right part must match nothing
                if nullable(rx):
                    _add(out, key, lx)
            else:
                _add(out, key, seq(lx, rx))
    return out


def _alternate(branches: list[Variants]) -> Variants:
    out: Variants = {}
    for branch in branches:
        for key, expr in branch.items():
            _add(out, key, expr)
    return out


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.pos = 0

    # -- errors

    def _error(self, message: str, at: int | None = None) -> RegexSyntaxError:
        return RegexSyntaxError(message, line=1, column=(self.pos if at is None else at) + 1,
                                source=self.src)

    def _unsupported(self, message: str, at: int) -> UnsupportedRegexError:
        return UnsupportedRegexError(message, line=1, column=at + 1, source=self.src)

    # -- helpers

    def _peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.src[i] if i < len(self.src) else ""

    def _startswith(self, text: str) -> bool:
        return self.src.startswith(text, self.pos)

    # -- grammar: alternation -> branch ('|' branch)*

    def parse(self) -> Variants:
        result = self._alternation()
        if self.pos < len(self.src):  # only a stray ')' can stop the top level early
            raise self._error("unbalanced ')'")
        return result

    def _alternation(self) -> Variants:
        branches = [self._branch()]
        while self._peek() == "|":
            self.pos += 1
            branches.append(self._branch())
        return _alternate(branches)

    def _branch(self) -> Variants:
        terms: list[Variants] = []
        while self.pos < len(self.src) and self._peek() not in "|)":
            terms.append(self._term())
        # Runs of anchor-free terms become one flat sequence (linear time); only the few terms
        # that carry anchors go through the pairwise variant product.
        result: Variants = _plain(EMPTY)
        run: list[Expr] = []
        for term in terms:
            if not term:
                return {}
            if len(term) == 1 and _PLAIN_KEY in term:
                run.append(term[(False, False)])
                continue
            result = _concat(result, _plain(seq(*run)))
            run = []
            result = _concat(result, term)
        return _concat(result, _plain(seq(*run))) if run else result

    def _term(self) -> Variants:
        start = self.pos
        c = self._peek()
        if c in "^$":
            self.pos += 1
            if self._quantifier_ahead():
                raise self._error(f"nothing to repeat: anchor {c!r} cannot be quantified")
            return {(c == "^", c == "$"): EMPTY}
        if c in "*+?":
            raise self._error(f"nothing to repeat before {c!r}")
        if c == "{" and self._quantifier_ahead():
            raise self._error("nothing to repeat before '{'")
        atom = self._atom()
        while True:
            bounds = self._quantifier()
            if bounds is None:
                return atom
            low, high = bounds
            if self._peek() == "?":  # lazy: same language
                self.pos += 1
            if self._peek() and self._peek() in "*+?" or (self._peek() == "{"
                                                        and self._quantifier_ahead()):
                raise self._error("nothing to repeat: a quantifier cannot follow a quantifier")
            atom = self._repeat(atom, low, high, start)

    def _repeat(self, atom: Variants, low: int, high: int | None, at: int) -> Variants:
        if len(atom) > 1 or (len(atom) == 1 and _PLAIN_KEY not in atom):
            if (low, high) == (0, 1):
                return _alternate([_plain(EMPTY), atom])
            raise self._unsupported("an anchor ('^' or '$') inside a repeated group", at)
        if not atom:
            return _plain(EMPTY) if low == 0 else {}
        return _plain(repeat(atom[(False, False)], low, high))

    # -- quantifiers

    def _quantifier_ahead(self) -> bool:
        saved = self.pos
        try:
            return self._quantifier() is not None
        finally:
            self.pos = saved

    def _quantifier(self) -> tuple[int, int | None] | None:
        c = self._peek()
        if c in ("*", "+", "?") and c:
            self.pos += 1
            return _QUANTIFIER_BOUNDS[c]
        if c != "{":
            return None
        start = self.pos
        end = self.src.find("}", start)
        if end < 0:
            return None
        body = self.src[start + 1:end]
        low_text, comma, high_text = body.partition(",")
        if not low_text.isdigit() or not low_text.isascii():
            return None  # Annex B: not a quantifier, so a literal '{'
        if high_text and not (high_text.isdigit() and high_text.isascii()):
            return None
        low = int(low_text)
        high = int(high_text) if high_text else (None if comma else low)
        if high is not None and high < low:
            raise self._error(f"numbers out of order in {{{body}}} quantifier", start)
        self.pos = end + 1
        return low, high

    # -- atoms

    def _atom(self) -> Variants:
        c = self._peek()
        start = self.pos
        if c == "(":
            return self._group()
        if c == "[":
            return _plain(self._class())
        if c == ".":
            self.pos += 1
            return _plain(DOT)
        if c == "\\":
            return _plain(self._atom_escape())
        self.pos += 1
        if 0xD800 <= ord(c) <= 0xDFFF:
            raise self._unsupported(f"lone surrogate U+{ord(c):04X} cannot be matched in UTF-8",
                                    start)
        return _plain(lit(c))

    def _group(self) -> Variants:
        open_at = self.pos
        self.pos += 1
        if self._peek() == "?":
            for prefix, what in (("?=", "lookahead"), ("?!", "negative lookahead"),
                                 ("?<=", "lookbehind"), ("?<!", "negative lookbehind")):
                if self._startswith(prefix):
                    raise self._unsupported(f"{what} '({prefix}...)' is not supported", open_at)
            if self._startswith("?:"):
                self.pos += 2
            elif self._startswith("?<") or self._startswith("?P<"):
                self.pos += 3 if self._startswith("?P<") else 2
                close = self.src.find(">", self.pos)
                name = self.src[self.pos:close] if close >= 0 else ""
                if close < 0 or not name or not (name[0].isalpha() or name[0] in "_$") or not all(
                        ch.isalnum() or ch in "_$" for ch in name):
                    raise self._error("bad group name", self.pos)
                self.pos = close + 1
            else:
                raise self._unsupported("inline flags and other '(?...)' groups are not supported",
                                        open_at)
        inner = self._alternation()
        if self._peek() != ")":
            raise self._error("missing ')' for the group opened here", open_at)
        self.pos += 1
        return inner

    def _atom_escape(self) -> Expr:
        start = self.pos
        self.pos += 1  # the backslash
        c = self._peek()
        if not c:
            raise self._error("pattern ends with a lone backslash", start)
        if c in _CLASS_ESCAPES:
            self.pos += 1
            ranges, negated = _CLASS_ESCAPES[c]
            return CHAR_SET(ranges, negated)
        if c in "bB":
            raise self._unsupported(f"word-boundary assertion '\\{c}' is not supported", start)
        if c in "123456789" or self._startswith("k<"):
            raise self._unsupported("backreferences are not supported", start)
        if c in "pP":
            raise self._unsupported(f"Unicode property escapes '\\{c}{{...}}' are not supported",
                                    start)
        code = self._char_escape(start)
        if 0xD800 <= code <= 0xDFFF:
            return self._surrogate_pair_class(code, start)
        return lit(chr(code))

    def _surrogate_pair_class(self, high: int, start: int) -> Expr:
        r"""``\uD83D[\uDE00-\uDE4F]``: a UTF-16 spelling of an astral range, as JavaScript
        reads it. Any other lone surrogate cannot occur in UTF-8 text."""
        class_at = self.pos
        if 0xD800 <= high <= 0xDBFF and self._peek() == "[":
            ranges, negated = self._class_ranges()
            base = 0x10000 + ((high - 0xD800) << 10) - 0xDC00
            if (not negated and ranges and ranges[0][0] >= 0xDC00 and ranges[-1][1] <= 0xDFFF
                    and not self._quantifier_ahead()):
                return chars([(lo + base, hi + base) for lo, hi in ranges])
            self.pos = class_at
        raise self._unsupported(f"lone surrogate U+{high:04X} cannot be matched in UTF-8", start)

    def _char_escape(self, start: int, *, in_class: bool = False) -> int:
        """A single-character escape after the backslash; returns its code point."""
        c = self._peek()
        self.pos += 1
        if c in _CONTROL_ESCAPES:
            return ord(_CONTROL_ESCAPES[c])
        if c == "0" and not self._peek().isdigit():
            return 0
        if c == "b" and in_class:
            return 0x08
        if c == "c" and self._peek().isascii() and self._peek().isalpha():
            self.pos += 1
            return ord(self.src[self.pos - 1]) % 32
        if c == "x":
            return self._hex(2, start)
        if c == "u":
            return self._unicode_escape(start)
        if c.isdigit():
            raise self._unsupported("octal escapes are not supported", start)
        if not (c.isascii() and c.isalnum()):
            return ord(c)  # identity escape of punctuation, space, '_' or any non-ASCII char
        raise self._error(f"unknown escape '\\{c}'", start)

    def _hex(self, digits: int, start: int) -> int:
        text = self.src[self.pos:self.pos + digits]
        if len(text) != digits or not all(ch in "0123456789abcdefABCDEF" for ch in text):
            raise self._error(f"expected {digits} hex digits after '\\{self.src[start + 1]}'",
                              start)
        self.pos += digits
        return int(text, 16)

    def _unicode_escape(self, start: int) -> int:
        if self._peek() == "{":
            close = self.src.find("}", self.pos)
            text = self.src[self.pos + 1:close] if close > 0 else ""
            if not text or len(text) > 6 or not all(ch in "0123456789abcdefABCDEF" for ch in text):
                raise self._error("expected 1-6 hex digits in '\\u{...}'", start)
            code = int(text, 16)
            if code > MAX_CODEPOINT:
                raise self._error(f"code point {text} is beyond U+10FFFF", start)
            self.pos = close + 1
            return code
        code = self._hex(4, start)
        if 0xD800 <= code <= 0xDBFF and self._startswith("\\u"):
            saved = self.pos
            self.pos += 2
            try:
                low = self._hex(4, saved)
            except RegexSyntaxError:
                self.pos = saved
                return code
            if 0xDC00 <= low <= 0xDFFF:
                return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            self.pos = saved
        return code

    # -- character classes

    def _class(self) -> Expr:
        merged, negated = self._class_ranges()
        if not negated and len(merged) == 1 and merged[0][0] == merged[0][1]:
            code = merged[0][0]
            if not 0xD800 <= code <= 0xDFFF:
                return lit(chr(code))
        cs = CHAR_SET(merged, negated)  # merged and checked already: not through chars()
        return cs if cs.codepoint_ranges() else NOTHING

    def _class_ranges(self) -> tuple[Ranges, bool]:
        open_at = self.pos
        self.pos += 1
        negated = self._peek() == "^"
        if negated:
            self.pos += 1
        items: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(self.src):
                raise self._error("missing ']' for the character class opened here", open_at)
            if self._peek() == "]":
                self.pos += 1
                break
            lo = self._class_atom()
            if self._peek() == "-" and self._peek(1) not in ("]", ""):
                dash_at = self.pos
                self.pos += 1
                hi = self._class_atom()
                if isinstance(lo, int) and isinstance(hi, int):
                    if hi < lo:
                        raise self._error("range out of order in character class", dash_at)
                    items.append((lo, hi))
                    continue
                # Annex B: a class escape at either end makes '-' a literal: '[\d-z]'.
                _extend(items, hi)
                items.append((ord("-"), ord("-")))
            _extend(items, lo)
        return merge_ranges(items), negated

    def _class_atom(self) -> int | Ranges:
        start = self.pos
        c = self._peek()
        if c != "\\":
            self.pos += 1
            return ord(c)
        self.pos += 1
        e = self._peek()
        if not e:
            raise self._error("pattern ends with a lone backslash", start)
        if e in _CLASS_ESCAPES:
            self.pos += 1
            ranges, negated = _CLASS_ESCAPES[e]
            return complement_ranges(ranges, 0, MAX_CODEPOINT) if negated else ranges
        if e == "B":
            raise self._error("'\\B' is not valid inside a character class", start)
        if e in "pP":
            raise self._unsupported(f"Unicode property escapes '\\{e}{{...}}' are not supported",
                                    start)
        if e in "123456789":
            raise self._unsupported("octal escapes are not supported", start)
        return self._char_escape(start, in_class=True)


def _extend(items: list[tuple[int, int]], part: int | Ranges) -> None:
    if isinstance(part, int):
        items.append((part, part))
    else:
        items.extend(part)
