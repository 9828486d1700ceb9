"""The official JSON-Schema-Test-Suite (draft 2020-12) through the compiler and the real engine.

For every schema the compiler accepts, every test instance is looked for in the grammar's
language with the engine's ``Matcher`` on the SmolLM2 vocabulary:

* the instance is spelled as ``json.dumps`` does (``", "`` and ``": "`` separators, ASCII
  escapes), with numbers in their canonical spelling (``1.0`` -> ``1``; no exponent) and object
  keys in whichever order the grammar accepts them (a depth-first search over key orders,
  pruned byte by byte by the matcher: the compiler fixes one order per object, and which one
  depends on ``$ref``/``allOf`` merging, so the test finds it rather than re-deriving it);
* a valid instance must be found (zero exceptions), then replayed byte by byte and token by
  token (SmolLM2 tokenizer ids through ``Matcher.accept_token``);
* an invalid instance must not be found, in any key order, whenever the compile report says
  every keyword was enforced (``report.exact``).

``strict=True`` must raise exactly when the report lists unenforced keywords. A summary line per
file is printed at the end of the session (``-s`` not needed). ``benchmarks/suite_coverage.py``
reuses ``run_suite`` to write the README coverage table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from formcast.engine.matcher import Matcher
from formcast.errors import FormcastError, UnsupportedSchemaError
from formcast.grammar.cache import CompileCache
from formcast.grammar.json_schema import compile_json_schema
from formcast.grammar.json_text import plain_decimal

SUITE = Path(os.environ.get("FORMCAST_SCHEMA_SUITE",
                            "/work/shared/data/json-schema-test-suite/tests/draft2020-12"))
SEARCH_BUDGET = 5000  # matcher steps per instance before the key-order search gives up


def suite_files() -> list[tuple[Path, str]]:
    """Every test file with the ``formats`` mode it needs: the core files treat ``format`` as
    an annotation (the 2020-12 default); ``optional/format`` assert it."""
    if not SUITE.is_dir():
        return []
    files = [(p, "annotate" if p.name == "format.json" else "assert")
             for p in sorted(SUITE.glob("*.json"))]
    files += [(p, "assert") for p in sorted((SUITE / "optional" / "format").glob("*.json"))]
    return files


# ----------------------------------------------------------------------------- spelling


def canonical_number(value: int | float) -> str:
    if isinstance(value, float):
        return plain_decimal(Decimal(repr(value)))
    return str(value)


def spellings(value: Any, m: Matcher, budget: list[int]) -> Iterator[Matcher]:
    """Matchers that consumed one spelling of ``value`` after ``m``'s position, in the
    preferred key order first. ``budget`` counts matcher steps (shared, decremented)."""
    if budget[0] <= 0:
        return
    if isinstance(value, dict):
        yield from _object(value, m, budget)
    elif isinstance(value, list):
        yield from _array(value, m, budget)
    else:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            text = json.dumps(value)
        else:
            text = canonical_number(value)
        got = _step(m, text.encode("utf-8", "surrogatepass"), budget)
        if got is not None:
            yield got


def _step(m: Matcher, data: bytes, budget: list[int]) -> Matcher | None:
    budget[0] -= 1
    nxt = m.copy()
    return nxt if nxt.accept_bytes(data) else None


def _array(items: list, m: Matcher, budget: list[int]) -> Iterator[Matcher]:
    start = _step(m, b"[", budget)
    if start is None:
        return

    def rest(i: int, cur: Matcher) -> Iterator[Matcher]:
        if i == len(items):
            end = _step(cur, b"]", budget)
            if end is not None:
                yield end
            return
        if i:
            sep = _step(cur, b", ", budget)
            if sep is None:
                return
            cur = sep
        for after in spellings(items[i], cur, budget):
            yield from rest(i + 1, after)

    yield from rest(0, start)


def _object(obj: dict, m: Matcher, budget: list[int]) -> Iterator[Matcher]:
    start = _step(m, b"{", budget)
    if start is None:
        return

    def rest(left: list[str], cur: Matcher, first: bool) -> Iterator[Matcher]:
        if not left:
            end = _step(cur, b"}", budget)
            if end is not None:
                yield end
            return
        for k in left:
            head = ("" if first else ", ") + json.dumps(k) + ": "
            keyed = _step(cur, head.encode("utf-8", "surrogatepass"), budget)
            if keyed is None:
                continue
            for after in spellings(obj[k], keyed, budget):
                yield from rest([x for x in left if x != k], after, False)

    yield from rest(list(obj), start, True)


def find_spelling(value: Any, m: Matcher) -> tuple[str | None, bool]:
    """A spelling of ``value`` the grammar accepts (or None), and whether the search was
    exhaustive (False when the budget ran out first)."""
    budget = [SEARCH_BUDGET]
    for end in spellings(value, m, budget):
        if end.is_accepting():
            return end.accepted_text, True  # type: ignore[attr-defined]
    return None, budget[0] > 0


# ----------------------------------------------------------------------------- running


@dataclass
class FileResult:
    name: str
    groups: int = 0
    compiled: int = 0
    exact: int = 0
    skipped: list[str] = field(default_factory=list)
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_checked: int = 0
    invalid_rejected: int = 0
    tokens_fed: int = 0
    failures: list[str] = field(default_factory=list)
    unenforced: dict[str, int] = field(default_factory=dict)


class _Tracking(Matcher):
    """A Matcher that remembers the bytes it consumed (to replay them token by token)."""

    accepted_text: str

    def copy(self) -> _Tracking:  # type: ignore[override]
        new = super().copy()
        new.__class__ = _Tracking
        new.accepted_text = self.accepted_text
        return new  # type: ignore[return-value]

    def accept_bytes(self, data: bytes) -> bool:
        ok = super().accept_bytes(data)
        if ok:
            self.accepted_text = self.accepted_text + data.decode("utf-8", "surrogatepass")
        return ok


def run_file(path: Path, formats: str, vocab: Any,
             encode: Callable[[str], list[int]] | None) -> FileResult:
    res = FileResult(path.name if path.parent == SUITE else f"optional/format/{path.name}")
    cache = CompileCache(capacity=8)
    for group in json.loads(path.read_text()):
        res.groups += 1
        where = f"{res.name} | {group['description']}"
        try:
            grammar = compile_json_schema(group["schema"], strict=False, formats=formats,
                                          cache=cache)
        except FormcastError as exc:
            res.skipped.append(f"{where}: {str(exc).splitlines()[0]}")
            continue
        report = grammar.report
        assert report is not None
        res.compiled += 1
        res.exact += report.exact
        for kw in report.unenforced_keywords:
            res.unenforced[kw] = res.unenforced.get(kw, 0) + 1
        try:
            compile_json_schema(group["schema"], strict=True, formats=formats, cache=cache)
            strict_raised = False
        except UnsupportedSchemaError:
            strict_raised = True
        if strict_raised == report.exact:
            res.failures.append(f"{where}: strict={strict_raised} but exact={report.exact}")
        start = _Tracking(grammar, vocab)
        start.accepted_text = ""
        for test in group["tests"]:
            text, exhaustive = find_spelling(test["data"], start)
            label = f"{where} | {test['description']}"
            if test["valid"]:
                res.valid += 1
                if text is None:
                    res.failures.append(f"VALID REJECTED {label}: {json.dumps(test['data'])[:80]}")
                    continue
                res.valid_accepted += 1
                problem = _replay(grammar, vocab, encode, text)
                if problem:
                    res.failures.append(f"REPLAY {label}: {problem}")
                elif encode is not None:
                    res.tokens_fed += 1
            else:
                res.invalid += 1
                if not report.exact:
                    continue
                res.invalid_checked += 1
                if text is None and exhaustive:
                    res.invalid_rejected += 1
                elif text is not None:
                    res.failures.append(f"INVALID ACCEPTED {label}: {text[:80]}")
                else:
                    res.failures.append(f"SEARCH BUDGET {label}")
    return res


def _replay(grammar: Any, vocab: Any, encode: Callable[[str], list[int]] | None,
            text: str) -> str | None:
    """Feed ``text`` again byte by byte, then as SmolLM2 tokens; None when both accept."""
    data = text.encode("utf-8", "surrogatepass")
    m = Matcher(grammar, vocab)
    for i in range(len(data)):
        if not m.accept_bytes(data[i:i + 1]):
            return f"byte {i} of {text[:60]!r} refused"
    if not m.is_accepting():
        return "not accepting after all bytes"
    if encode is None:
        return None
    m = Matcher(grammar, vocab)
    for i, tok in enumerate(encode(text)):
        if not m.accept_token(tok):
            return f"token #{i} ({vocab.token_bytes[tok]!r}) of {text[:60]!r} refused"
    return None if m.is_accepting() else "not accepting after all tokens"


def run_suite(vocab: Any, encode: Callable[[str], list[int]] | None) -> list[FileResult]:
    return [run_file(path, formats, vocab, encode) for path, formats in suite_files()]


def summary_table(results: list[FileResult]) -> str:
    """The per-file table (markdown) with totals."""
    head = ("| file | schemas | compiled | exact | skipped | valid accepted | "
            "invalid rejected (exact schemas) |\n|---|---|---|---|---|---|---|\n")
    rows = []
    tot = FileResult("**total**")
    for r in results:
        rows.append(f"| {r.name} | {r.groups} | {r.compiled} | {r.exact} | {len(r.skipped)} | "
                    f"{r.valid_accepted}/{r.valid} | {r.invalid_rejected}/{r.invalid_checked} |")
        tot.groups += r.groups
        tot.compiled += r.compiled
        tot.exact += r.exact
        tot.skipped += r.skipped
        tot.valid += r.valid
        tot.valid_accepted += r.valid_accepted
        tot.invalid_checked += r.invalid_checked
        tot.invalid_rejected += r.invalid_rejected
    rows.append(f"| **total** | {tot.groups} | {tot.compiled} | {tot.exact} | "
                f"{len(tot.skipped)} | {tot.valid_accepted}/{tot.valid} | "
                f"{tot.invalid_rejected}/{tot.invalid_checked} |")
    return head + "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------- the test


@pytest.fixture(scope="module")
def suite_results(smollm2_vocab, smollm2_encode) -> list[FileResult]:
    if not suite_files():
        pytest.skip(f"JSON-Schema-Test-Suite not found at {SUITE}")
    return run_suite(smollm2_vocab, smollm2_encode)


def test_official_suite_through_the_engine(suite_results, capsys) -> None:
    with capsys.disabled():
        print("\nJSON-Schema-Test-Suite draft2020-12 through formcast (SmolLM2 vocabulary):")
        print(summary_table(suite_results))
    failures = [f for r in suite_results for f in r.failures]
    assert not failures, "\n".join(failures[:40])
    total_valid = sum(r.valid for r in suite_results)
    assert total_valid > 900  # the suite really ran
    assert sum(r.tokens_fed for r in suite_results) > 0.9 * total_valid


def test_most_of_the_suite_compiles_exactly(suite_results) -> None:
    compiled = sum(r.compiled for r in suite_results)
    groups = sum(r.groups for r in suite_results)
    exact = sum(r.exact for r in suite_results)
    assert compiled >= 0.97 * groups
    assert exact >= 0.75 * compiled
