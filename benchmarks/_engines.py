"""One small adapter per engine, so the benchmark measures the same calls for each.

Every adapter offers ``compile(workload)`` (a fresh compile: no compiler cache may serve it),
``new_matcher(compiled)`` (a matcher in the start state that shares whatever the engine shares
between matchers of one compiled grammar), ``allocate()`` (a packed int32 bitmask of one row),
``fill_mask(matcher, bitmask)`` (the timed call: fill the bitmask for the current state),
``accept(matcher, token_id)`` and ``is_accepting(matcher)``.

An engine that cannot be loaded raises ``EngineUnavailable`` from its constructor; a grammar it
cannot compile raises ``CompileFailed``. The benchmark prints both as "n/a (reason)".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _workloads import Workload

ENGINE_NAMES = ("formcast", "llguidance", "xgrammar")
BASELINE = "llguidance"


class EngineUnavailable(Exception):
    """The engine's package is missing or cannot load the vocabulary."""


class CompileFailed(Exception):
    """The engine refused or failed to compile one grammar."""


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Engine:
    """Interface shared by the adapters."""

    name = "engine"
    vocab_size = 0

    def before_compile(self) -> None:
        """Untimed: forget earlier compiles, so the timed compile starts from nothing and
        does not pay for freeing the previous one."""

    def compile(self, workload: Workload) -> Any:
        raise NotImplementedError

    def new_matcher(self, compiled: Any) -> Any:
        raise NotImplementedError

    def allocate(self) -> Any:
        raise NotImplementedError

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        raise NotImplementedError

    def accept(self, matcher: Any, token_id: int) -> bool:
        raise NotImplementedError

    def is_accepting(self, matcher: Any) -> bool:
        raise NotImplementedError

    def as_numpy(self, bitmask: Any) -> np.ndarray:
        """A numpy view of a bitmask from ``allocate`` (for correctness checks, untimed)."""
        return np.asarray(bitmask)

    def describe(self) -> str:
        return self.name


# ----------------------------------------------------------------------------- llguidance


class LlguidanceEngine(Engine):
    """llguidance: ``LLMatcher`` construction compiles; copies share the lexer caches.

    The mask call is ``unsafe_compute_mask_ptr`` on the bitmask's address resolved once at
    allocation: exactly what ``llguidance.numpy.fill_next_token_bitmask`` calls, without its
    per-call Python checks (~1.5 µs here), so the baseline is the engine's own cost.
    """

    name = "llguidance"

    def __init__(self, hf_tokenizer: Any) -> None:
        try:
            import llguidance
            import llguidance.hf
            import llguidance.numpy
            from llguidance.gbnf_to_lark import gbnf_to_lark
        except ImportError as exc:
            raise EngineUnavailable(f"llguidance not installed ({_short(exc)})") from exc
        self._llg = llguidance
        self._allocate = llguidance.numpy.allocate_token_bitmask
        self._pointers: dict[int, tuple[np.ndarray, int]] = {}
        self._gbnf_to_lark = gbnf_to_lark
        self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer)
        self.vocab_size = self.tokenizer.vocab_size
        self.version = getattr(llguidance, "__version__", "") or _dist_version("llguidance")

    def grammar_text(self, workload: Workload) -> str:
        matcher_cls = self._llg.LLMatcher
        if workload.kind == "gbnf":
            return matcher_cls.grammar_from_lark(self._gbnf_to_lark(workload.spec))
        if workload.kind == "regex":
            return matcher_cls.grammar_from_regex(workload.spec)
        return matcher_cls.grammar_from_json_schema(workload.spec)

    def compile(self, workload: Workload) -> Any:
        try:
            matcher = self._llg.LLMatcher(self.tokenizer, self.grammar_text(workload), log_level=0)
        except Exception as exc:  # noqa: BLE001 - any failure is reported, not raised
            raise CompileFailed(_short(exc)) from exc
        if matcher.is_error():
            raise CompileFailed(matcher.get_error())
        return matcher

    def new_matcher(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def allocate(self) -> Any:
        bitmask = self._allocate(1, self.vocab_size)
        self._pointers[id(bitmask)] = (bitmask, bitmask.ctypes.data)
        return bitmask

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        matcher.unsafe_compute_mask_ptr(self._pointers[id(bitmask)][1], bitmask.nbytes)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.consume_token(token_id)) and not matcher.is_error()

    def is_accepting(self, matcher: Any) -> bool:
        return bool(matcher.is_accepting())

    def describe(self) -> str:
        return f"llguidance {self.version}"


