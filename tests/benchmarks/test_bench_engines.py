"""The benchmark's formcast engine: a timed compile must start from nothing.

The peers' fresh compiles share nothing with the previous one, so formcast's must not either:
``FormcastEngine.clear_caches`` empties every grammar-level cache and memo, or the compile
column would time a partly cached compile.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from formcast.engine import matcher
from formcast.grammar.cache import Memo
from formcast.grammar.ir import Grammar

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _engines import FormcastEngine  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
        "count": {"type": "integer", "minimum": 3, "maximum": 1200},
        "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 99.5},
        "kind": {"enum": ["a", "b", "c"]},
    },
    "required": ["code", "count"],
}


def _cached_pieces() -> list[str]:
    """Names of formcast's module-level caches and memos that hold something."""
    held = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("formcast.") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            kind = type(value).__name__
            if kind == "Memo":
                size = len(value._items)
            elif kind == "CompileCache":
                size = len(value)
            elif callable(getattr(value, "cache_info", None)):
                size = value.cache_info().currsize
            else:
                continue
            if size:
                held.append(f"{name}.{attr}")
    return held


def _engine() -> FormcastEngine:
    engine = FormcastEngine.__new__(FormcastEngine)  # no vocabulary needed to clear caches
    engine._matcher_module = matcher
    engine.cache_note = ""
    return engine


def test_the_benchmark_empties_every_compile_cache() -> None:
    engine = _engine()
    for _ in range(3):  # the first clear walks the modules, the next reuse what it found
        Grammar.from_json_schema(SCHEMA, strict=False)  # fills caches and memos
        assert _cached_pieces()
        engine.clear_caches()
        assert _cached_pieces() == []


def test_a_module_imported_after_the_walk_has_its_caches_cleared_too() -> None:
    engine = _engine()
    engine.clear_caches()
    late = types.ModuleType("formcast._late_module_for_test")
    late.MEMO = Memo(4)  # type: ignore[attr-defined]
    late.MEMO.put("key", "value")  # type: ignore[attr-defined]
    sys.modules[late.__name__] = late
    try:
        engine.clear_caches()
        assert late.MEMO.get("key") is None  # type: ignore[attr-defined]
    finally:
        del sys.modules[late.__name__]
