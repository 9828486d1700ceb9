"""The vocabulary of layers 2 and 3: JSON pointers, violations, attempts and the final result.

Every problem the pipeline finds is a ``Violation``: a JSON pointer plus a reason, classified by
kind, so a caller (or the model, on retry) sees *which field* is wrong, and the metrics can tell
format failures from semantic ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pragma: no cover
    from formcast.observe.record import GenerationRecord
    from formcast.pipeline.repair import Repair

LayerUsed = Literal["constrain", "repair", "retry", "salvage"]

ViolationKind = Literal["parse", "repair", "truncation", "schema", "format", "semantic", "generation"]

#: Kinds that mean "the output is not well-formed JSON of the right shape" (format failures),
#: as opposed to "well-formed but the content breaks a business rule" (semantic failures).
FORMAT_KINDS: frozenset[str] = frozenset({"parse", "repair", "truncation", "schema", "format",
                                          "generation"})


# ----------------------------------------------------------------------------- JSON pointers


def json_pointer(path: Iterable[str | int]) -> str:
    """RFC 6901 pointer for a path of keys and indices: ``("items", 0, "a/b")`` -> ``/items/0/a~1b``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def pointer_parts(pointer: str) -> list[str]:
    """The unescaped reference tokens of a pointer; ``""`` (the whole document) has none."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must be empty or start with '/': {pointer!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def pointer_within(pointer: str, ancestor: str) -> bool:
    """True when ``pointer`` is ``ancestor`` itself or lies inside it."""
    return pointer == ancestor or pointer.startswith(ancestor + "/")


def display_pointer(pointer: str) -> str:
    """How a pointer is shown to people and models: the document root reads as ``/``."""
    return pointer or "/"


# ----------------------------------------------------------------------------- violations


def show_value(value: Any, limit: int = 60) -> str:
    """A value as JSON text, clipped: how values appear in error messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."



@dataclass(frozen=True)
class Violation:
    """One reason an output was rejected: where (JSON pointer), why, and what kind of failure."""

    pointer: str
    message: str
    kind: ViolationKind = "schema"
    keyword: str | None = None

    def __str__(self) -> str:
        return f"{display_pointer(self.pointer)}: {self.message}"

    @property
    def is_semantic(self) -> bool:
        return self.kind == "semantic"


def summarize_violations(violations: Sequence[Violation], limit: int = 5) -> str:
    """One line per violation, the first ``limit`` of them, plus how many were left out."""
    lines = [f"- {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"- ... and {len(violations) - limit} more")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class AttemptRecord:
    """What one attempt produced and why it was accepted or rejected."""

    number: int
    text: str
    tokens: int
    seconds: float
    max_tokens: int
    finish_reason: str | None
    repairs: tuple[Repair, ...] = ()
    errors: tuple[Violation, ...] = ()
    parsed_as_is: bool = False
    clipped_mass_avg: float | None = None

    @property
    def valid(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class StructuredResult:
    """The outcome of one ``generate`` call.

    ``value`` holds a result only when ``valid`` is true. A salvaged (layer 3) result keeps
    ``value=None``, ``valid=False`` and puts the trusted fields in ``salvaged``, so a degraded
    answer can never be mistaken for a success: using it is an explicit choice.
    """

    value: Any
    valid: bool
    layer_used: LayerUsed
    attempts: int
    errors: tuple[Violation, ...] = ()
    degraded: bool = False
    confidence: float = 1.0
    metrics: GenerationRecord | None = None
    salvaged: dict[str, Any] | None = None
    repairs: tuple[Repair, ...] = ()
    history: tuple[AttemptRecord, ...] = field(default=(), repr=False)

    @property
    def raw(self) -> str:
        """The text of the last attempt (what layer 2 or 3 worked on)."""
        return self.history[-1].text if self.history else ""

    @property
    def tokens(self) -> int:
        return sum(a.tokens for a in self.history)
