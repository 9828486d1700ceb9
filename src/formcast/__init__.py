"""formcast: a language model's structured output as a correctness property.

Three layers, cheapest and most certain first:

1. **Constrain** — ``Grammar`` (from JSON Schema, GBNF or regex) + ``Matcher`` mask every
   decode step so that only tokens that can continue a legal output remain.
2. **Repair, validate, retry** — ``repair_json``, ``Validator``, ``rules`` and ``RetryPolicy``
   catch what a grammar cannot express, within budgets the caller sets.
3. **Salvage** — only when the policy allows it, marked ``degraded``.

``generate`` (or a reusable ``Pipeline``) chains all three and returns a ``StructuredResult``
with the figures that show what each layer did.

Names are imported on first use, so ``import formcast`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    # layer 1
    "Grammar": "formcast.grammar.ir",
    "CompileReport": "formcast.grammar.report",
    "CompileCache": "formcast.grammar.cache",
    "Vocabulary": "formcast.engine.vocab",
    "Matcher": "formcast.engine.matcher",
    "CompiledGrammar": "formcast.engine.matcher",
    # layers 2 and 3
    "generate": "formcast.pipeline.pipeline",
    "Pipeline": "formcast.pipeline.pipeline",
    "evaluate": "formcast.pipeline.pipeline",
    "StructuredResult": "formcast.pipeline.result",
    "Violation": "formcast.pipeline.result",
    "RetryPolicy": "formcast.pipeline.retry",
    "repair_json": "formcast.pipeline.repair",
    "Validator": "formcast.pipeline.validate",
    "salvage": "formcast.pipeline.salvage",
    "rules": "formcast.pipeline.rules",
    # runtimes
    "GenerationResult": "formcast.runtime.base",
    # observability
    "MetricsRegistry": "formcast.observe.metrics",
    "default_metrics": "formcast.observe.quality",
    # errors
    "FormcastError": "formcast.errors",
    "GrammarError": "formcast.errors",
    "GBNFSyntaxError": "formcast.errors",
    "RegexSyntaxError": "formcast.errors",
    "UnsupportedRegexError": "formcast.errors",
    "LeftRecursionError": "formcast.errors",
    "AmbiguousGrammarError": "formcast.errors",
    "SchemaError": "formcast.errors",
    "UnsupportedSchemaError": "formcast.errors",
    "VocabularyError": "formcast.errors",
    "MatcherError": "formcast.errors",
    "ModelNotFoundError": "formcast.errors",
    "GenerationError": "formcast.errors",
    "BudgetExhaustedError": "formcast.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'formcast' has no attribute {name!r}")
    mod = import_module(module)
    value = mod if name == "rules" else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from formcast.engine.matcher import CompiledGrammar, Matcher
    from formcast.engine.vocab import Vocabulary
    from formcast.errors import (
        AmbiguousGrammarError,
        BudgetExhaustedError,
        FormcastError,
        GBNFSyntaxError,
        GenerationError,
        GrammarError,
        LeftRecursionError,
        MatcherError,
        ModelNotFoundError,
        RegexSyntaxError,
        SchemaError,
        UnsupportedRegexError,
        UnsupportedSchemaError,
        VocabularyError,
    )
    from formcast.grammar.cache import CompileCache
    from formcast.grammar.ir import Grammar
    from formcast.grammar.report import CompileReport
    from formcast.observe.metrics import MetricsRegistry
    from formcast.observe.quality import default_metrics
    from formcast.pipeline import rules
    from formcast.pipeline.pipeline import Pipeline, evaluate, generate
    from formcast.pipeline.repair import repair_json
    from formcast.pipeline.result import StructuredResult, Violation
    from formcast.pipeline.retry import RetryPolicy
    from formcast.pipeline.salvage import salvage
    from formcast.pipeline.validate import Validator
    from formcast.runtime.base import GenerationResult
