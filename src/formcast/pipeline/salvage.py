"""Layer 3, salvage: keep only the fields of a failed output that can be trusted.

Salvage runs only when the caller's policy allows it, after layers 1 and 2 have given up. It
never guesses: a field is kept only if it was read intact from the model's own text and
nothing (schema, format, rule, lossy repair) points at it. Arrays with anything wrong inside
are dropped whole, since removing items would turn a list into a different, shorter claim.
What is kept comes with a confidence below 1 and the errors that led here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from formcast.errors import RepairError
from formcast.pipeline.repair import RepairResult, repair_json
from formcast.pipeline.result import Violation, json_pointer, pointer_parts, pointer_within

#: Highest confidence per source: a salvaged value is never as good as a validated one.
BASE_CONFIDENCE = {"parsed": 0.8, "lossy": 0.6, "scan": 0.4}
_SCAN_PAIR = re.compile(r'"((?:[^"\\\n]|\\.)+)"\s*[:\uff1a]\s*'
                        r'("(?:[^"\\\n]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)')


@dataclass(frozen=True)
class SalvageResult:
    """The trusted part of a failed output (always an object), and how far to trust it."""

    value: dict[str, Any]
    confidence: float
    dropped: tuple[str, ...]
    source: Literal["parsed", "lossy", "scan"]


def salvage(text: str, *, check: Callable[[Any], list[Violation]] | None = None,
            violations: Sequence[Violation] = (), repaired: RepairResult | None = None,
            known_keys: Sequence[str] | None = None) -> SalvageResult | None:
    """Extract what can be trusted from ``text``; ``None`` when nothing can.

    ``check`` re-validates the pruned object (schema and rules); its "missing required field"
    findings are expected in a partial result and ignored. ``violations`` are the errors that
    failed the output; ``repaired`` its parse-repair, if it had one. ``known_keys`` limits the
    last-resort text scan to the schema's top-level property names.
    """
    if repaired is None:
        try:
            repaired = repair_json(text)
        except RepairError:
            repaired = None

    untrusted = {v.pointer for v in violations if v.pointer}
    unlocalized = any(not v.pointer and v.kind != "truncation" for v in violations)
    found = None
    source: Literal["parsed", "lossy", "scan"] = "scan"
    if repaired is not None:
        untrusted |= {r.pointer for r in repaired.lossy_repairs if r.pointer}
        unlocalized = unlocalized or any(r.pointer == "" for r in repaired.lossy_repairs)
    if repaired is not None and isinstance(repaired.value, dict):
        found = _trusted_part(repaired.value, untrusted, set(repaired.closed_at_end), check)
        source = "lossy" if repaired.lossy or repaired.ended_early else "parsed"
    if not found:  # nothing parsed, or the parse held nothing trustworthy: scan the text
        source = "scan"
        found = _trusted_part(_scan_pairs(text, known_keys), untrusted, set(), check)
    if not found:
        return None
    kept, dropped = found
    lost = len({pointer_parts(p)[0] for p in dropped if p}) + sum(
        1 for v in violations if v.keyword == "required" and len(pointer_parts(v.pointer)) == 1)
    completeness = len(kept) / (len(kept) + lost)
    confidence = BASE_CONFIDENCE[source] * completeness * (0.5 if unlocalized else 1.0)
    return SalvageResult(kept, round(confidence, 3), tuple(dropped), source)


def _trusted_part(document: dict[str, Any], untrusted: set[str], shaky: set[str],
                  check: Callable[[Any], list[Violation]] | None,
                  ) -> tuple[dict[str, Any], list[str]] | None:
    """Prune ``document`` of untrusted members, re-checking until what is left is clean."""
    kept, dropped = _prune(document, [], untrusted, shaky)
    if check is not None:
        for _ in range(5):  # pruning can expose new problems (e.g. a dependency); repeat
            found = [v for v in check(kept) if v.keyword not in ("required", "minProperties")
                     and _exists(kept, v.pointer)]  # a missing field is missing, not wrong
            if not found:
                break
            if any(not v.pointer for v in found):
                return None  # the remainder is wrong as a whole: nothing is trustworthy
            kept, more = _prune(kept, [], {v.pointer for v in found}, set())
            dropped += more
        else:
            return None
    return (kept, dropped) if kept else None


def _exists(document: Any, pointer: str) -> bool:
    node = document
    for part in pointer_parts(pointer):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _prune(value: dict[str, Any], path: list[str | int], untrusted: set[str],
           shaky_arrays: set[str]) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``value`` without untrusted members; returns it and the dropped pointers."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, item in value.items():
        pointer = json_pointer([*path, key])
        if pointer in untrusted:
            dropped.append(pointer)
            continue
        suspect = any(pointer_within(u, pointer) for u in untrusted) or any(
            pointer_within(s, pointer) for s in shaky_arrays)
        if isinstance(item, list) and suspect:
            dropped.append(pointer)  # a list with a bad or missing item is not a smaller truth
        elif isinstance(item, dict) and suspect:
            inner, inner_dropped = _prune(item, [*path, key], untrusted, shaky_arrays)
            dropped.extend(inner_dropped)
            if inner:
                kept[key] = inner
        else:
            kept[key] = item
    return kept, dropped


def _scan_pairs(text: str, known_keys: Sequence[str] | None) -> dict[str, Any]:
    """Last resort for text that does not parse at all: ``"key": scalar`` pairs whose key is a
    known top-level property and occurs exactly once (a repeated key could be a nested one)."""
    found: dict[str, list[Any]] = {}
    for match in _SCAN_PAIR.finditer(text):
        try:
            key = json.loads(f'"{match.group(1)}"')
            value = json.loads(match.group(2))
        except ValueError:
            continue
        found.setdefault(key, []).append(value)
    allowed = set(known_keys) if known_keys is not None else None
    return {k: vs[0] for k, vs in found.items()
            if len(vs) == 1 and (allowed is None or k in allowed) and _occurrences(text, k) == 1}


def _occurrences(text: str, key: str) -> int:
    """How often ``key`` appears as a key at all (with any kind of value)."""
    quoted = re.escape(json.dumps(key, ensure_ascii=False))
    return len(re.findall(quoted + r"\s*[:\uff1a]", text))
