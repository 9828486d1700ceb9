"""Parse-repair: turn almost-JSON from a model into a value, and say exactly what was changed.

The repair rate is a health signal (a rising rate means layer 1 is slipping), so every change
is recorded as a ``Repair`` with a kind, a JSON pointer where known, and whether it may have
changed what the model meant (``lossy``). A lossy repair is never a silent success: the
pipeline treats it as an error unless the caller's policy accepts it.

Order of work: strict ``json.loads`` first (no repairs); then our own tolerant parser, which
knows the common faults (wrapper prose, code fences, missing closers, trailing commas, single
and full-width quotes and punctuation, Python literals, raw newlines and stray quotes inside
strings, comments, truncation); then ``json_repair`` as a fallback for the long tail, whose
result is checked for invented or dropped content before it is trusted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from formcast.errors import RepairError
from formcast.pipeline.result import json_pointer

# Quote characters that may open a string, and what closes each.
_QUOTE_CLOSERS: dict[str, str] = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}
_FULLWIDTH_PUNCT = {"\uff1a": ":", "\uff0c": ","}  # ： ，
_PYTHON_LITERALS = {"True": True, "False": False, "None": None}
_JSON_LITERALS = {"true": True, "false": False, "null": None}
_WORD = re.compile(r"[^\W\d]\w*")
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][+-]?\d*)?")
_STRICT_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_KEY_AHEAD = re.compile(r'\s*"[^"\n]*"\s*[:\uff1a]')
_MAX_DEPTH = 200
_MAX_START_CANDIDATES = 8


@dataclass(frozen=True)
class Repair:
    """One kind of change made to the text, how often, and where it first happened.

    ``lossy`` means the change may have lost or altered what the model meant (a string cut off
    by the end of the output, a dropped half-written member, an unverified library rescue).
    """

    kind: str
    detail: str
    pointer: str | None = None
    offset: int | None = None
    count: int = 1
    lossy: bool = False

    def __str__(self) -> str:
        where = f" at {self.pointer or '/'}" if self.pointer is not None else ""
        times = f" (x{self.count})" if self.count > 1 else ""
        flag = " [lossy]" if self.lossy else ""
        return f"{self.kind}{where}: {self.detail}{times}{flag}"


@dataclass(frozen=True)
class RepairResult:
    """The parsed value plus the repairs it took; ``repairs == ()`` means it parsed as is."""

    value: Any
    repairs: tuple[Repair, ...] = ()
    ended_early: bool = False
    closed_at_end: tuple[str, ...] = ()  # pointers of containers the output left open

    @property
    def repaired(self) -> bool:
        return bool(self.repairs)

    @property
    def lossy(self) -> bool:
        return any(r.lossy for r in self.repairs)

    @property
    def lossy_repairs(self) -> tuple[Repair, ...]:
        return tuple(r for r in self.repairs if r.lossy)

    @property
    def kinds(self) -> list[str]:
        return [r.kind for r in self.repairs]


def parse_strict(text: str) -> Any:
    """``json.loads`` that also rejects NaN and Infinity (not JSON, whatever Python accepts)."""
    return json.loads(text, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def repair_json(text: str, *, use_json_repair: bool = True) -> RepairResult:
    """Parse ``text`` as JSON, repairing what can be repaired, and report every change.

    Raises ``RepairError`` (with line and column) when nothing trustworthy can be recovered.
    """
    try:
        return RepairResult(parse_strict(text))
    except (ValueError, RecursionError):
        pass

    log = _RepairLog()
    body, offset = _strip_fences(text, log)
    if body is not text:
        try:
            return RepairResult(parse_strict(body), log.repairs())
        except (ValueError, RecursionError):
            pass

    failure: RepairError | None = None
    for start in _value_starts(body):
        attempt_log = log.copy()
        if start > 0 and body[:start].strip():
            snippet = body[:start].strip()
            attempt_log.add("strip_prefix", f"removed text before the JSON: {_clip(snippet)!r}",
                            pointer=None, offset=offset)
        parser = _TolerantParser(body, start, offset, attempt_log)
        try:
            value = parser.parse_document()
        except RepairError as exc:
            failure = failure or exc
            continue
        return RepairResult(value, attempt_log.repairs(), parser.ended_early,
                            tuple(pointer for _, pointer in parser.closers))

    if use_json_repair:
        rescued = _json_repair_fallback(body, offset, log)
        if rescued is not None:
            return rescued
    if failure is not None:
        raise failure
    line, col = _line_col(text, 0)
    raise RepairError("no JSON object or array found in the output", line=line, column=col,
                      source=_clip(text, 200))


# ----------------------------------------------------------------------------- the repair log


class _RepairLog:
    """Collects repairs; repeated non-lossy repairs of one kind merge into one entry with a count."""

    def __init__(self) -> None:
        self._items: list[Repair] = []
        self._index: dict[str, int] = {}

    def copy(self) -> _RepairLog:
        other = _RepairLog()
        other._items = list(self._items)
        other._index = dict(self._index)
        return other

    def add(self, kind: str, detail: str, *, pointer: str | None, offset: int | None,
            lossy: bool = False) -> None:
        if not lossy and kind in self._index:
            i = self._index[kind]
            old = self._items[i]
            self._items[i] = Repair(old.kind, old.detail, old.pointer, old.offset, old.count + 1)
            return
        if not lossy:
            self._index[kind] = len(self._items)
        self._items.append(Repair(kind, detail, pointer, offset, 1, lossy))

    def repairs(self) -> tuple[Repair, ...]:
        return tuple(self._items)


# ----------------------------------------------------------------------------- extraction


def _strip_fences(text: str, log: _RepairLog) -> tuple[str, int]:
    """The content of the first markdown code fence that holds JSON, or the text itself."""
    for match in _FENCE.finditer(text):
        inner = match.group(1)
        if "{" in inner or "[" in inner:
            closed = match.group(0).rstrip().endswith("```") and len(match.group(0)) > 3
            detail = "removed the markdown code fence" + ("" if closed else " (left unclosed)")
            if text[:match.start()].strip() or text[match.end():].strip():
                detail += " and the prose around it"
            log.add("strip_fence", detail, pointer=None, offset=match.start())
            return inner, match.start(1)
    return text, 0


def _value_starts(text: str) -> list[int]:
    """Where a JSON document might begin: each ``{`` or ``[`` (first few), else the first non-space."""
    starts = [m.start() for m in re.finditer(r"[\[{]", text)][:_MAX_START_CANDIDATES]
    if not starts:  # a bare scalar document, if it starts like one
        first = len(text) - len(text.lstrip())
        if re.match(r"""["'\u201c\u2018\d-]|(?:true|false|null|True|False|None)\b""",
                    text[first:]):
            starts = [first]
    return starts


# ----------------------------------------------------------------------------- tolerant parser


class _Truncated(Exception):
    """The text ended before the current value was complete."""


class _TolerantParser:
    """Recursive descent over almost-JSON, building Python values and logging each repair."""

    def __init__(self, text: str, start: int, base_offset: int, log: _RepairLog) -> None:
        self.s = text
        self.i = start
        self.base = base_offset
        self.log = log
        self.path: list[str | int] = []
        self.ended_early = False
        self.closers: list[tuple[str, str]] = []  # (closer, pointer of the container) at the end

    # -- helpers

    def _pointer(self) -> str:
        return json_pointer(self.path)

    def _note(self, kind: str, detail: str, *, lossy: bool = False) -> None:
        self.log.add(kind, detail, pointer=self._pointer(), offset=self.base + self.i, lossy=lossy)

    def _fail(self, reason: str) -> RepairError:
        line, col = _line_col(self.s, self.i)
        return RepairError(reason, line=line, column=col, source=self.s)

    def _at_end(self) -> bool:
        return self.i >= len(self.s)

    def _skip_space(self) -> None:
        """Skip whitespace and comments (logging the comments, which JSON does not allow)."""
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r\n\ufeff\u3000":
                self.i += 1
            elif s.startswith("//", self.i):
                end = s.find("\n", self.i)
                self._note("remove_comment", "removed a // comment")
                self.i = len(s) if end < 0 else end + 1
            elif s.startswith("/*", self.i):
                end = s.find("*/", self.i + 2)
                self._note("remove_comment", "removed a /* */ comment")
                self.i = len(s) if end < 0 else end + 2
            else:
                return

    def _peek_punct(self) -> str | None:
        """The next structural character, with full-width ： and ， read as : and ,."""
        if self._at_end():
            return None
        c = self.s[self.i]
        return _FULLWIDTH_PUNCT.get(c, c)

    def _take_punct(self) -> str:
        c = self.s[self.i]
        if c in _FULLWIDTH_PUNCT:
            self._note("fullwidth_punctuation",
                       f"replaced full-width {c!r} with {_FULLWIDTH_PUNCT[c]!r}")
            c = _FULLWIDTH_PUNCT[c]
        self.i += 1
        return c

    # -- document

    def parse_document(self) -> Any:
        try:
            value = self._value(0)
        except _Truncated:
            raise self._fail("the output ended before any value was complete") from None
        if self.closers:
            closers = "".join(c for c, _ in self.closers)
            self.log.add("close_brackets", f"appended {closers!r} to close what the output left open",
                         pointer=self.closers[0][1], offset=self.base + len(self.s))
        rest_start = self.i
        self._skip_space()
        rest = self.s[self.i:]
        if rest.strip():
            looks_like_json = rest.lstrip()[:1] in "{[,\"'"
            self.log.add("strip_suffix", f"removed text after the JSON: {_clip(rest.strip())!r}",
                         pointer=None, offset=self.base + rest_start, lossy=looks_like_json)
        return value

    def _value(self, depth: int, *, in_array: bool = False) -> Any:
        if depth > _MAX_DEPTH:
            raise self._fail(f"nesting deeper than {_MAX_DEPTH} levels")
        self._skip_space()
        if self._at_end():
            raise _Truncated
        c = self.s[self.i]
        if c == "{":
            return self._object(depth)
        if c == "[":
            return self._array(depth)
        if c in _QUOTE_CLOSERS:
            return self._string(in_key=False, in_array=in_array)
        if c == "-" or c.isdigit():
            return self._number()
        match = _WORD.match(self.s, self.i)
        if match:
            return self._literal(match.group(0))
        raise self._fail(f"unexpected character {c!r} where a value should start")

    def _literal(self, word: str) -> Any:
        end = self.i + len(word)
        if word in _JSON_LITERALS:
            self.i = end
            return _JSON_LITERALS[word]
        if word in _PYTHON_LITERALS:
            self._note("python_literal",
                       f"replaced Python {word} with {json.dumps(_PYTHON_LITERALS[word])}")
            self.i = end
            return _PYTHON_LITERALS[word]
        if end >= len(self.s) and any(lit.startswith(word) for lit in (*_JSON_LITERALS,
                                                                          *_PYTHON_LITERALS)):
            raise _Truncated
        raise self._fail(f"unquoted word {word!r} is not a JSON value")

    def _number(self) -> Any:
        match = _NUMBER.match(self.s, self.i)
        if match is None:  # a lone '-'
            if self.i + 1 >= len(self.s):
                raise _Truncated
            raise self._fail("'-' is not followed by a number")
        token = match.group(0)
        if not _STRICT_NUMBER.match(token):
            if match.end() >= len(self.s):
                raise _Truncated
            raise self._fail(f"malformed number {token!r}")
        self.i = match.end()
        if self.i >= len(self.s):
            self.ended_early = True
            self._note("number_at_end", f"the output ended right after {token}; the number may "
                       "be cut short", lossy=True)
        return json.loads(token)

    # -- strings

    def _string(self, *, in_key: bool, in_array: bool = False) -> str:
        s = self.s
        opener = s[self.i]
        closer = _QUOTE_CLOSERS[opener]
        if opener == "'":
            self._note("single_quotes", "replaced single quotes with double quotes")
        elif opener != '"':
            self._note("fullwidth_quotes",
                       f"replaced full-width quotes {opener}{closer} with double quotes")
        self.i += 1
        out: list[str] = []
        while True:
            if self.i >= len(s):
                if in_key:
                    raise _Truncated
                self.ended_early = True
                self._note("close_string", "the output ended inside this string; closed it",
                           lossy=True)
                return "".join(out)
            c = s[self.i]
            if c == "\\":
                self._escape(out, opener)
                continue
            if c == closer:
                if self._quote_ends_string(self.i + 1, in_key, in_array):
                    self.i += 1
                    return "".join(out)
                self._note("escape_inner_quote", f"escaped a stray {c} inside a string")
                out.append(c)
                self.i += 1
                continue
            if c < " ":
                self._note("escape_control_char",
                           f"escaped a raw control character {c!r} inside a string")
                out.append(c)
                self.i += 1
                continue
            out.append(c)
            self.i += 1

    def _quote_ends_string(self, after: int, in_key: bool, in_array: bool = False) -> bool:
        """Decide whether a closing quote really ends the string, from what follows it."""
        s = self.s
        j = after
        while j < len(s) and s[j] in " \t\r\n\u3000":
            j += 1
        if j >= len(s):
            return True
        nxt = s[j]
        if in_key:
            return not (nxt.isalnum() or nxt == "_")
        if nxt in ":\uff1a,}]\uff0c" or s.startswith(("//", "/*"), j):
            return True
        # The comma is missing: `"a": "x" "b": 1` between members, `["x" "y"]` between items.
        return _KEY_AHEAD.match(s, j) is not None or (in_array and nxt in _QUOTE_CLOSERS)

    def _escape(self, out: list[str], opener: str) -> None:
        s = self.s
        if self.i + 1 >= len(s):
            self.i += 1
            return  # a lone backslash at the very end: the close_string repair reports it
        nxt = s[self.i + 1]
        if nxt in '"\\/bfnrt':
            out.append(json.loads(f'"\\{nxt}"'))
            self.i += 2
        elif nxt == "u" and re.match(r"[0-9a-fA-F]{4}", s[self.i + 2:self.i + 6]):
            code = int(s[self.i + 2:self.i + 6], 16)
            self.i += 6
            if 0xD800 <= code <= 0xDBFF and re.match(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}",
                                                     s[self.i:self.i + 6]):
                low = int(s[self.i + 2:self.i + 6], 16)
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                self.i += 6
            out.append(chr(code))
        elif nxt == _QUOTE_CLOSERS[opener] or nxt == opener:
            out.append(nxt)
            self.i += 2
        elif nxt == "'":
            self._note("invalid_escape", "replaced the non-JSON escape \\' with a plain quote")
            out.append("'")
            self.i += 2
        else:
            self._note("escape_backslash", f"escaped a backslash before {nxt!r}")
            out.append("\\")
            self.i += 1

    # -- containers

    def _object(self, depth: int) -> dict[str, Any]:
        self.i += 1  # '{'
        result: dict[str, Any] = {}
        expect_member = True
        while True:
            self._skip_space()
            c = self._peek_punct()
            if c is None:
                self._close_at_end("}")
                return result
            if c == "}":
                self.i += 1
                return result
            if c == ",":
                self._take_punct()
                if not expect_member:
                    expect_member = True
                    self._skip_space()
                    if self._peek_punct() == "}":
                        self._note("trailing_comma", "removed a trailing comma")
                else:
                    self._note("extra_comma", "removed a comma with no member before it")
                continue
            if c == "]":
                raise self._fail("']' closes an object")
            if not expect_member:
                self._note("missing_comma", "inserted a missing comma between members")
            member_start = self.i
            try:
                key = self._key()
            except _Truncated:
                self._drop_incomplete(member_start, "a half-written key")
                self._close_at_end("}")
                return result
            self.path.append(key)
            try:
                self._skip_space()
                if self._peek_punct() is None:
                    raise _Truncated
                if self._peek_punct() != ":":
                    raise self._fail(f"expected ':' after the key {key!r}")
                self._take_punct()
                result[key] = self._value(depth + 1)
            except _Truncated:
                self._drop_incomplete(member_start, f"the member {key!r} without a value")
                self.path.pop()
                self._close_at_end("}")
                return result
            self.path.pop()
            expect_member = False

    def _key(self) -> str:
        if self.s[self.i] in _QUOTE_CLOSERS:
            return self._string(in_key=True)
        match = _WORD.match(self.s, self.i)
        if match is None:
            raise self._fail(f"unexpected character {self.s[self.i]!r} where a key should start")
        word = match.group(0)
        self.i = match.end()
        if self.i >= len(self.s):
            raise _Truncated
        self._note("quote_key", f"quoted the bare key {word!r}")
        return word

    def _array(self, depth: int) -> list[Any]:
        self.i += 1  # '['
        result: list[Any] = []
        expect_item = True
        while True:
            self._skip_space()
            c = self._peek_punct()
            if c is None:
                self._close_at_end("]")
                return result
            if c == "]":
                self.i += 1
                return result
            if c == ",":
                self._take_punct()
                if not expect_item:
                    expect_item = True
                    self._skip_space()
                    if self._peek_punct() == "]":
                        self._note("trailing_comma", "removed a trailing comma")
                else:
                    self._note("extra_comma", "removed a comma with no item before it")
                continue
            if c == "}":
                raise self._fail("'}' closes an array")
            if not expect_item:
                self._note("missing_comma", "inserted a missing comma between items")
            item_start = self.i
            self.path.append(len(result))
            try:
                result.append(self._value(depth + 1, in_array=True))
            except _Truncated:
                self._drop_incomplete(item_start, "a half-written item")
                self.path.pop()
                self._close_at_end("]")
                return result
            self.path.pop()
            expect_item = False

    def _drop_incomplete(self, start: int, what: str) -> None:
        self.ended_early = True
        self.i = start
        self._note("drop_incomplete",
                   f"the output ended inside {what}: {_clip(self.s[start:])!r}; dropped it",
                   lossy=True)
        self.i = len(self.s)

    def _close_at_end(self, closer: str) -> None:
        self.ended_early = True
        self.closers.append((closer, self._pointer()))


# ----------------------------------------------------------------------------- fallback


def _json_repair_fallback(body: str, offset: int, log: _RepairLog) -> RepairResult | None:
    """Ask ``json_repair`` for the long tail, and only trust what it did not invent or drop."""
    try:
        import json_repair
    except ImportError:  # optional dependency (the "repair" extra)
        return None
    try:
        value = json_repair.repair_json(body, return_objects=True, ensure_ascii=False)
    except Exception:  # noqa: BLE001 - a third-party failure means "could not rescue"
        return None
    if value == "" or value is None or (isinstance(value, str) and not body.strip().startswith(
            ('"', "'"))):
        return None  # json_repair's "nothing found" answer, or a bare string it made up
    invented, dropped = faithfulness_gaps(body, value)
    for pointer, leaf in invented:
        log.add("json_repair_invented", f"json_repair produced {json.dumps(leaf, ensure_ascii=False)}"
                ", which is not in the output", pointer=pointer, offset=offset, lossy=True)
    if dropped:
        log.add("json_repair", "json_repair rescued the text but left out: "
                + ", ".join(repr(w) for w in dropped[:5]), pointer="", offset=offset, lossy=True)
    else:
        log.add("json_repair", "json_repair rescued the text"
                + ("" if invented else "; every value in the result appears in the output"),
                pointer="", offset=offset)
    return RepairResult(value, log.repairs())


_CONTENT_WORD = re.compile(r"\w+")
_LITERAL_WORDS = {"true", "false", "null", "True", "False", "None"}


def faithfulness_gaps(source: str, value: Any) -> tuple[list[tuple[str, Any]], list[str]]:
    """Leaves of ``value`` that do not appear in ``source`` (invented, with their pointers), and
    words of ``source`` that no key or value of ``value`` accounts for (dropped)."""
    leaves: list[tuple[str, Any]] = []
    _collect_leaves(value, [], leaves)
    invented: list[tuple[str, Any]] = []
    for pointer, leaf in leaves:
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, str):
            if not _string_in(source, leaf):
                invented.append((pointer, leaf))
        elif isinstance(leaf, int | float) and not _number_in(source, leaf):
            invented.append((pointer, leaf))
    covered = " ".join(leaf if isinstance(leaf, str) else json.dumps(leaf, ensure_ascii=False)
                       for _, leaf in leaves)
    dropped = [w for w in _CONTENT_WORD.findall(source)
               if w not in _LITERAL_WORDS and w not in covered]
    return invented, dropped


def _collect_leaves(value: Any, path: list[str | int], out: list[tuple[str, Any]]) -> None:
    """Keys and scalar values of ``value``, each with its JSON pointer."""
    if isinstance(value, dict):
        for k, v in value.items():
            path.append(k)
            out.append((json_pointer(path), k))
            _collect_leaves(v, path, out)
            path.pop()
    elif isinstance(value, list):
        for i, v in enumerate(value):
            path.append(i)
            _collect_leaves(v, path, out)
            path.pop()
    else:
        out.append((json_pointer(path), value))


def _string_in(source: str, text: str) -> bool:
    if text == "":
        return re.search(r"""(""|'')""", source) is not None
    return text in source or json.dumps(text, ensure_ascii=False)[1:-1] in source


def _number_in(source: str, number: float) -> bool:
    for form in {repr(number), str(number), json.dumps(number)}:
        if form in source:
            return True
    return isinstance(number, float) and number.is_integer() and str(int(number)) in source


# ----------------------------------------------------------------------------- utilities


def _line_col(text: str, index: int) -> tuple[int, int]:
    index = max(0, min(index, len(text)))
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, col


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
