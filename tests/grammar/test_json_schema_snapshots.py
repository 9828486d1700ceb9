"""Snapshots of the GBNF compiled from realistic schemas in examples/schemas/.

A change in the compiler's output shows up here as a readable diff. When the change is
intended, regenerate with ``FORMCAST_UPDATE_SNAPSHOTS=1 pytest tests/grammar/test_json_schema_snapshots.py``
and review the diff in git. Each schema's ``examples`` must validate and be accepted by the
grammar, both as compiled and as parsed back from the snapshot text.
"""

from __future__ import annotations

import difflib
import json
import os
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest

from formcast.grammar.ir import Grammar
from formcast.grammar.json_schema import compile_json_schema
from formcast.grammar.recognize import recognizes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "schemas"
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
SCHEMAS = sorted(EXAMPLES.glob("*.json"))


def snapshot_text(grammar: Grammar) -> str:
    """The GBNF with the report's stable parts as leading comments (GBNF allows ``#``)."""
    report = grammar.report
    assert report is not None
    lines = [f"# enforced: {', '.join(f'{k} x{n}' for k, n in report.compiled.items())}"]
    lines += [f"# NOT enforced: {u.pointer}: {u.reason}" for u in report.unenforced]
    lines += [f"# rules: {report.rule_count}"]
    return "\n".join(lines) + "\n" + grammar.to_gbnf()


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_compiled_gbnf_matches_snapshot(path: Path) -> None:
    grammar = compile_json_schema(json.loads(path.read_text()), strict=False, cache=None)
    text = snapshot_text(grammar)
    snap = SNAPSHOTS / f"{path.stem}.gbnf"
    if os.environ.get("FORMCAST_UPDATE_SNAPSHOTS") == "1" or not snap.exists():
        if not os.environ.get("FORMCAST_UPDATE_SNAPSHOTS") and not snap.exists():
            pytest.fail(f"no snapshot {snap.name}; run with FORMCAST_UPDATE_SNAPSHOTS=1")
        snap.write_text(text)
        return
    expected = snap.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"snapshots/{snap.name}", "compiled now"))
        pytest.fail(f"compiled GBNF differs from the snapshot (FORMCAST_UPDATE_SNAPSHOTS=1 "
                    f"to accept):\n{diff[:6000]}")


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_examples_are_valid_and_accepted(path: Path) -> None:
    schema = json.loads(path.read_text())
    grammar = compile_json_schema(schema, cache=None)  # strict: every example schema is exact
    reparsed = Grammar.from_gbnf(grammar.to_gbnf())
    assert schema["examples"], "each example schema carries sample instances"
    exact_schema = json.loads(path.read_text(), parse_float=Decimal)
    for example in schema["examples"]:
        # Decimal numbers: jsonschema's float multipleOf says 2609.95 is not a multiple of 0.01
        jsonschema.validate(json.loads(json.dumps(example), parse_float=Decimal), exact_schema,
                            format_checker=jsonschema.FormatChecker())
        text = json.dumps(example).encode()
        assert recognizes(grammar, text), text
        assert recognizes(reparsed, text), text
        pretty = json.dumps(example, indent=2).encode()  # newline + indentation between tokens
        assert recognizes(grammar, pretty), pretty


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_broken_examples_are_rejected(path: Path) -> None:
    """Every example with one leaf value replaced by a wrong-typed one is rejected."""
    schema = json.loads(path.read_text())
    grammar = compile_json_schema(schema, cache=None)
    checked = 0
    for example in schema["examples"]:
        for broken in _one_leaf_broken(example):
            if jsonschema.Draft202012Validator(schema).is_valid(broken):
                continue
            assert not recognizes(grammar, json.dumps(broken).encode()), broken
            checked += 1
    assert checked >= 3


def _one_leaf_broken(value, path=()):
    """Copies of ``value`` with one scalar replaced by a value of another type."""
    if isinstance(value, dict):
        for k, v in value.items():
            for sub in _one_leaf_broken(v, path + (k,)):
                yield {**value, k: sub}
    elif isinstance(value, list):
        for i, v in enumerate(value):
            for sub in _one_leaf_broken(v, path + (i,)):
                yield value[:i] + [sub] + value[i + 1:]
    else:
        yield [value] if not isinstance(value, list) else "x"
        yield {"unexpected": value}
        if isinstance(value, str):
            yield 12345
        else:
            yield "not a " + type(value).__name__


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_llama_cpp_parses_the_gbnf(path: Path) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    grammar = compile_json_schema(json.loads(path.read_text()), strict=False, cache=None)
    llama_cpp.LlamaGrammar.from_string(grammar.to_gbnf(), verbose=False)  # raises if refused
