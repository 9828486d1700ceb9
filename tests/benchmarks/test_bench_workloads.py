"""The benchmark's grammars and sample outputs: the file format, and every sample in its language.

A sample outside its grammar would make the benchmark report a rejection (or time a dead path),
so each kind is checked with an oracle independent of the engines being measured: JSON Schema
validation, Python's ``re`` (the patterns stay in the subset where it agrees with ECMA-262) and
formcast's Earley reference recognizer for GBNF.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest

from formcast.grammar.ir import Grammar
from formcast.grammar.recognize import recognizes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _workloads import load_workloads, parse_samples  # noqa: E402

WORKLOADS = load_workloads()
BY_KIND = {kind: [w for w in WORKLOADS if w.kind == kind] for kind in ("gbnf", "regex", "schema")}


def test_parse_samples_separators_comments_and_trailing_newlines() -> None:
    text = "%% a comment\nfirst\nline two\n%%\nends with newline\n\n%%\nlast\n"
    assert parse_samples(text) == ["first\nline two", "ends with newline\n", "last"]
    assert parse_samples("%% only a comment\n") == []


def test_the_issue_workloads_are_all_there() -> None:
    names = {w.name for w in WORKLOADS}
    assert {"json.gbnf", "json.schema.json", "invoice.schema.json", "tool_call.schema.json",
            "tree.schema.json", "many_enums.schema.json", "any_of.schema.json"} <= names
    assert len(BY_KIND["gbnf"]) >= 4 and len(BY_KIND["regex"]) >= 3
    assert all(len(w.samples) >= 3 for w in WORKLOADS)


@pytest.mark.parametrize("w", BY_KIND["schema"], ids=lambda w: w.name)
def test_schema_samples_are_valid_documents(w) -> None:
    for text in w.samples:
        jsonschema.validate(json.loads(text), w.spec)
    if w.spec:  # the {} schema accepts every document
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate([json.loads(w.samples[0])], w.spec)


@pytest.mark.parametrize("w", BY_KIND["regex"], ids=lambda w: w.name)
def test_regex_samples_match_their_pattern(w) -> None:
    pattern = re.compile(w.spec)
    for text in w.samples:
        assert pattern.fullmatch(text), text
    assert not pattern.fullmatch(w.samples[0] + "\n")


@pytest.mark.parametrize("w", BY_KIND["gbnf"], ids=lambda w: w.name)
def test_gbnf_samples_are_in_their_grammar(w) -> None:
    grammar = Grammar.from_gbnf(w.spec)
    for text in w.samples:
        assert recognizes(grammar, text.encode("utf-8")), text
    assert not recognizes(grammar, w.samples[0].encode("utf-8") + b"\x00")
