"""What a JSON Schema compile enforced, what it left to the validator, and what it cost.

A grammar can enforce most of JSON Schema exactly, but not all of it (``uniqueItems``, general
``not``, remote references...). Nothing is dropped silently: every keyword the grammar does not
enforce is listed with its JSON pointer and the reason, so the validator after sampling knows
what it still has to check, and a caller can decide whether that is acceptable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from formcast.grammar.ir import ReadableRules


@dataclass(frozen=True, slots=True)
class Unenforced:
    """One keyword the grammar does not enforce (it accepts a superset there)."""

    pointer: str  # JSON pointer of the keyword itself, e.g. "/properties/tags/uniqueItems"
    keyword: str
    reason: str

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.pointer, self.keyword, self.reason)


@dataclass(frozen=True, init=False)
class CompileReport:
    """The outcome of one JSON Schema compile.

    ``compiled`` counts, per keyword, how many occurrences the grammar enforces exactly.
    ``unenforced`` lists the keywords the grammar over-approximates (accepts more than the
    schema allows); the validator must check those. ``notes`` are schema-wide remarks about the
    accepted *spellings* (whitespace bound, number and escape forms): they never exclude a
    valid value, only alternative ways of writing one.
    """

    compiled: Mapping[str, int]
    unenforced: tuple[Unenforced, ...]
    notes: tuple[str, ...]
    # the grammar's rules in their readable form (counted on first use of ``rule_count``)
    readable_rules: ReadableRules = field(compare=False, repr=False)
    compile_seconds: float
    schema_hash: str
    compiler_version: str
    options: Mapping[str, Any]

    def __init__(self, compiled: Mapping[str, int], unenforced: tuple[Unenforced, ...],
                 notes: tuple[str, ...], readable_rules: ReadableRules, compile_seconds: float,
                 schema_hash: str, compiler_version: str,
                 options: Mapping[str, Any] | None = None) -> None:
        # Written out rather than generated: the dataclass's own __init__ is Python code (each
        # field through object.__setattr__, then __post_init__), 4% of a small schema's
        # front end; this one is compiled with the module.
        setattr_ = object.__setattr__
        setattr_(self, "compiled", MappingProxyType({k: compiled[k] for k in sorted(compiled)}))
        setattr_(self, "unenforced", tuple(unenforced))
        setattr_(self, "notes", tuple(notes))
        setattr_(self, "readable_rules", readable_rules)
        setattr_(self, "compile_seconds", compile_seconds)
        setattr_(self, "schema_hash", schema_hash)
        setattr_(self, "compiler_version", compiler_version)
        setattr_(self, "options", MappingProxyType(dict(options or {})))

    @property
    def rule_count(self) -> int:
        """How many rules the grammar has in its readable form (``Grammar.rules``)."""
        return len(self.readable_rules.rules())

    @property
    def exact(self) -> bool:
        """True when the grammar accepts exactly the valid values (up to spelling)."""
        return not self.unenforced

    @property
    def unenforced_keywords(self) -> list[str]:
        """The distinct keywords that are not enforced, sorted."""
        return sorted({u.keyword for u in self.unenforced})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (for logs and metrics)."""
        return {
            "exact": self.exact,
            "compiled": dict(self.compiled),
            "unenforced": [
                {"pointer": u.pointer, "keyword": u.keyword, "reason": u.reason}
                for u in self.unenforced
            ],
            "notes": list(self.notes),
            "rule_count": self.rule_count,
            "compile_ms": round(self.compile_seconds * 1000, 3),
            "schema_hash": self.schema_hash,
            "compiler_version": self.compiler_version,
            "options": dict(self.options),
        }

    def format(self) -> str:
        """A human-readable summary, as ``formcast compile`` prints it."""
        lines = [
            f"compile report (compiler {self.compiler_version}, schema {self.schema_hash[:12]})",
            f"  rules: {self.rule_count}    compile time: {self.compile_seconds * 1000:.1f} ms",
        ]
        if self.compiled:
            kws = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in self.compiled.items())
            lines.append(f"  enforced by the grammar: {kws}")
        else:
            lines.append("  enforced by the grammar: (no constraining keywords)")
        if self.unenforced:
            lines.append(f"  NOT enforced by the grammar ({len(self.unenforced)}); "
                         "the validator must check these:")
            width = max(len(u.pointer or "/") for u in self.unenforced)
            for u in self.unenforced:
                lines.append(f"    {(u.pointer or '/').ljust(width)}  {u.reason}")
        else:
            lines.append("  every constraining keyword is enforced exactly")
        if self.notes:
            lines.append("  notes:")
            lines.extend(f"    - {n}" for n in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()
