"""One exception hierarchy for formcast.

Every error says what was wrong and where: a line and column for grammar text, a JSON pointer
for schemas and values, a token id for vocabulary problems. Callers catch ``FormcastError`` to
handle them all, or a subclass to handle one kind.
"""

from __future__ import annotations


class FormcastError(Exception):
    """Base class of every error formcast raises on purpose."""


class GrammarError(FormcastError, ValueError):
    """A grammar (GBNF, regex or IR) is malformed.

    ``line`` and ``column`` are 1-based positions in the source text when there is one.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None,
                 source: str | None = None) -> None:
        self.reason = message
        self.line = line
        self.column = column
        self.source = source
        where = ""
        if line is not None and column is not None:
            where = f" at line {line}, column {column}"
        detail = f"{message}{where}"
        if source is not None and line is not None and column is not None:
            lines = source.splitlines() or [""]
            if 1 <= line <= len(lines):
                text = lines[line - 1]
                detail += f"\n  {text}\n  {' ' * (column - 1)}^"
        super().__init__(detail)


class GBNFSyntaxError(GrammarError):
    """GBNF text that does not parse, or names an undefined rule."""


class RegexSyntaxError(GrammarError):
    """A regular expression that does not parse."""


class UnsupportedRegexError(GrammarError):
    """A regex feature no finite automaton can express (lookaround, backreference...)."""


class LeftRecursionError(GrammarError):
    """A rule can reach itself without consuming input; a top-down matcher would loop."""


class AmbiguousGrammarError(GrammarError):
    """The grammar is so ambiguous that the set of pending parses explodes (each byte
    multiplies the ways a recursion can be split); refused at a bound instead of exhausting
    memory. ``stacks`` is the size the parse reached, ``limit`` the bound."""

    def __init__(self, stacks: int, limit: int, rules: list[str]) -> None:
        self.stacks = stacks
        self.limit = limit
        self.rules = rules
        named = ", ".join(repr(r) for r in rules[:4]) or "(root)"
        super().__init__(
            f"the grammar is too ambiguous to match: {stacks} pending parses (limit {limit}) "
            f"inside rule(s) {named}; make the recursion unambiguous, e.g. replace "
            "'x ::= \"a\" | \"a\" x{2,4}' by a repetition such as 'x ::= \"a\"+'"
        )


class SchemaError(FormcastError, ValueError):
    """A JSON Schema that is itself malformed. ``pointer`` locates the bad part."""

    def __init__(self, message: str, *, pointer: str = "") -> None:
        self.reason = message
        self.pointer = pointer
        super().__init__(f"{pointer or '/'}: {message}")


class UnsupportedSchemaError(SchemaError):
    """Raised in strict mode when some keywords cannot be enforced by the grammar.

    ``items`` lists every ``(pointer, keyword, reason)`` at once, so a caller can fix them all.
    """

    def __init__(self, items: list[tuple[str, str, str]]) -> None:
        self.items = list(items)
        lines = [f"  {ptr or '/'}: {kw}: {why}" for ptr, kw, why in self.items]
        message = (
            f"{len(self.items)} schema keyword(s) cannot be enforced by the grammar "
            "(pass strict=False to compile the rest and let the validator check these):\n"
            + "\n".join(lines)
        )
        FormcastError.__init__(self, message)
        self.reason = message
        self.pointer = self.items[0][0] if self.items else ""


class VocabularyError(FormcastError, ValueError):
    """A tokenizer or GGUF file whose vocabulary cannot be read."""


class MatcherError(FormcastError):
    """Misuse of a Matcher, such as rolling back more tokens than were accepted."""


class ModelNotFoundError(FormcastError, FileNotFoundError):
    """The requested model file or package is not installed."""


class GenerationError(FormcastError):
    """A model runtime failed while generating."""


class BudgetExhaustedError(FormcastError):
    """A retry policy ran out of attempts, tokens or time before a valid result.

    ``budget`` names which budget ran out ("attempts", "tokens" or "latency").
    """

    def __init__(self, message: str, *, budget: str, attempts: int, tokens: int,
                 errors: list | None = None, last_output: str | None = None) -> None:
        self.budget = budget
        self.attempts = attempts
        self.tokens = tokens
        self.errors = list(errors or [])
        self.last_output = last_output
        super().__init__(message)


class RepairError(FormcastError, ValueError):
    """Model output that parse-repair cannot turn into JSON without guessing.

    ``line`` and ``column`` (1-based) locate where the repair gave up in the output text.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None,
                 source: str | None = None) -> None:
        self.reason = message
        self.line = line
        self.column = column
        self.source = source
        where = f" at line {line}, column {column}" if line is not None and column is not None else ""
        super().__init__(f"cannot repair the output: {message}{where}")


class PolicyError(FormcastError, ValueError):
    """A retry policy whose settings contradict each other or cannot be met at all."""


class RuleError(FormcastError):
    """A semantic rule that could not be evaluated (its callback raised), as opposed to a
    rule the value broke. ``rule`` names the rule and ``pointer`` where it looked."""

    def __init__(self, message: str, *, rule: str, pointer: str = "") -> None:
        self.rule = rule
        self.pointer = pointer
        super().__init__(f"rule {rule} at {pointer or '/'}: {message}")


class SchemaSyntaxError(SchemaError):
    """Schema text that is not valid JSON. ``source`` names the file (or ``<schema>``);
    ``line`` and ``column`` are 1-based."""

    def __init__(self, message: str, *, source: str, line: int, column: int) -> None:
        self.reason = message
        self.pointer = ""
        self.source = source
        self.line = line
        self.column = column
        FormcastError.__init__(self, f"{source} is not valid JSON: {message} at line {line}, "
                                     f"column {column}")