# ----------------------------------------------------------------------------- xgrammar


class XgrammarEngine(Engine):
    """xgrammar: a new ``GrammarCompiler`` with its cache disabled for every compile."""

    name = "xgrammar"

    def __init__(self, hf_tokenizer: Any) -> None:
        try:
            import xgrammar
        except ImportError as exc:
            raise EngineUnavailable(f"xgrammar not installed ({_short(exc)})") from exc
        self._xgr = xgrammar
        self.vocab_size = len(hf_tokenizer)
        self.info = xgrammar.TokenizerInfo.from_huggingface(hf_tokenizer, vocab_size=self.vocab_size)
        self.version = getattr(xgrammar, "__version__", "") or _dist_version("xgrammar")

    def compile(self, workload: Workload) -> Any:
        compiler = self._xgr.GrammarCompiler(self.info, cache_enabled=False)
        try:
            if workload.kind == "gbnf":
                return compiler.compile_grammar(workload.spec)
            if workload.kind == "regex":
                return compiler.compile_regex(workload.spec)
            # strict_mode=False follows the schema as written (the schemas say
            # additionalProperties themselves); any_whitespace matches the other engines.
            return compiler.compile_json_schema(json.dumps(workload.spec), strict_mode=False,
                                                any_whitespace=True)
        except Exception as exc:  # noqa: BLE001
            raise CompileFailed(_short(exc)) from exc

    def new_matcher(self, compiled: Any) -> Any:
        return self._xgr.GrammarMatcher(compiled)

    def allocate(self) -> Any:
        return self._xgr.allocate_token_bitmask(1, self.vocab_size)

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        matcher.fill_next_token_bitmask(bitmask)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.accept_token(token_id))

    def is_accepting(self, matcher: Any) -> bool:
        return bool(matcher.is_completed())

    def as_numpy(self, bitmask: Any) -> np.ndarray:
        return bitmask.numpy()

    def describe(self) -> str:
        return f"xgrammar {self.version}"


# ----------------------------------------------------------------------------- formcast


