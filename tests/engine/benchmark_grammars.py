"""The benchmark's grammars (``benchmarks/grammars/``), for tests that compare two
implementations of the engine on realistic inputs."""

from __future__ import annotations

import json
from pathlib import Path

from formcast.grammar.ir import Grammar

GRAMMARS = Path(__file__).resolve().parents[2] / "benchmarks" / "grammars"
GRAMMAR_PATHS = sorted(p for p in GRAMMARS.glob("*/*")
                       if p.suffix in (".gbnf", ".regex", ".json") and "samples" not in p.name)


def load_grammar(path: Path) -> Grammar:
    """A benchmark grammar by its file: GBNF, regex or JSON Schema (non-strict)."""
    text = path.read_text()
    if path.suffix == ".gbnf":
        return Grammar.from_gbnf(text)
    if path.suffix == ".regex":
        return Grammar.from_regex(text.strip())
    return Grammar.from_json_schema(json.loads(text), strict=False)