class FormcastEngine(Engine):
    """formcast: front end (GBNF / regex / JSON Schema) then ``Matcher(grammar, vocab)``.

    ``Matcher(grammar, vocab)`` compiles the grammar's automaton and memoises the compiled form
    per (grammar, vocabulary); matchers built from it share the mask memo. Every compile first
    empties the grammar-level caches (compiled grammars, automata, schema compile caches,
    memoised helpers) so it is never served from a previous compile; the per-vocabulary token
    table is kept, as the peers keep their tokenizer objects.
    """

    name = "formcast"

    def __init__(self, gguf_path: Path) -> None:
        try:
            from formcast.engine import matcher as matcher_module
            from formcast.engine.vocab import Vocabulary
            from formcast.grammar.ir import Grammar
        except ImportError as exc:
            raise EngineUnavailable(f"formcast engine not importable ({_short(exc)})") from exc
        self._matcher_module = matcher_module
        self._matcher_cls = matcher_module.Matcher
        self._grammar_cls = Grammar
        try:
            self.vocab = Vocabulary.from_gguf(gguf_path)
        except Exception as exc:  # noqa: BLE001
            raise EngineUnavailable(f"cannot load the vocabulary ({_short(exc)})") from exc
        self.vocab_size = self.vocab.size
        self.words = (self.vocab_size + 31) // 32
        self.cache_note = ""

    def before_compile(self) -> None:
        self.clear_caches()

    # The cache-clearing functions found by the last walk, and len(sys.modules) then.
    _clears: tuple[Callable[[], Any], ...] = ()
    _modules_walked = -1

    def clear_caches(self) -> None:
        """Forget compiled grammars so the next compile does all the grammar-level work.

        The caches are found by walking every formcast module's namespace, again whenever a
        module has been imported since the last walk. Walking before every compile (as this
        did until session 28) read thousands of objects just before the timed compile and
        evicted formcast's own code and data from the CPU caches: 7-18% of a compile in an
        A/B, a cost of this harness and not of formcast.
        """
        if len(sys.modules) != self._modules_walked:
            self._modules_walked = len(sys.modules)
            self._clears = self._find_caches()
        for clear in self._clears:
            clear()

    def _find_caches(self) -> tuple[Callable[[], Any], ...]:
        """The ``clear``/``cache_clear`` of every compile cache and memo formcast holds."""
        clears: list[Callable[[], Any]] = []
        seen: set[int] = set()  # a cache imported into several modules is cleared once
        public = getattr(self._matcher_module, "clear_caches", None)
        if callable(public):
            clears.append(public)
        else:
            compiled_cls = getattr(self._matcher_module, "CompiledGrammar", None)
            stores = [getattr(compiled_cls, a, None) for a in ("_compiled", "_automata")]
            clears += [s.clear for s in stores if hasattr(s, "clear")]
            if not clears:
                self.cache_note = " (no way found to clear its compile cache)"
        # Schema compile caches and memoised helper functions (functools caches) too, so a
        # compile starts from nothing, as the peers' fresh compiles do.
        # The shared memos of compile pieces (Memo: number languages, spelled automata) too.
        for module_name, module in list(sys.modules.items()):
            if not module_name.startswith("formcast.") or module is None:
                continue
            for value in list(vars(module).values()):
                if id(value) in seen:
                    continue
                seen.add(id(value))
                if type(value).__name__ in ("CompileCache", "Memo") and callable(
                        getattr(value, "clear", None)):
                    clears.append(value.clear)
                elif callable(getattr(value, "cache_clear", None)):
                    clears.append(value.cache_clear)
        return tuple(clears)

    def grammar(self, workload: Workload) -> Any:
        if workload.kind == "gbnf":
            return self._grammar_cls.from_gbnf(workload.spec)
        if workload.kind == "regex":
            return self._grammar_cls.from_regex(workload.spec)
        try:
            return self._grammar_cls.from_json_schema(workload.spec, strict=False, cache=None)
        except TypeError:  # a front end without the ``cache`` option
            return self._grammar_cls.from_json_schema(workload.spec, strict=False)

    def compile(self, workload: Workload) -> Any:
        try:
            return self._matcher_cls(self.grammar(workload), self.vocab).compiled
        except Exception as exc:  # noqa: BLE001
            raise CompileFailed(_short(exc)) from exc

    def new_matcher(self, compiled: Any) -> Any:
        return self._matcher_cls(compiled)

    def allocate(self) -> Any:
        return np.zeros((1, self.words), dtype=np.int32)

    def fill_mask(self, matcher: Any, bitmask: Any) -> None:
        matcher.fill_next_token_bitmask(bitmask)

    def accept(self, matcher: Any, token_id: int) -> bool:
        return bool(matcher.accept_token(token_id))

    def is_accepting(self, matcher: Any) -> bool:
        return bool(matcher.is_accepting())

    def describe(self) -> str:
        return f"formcast {_dist_version('formcast')}{self.cache_note}"


# ----------------------------------------------------------------------------- factory


def _dist_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def make_engine(name: str, hf_tokenizer: Any, gguf_path: Path) -> Engine:
    """Build the named adapter; raise ``EngineUnavailable`` with the reason if it cannot load."""
    try:
        if name == "llguidance":
            return LlguidanceEngine(hf_tokenizer)
        if name == "xgrammar":
            return XgrammarEngine(hf_tokenizer)
        if name == "formcast":
            return FormcastEngine(gguf_path)
    except EngineUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - an engine that breaks on load is reported
        raise EngineUnavailable(_short(exc)) from exc
    raise EngineUnavailable(f"unknown engine {name!r} (choose from {', '.join(ENGINE_NAMES)})")
