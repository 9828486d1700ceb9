"""The per-sequence matcher: next-token masks, accept, rollback and forced bytes.

``Matcher(grammar, vocab)`` is cheap to create: the automaton (per grammar) and the mask cache
(per grammar and vocabulary) are compiled once and shared by every matcher, across threads of
one process as long as each sequence has its own matcher. A matcher holds only the history of
its parser states, so ``rollback`` and ``copy`` are list operations.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from formcast.engine.lexer import Automaton, compile_automaton
from formcast.engine.mask_cache import MaskCache, TokenTable
from formcast.engine.parser import Parser, State
from formcast.errors import MatcherError
from formcast.grammar.ir import Grammar

MAX_FORCED_BYTES = 1024
_CACHE_SIZE = 64


class CompiledGrammar:
    """A grammar compiled for one vocabulary: automaton, parser and mask cache.

    Obtain one with :meth:`get`, which memoises by grammar and vocabulary fingerprint.
    """

    _lock = threading.Lock()
    _automata: OrderedDict[str, tuple[Automaton, Parser]] = OrderedDict()
    _tables: OrderedDict[str, TokenTable] = OrderedDict()
    _compiled: OrderedDict[tuple[str, str], CompiledGrammar] = OrderedDict()
    hits = 0
    misses = 0

    def __init__(self, grammar: Grammar, vocab, automaton: Automaton, parser: Parser,
                 table: TokenTable) -> None:
        self.grammar = grammar
        self.vocab = vocab
        self.automaton = automaton
        self.parser = parser
        self.table = table
        self.masks = MaskCache(automaton, parser, table)
        self.lock = threading.RLock()

    @classmethod
    def get(cls, grammar: Grammar, vocab) -> CompiledGrammar:
        """The shared compiled form of ``grammar`` for ``vocab`` (compiled on first use)."""
        key = (grammar.fingerprint, vocab.fingerprint)
        with cls._lock:
            got = cls._compiled.get(key)
            if got is not None:
                cls._compiled.move_to_end(key)
                cls.hits += 1
                return got
            cls.misses += 1
            auto_parser = cls._remember(cls._automata, grammar.fingerprint,
                                        lambda: _automaton_and_parser(grammar))
            table = cls._remember(cls._tables, vocab.fingerprint,
                                  lambda: TokenTable(list(vocab.token_bytes), vocab.size,
                                                     frozenset(vocab.eos_ids)))
            compiled = cls(grammar, vocab, auto_parser[0], auto_parser[1], table)
            cls._compiled[key] = compiled
            if len(cls._compiled) > _CACHE_SIZE:
                cls._compiled.popitem(last=False)
            return compiled

    @staticmethod
    def _remember(store: OrderedDict, key, build):
        got = store.get(key)
        if got is None:
            got = build()
            store[key] = got
            if len(store) > _CACHE_SIZE:
                store.popitem(last=False)
        store.move_to_end(key)
        return got

    @property
    def compile_ms(self) -> float:
        return self.automaton.compile_seconds * 1000.0


def _automaton_and_parser(grammar: Grammar) -> tuple[Automaton, Parser]:
    auto = compile_automaton(grammar)
    return auto, Parser(auto)


@dataclass(frozen=True)
class MatcherStats:
    """Figures of one matcher (mask times) and of its shared cache (hits, computed)."""

    masks_requested: int
    masks_computed: int
    cache_hits: int
    mask_p50_us: float | None
    mask_p99_us: float | None
    compile_ms: float


class Matcher:
    """One sequence's position in a grammar, over one vocabulary.

    Example::

        m = Matcher(Grammar.from_regex(r"[0-9]{3}"), vocab)
        mask = m.next_token_mask()      # numpy bool, len == vocab.size
        m.accept_token(token_id)        # False (and no change) when refused
    """

    def __init__(self, grammar: Grammar | CompiledGrammar, vocab=None) -> None:
        if isinstance(grammar, CompiledGrammar):
            compiled = grammar
        else:
            if vocab is None:
                raise MatcherError("Matcher(grammar, vocab) needs a vocabulary")
            compiled = CompiledGrammar.get(grammar, vocab)
        self.compiled = compiled
        self.vocab = compiled.vocab
        self._parser = compiled.parser
        self._masks = compiled.masks
        self._eos = frozenset(int(t) for t in compiled.table.eos_ids)
        self._token_bytes = compiled.table.token_bytes
        self._history: list[State] = [self._parser.initial]
        self._terminated = False
        self._mask_times: list[float] = []

    # -- state ---------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._history[-1]

    def is_accepting(self) -> bool:
        """Whether the text so far is a complete string of the grammar."""
        return self._parser.is_accepting(self.state)

    def is_terminated(self) -> bool:
        """Whether an EOS token has been accepted."""
        return self._terminated

    # -- masks ---------------------------------------------------------------------------
    def next_token_mask(self) -> np.ndarray:
        """Bool array over the vocabulary: True where the token may come next (read-only).

        EOS ids are allowed exactly when the text so far is accepting.
        """
        t0 = time.perf_counter()
        if self._terminated:
            mask = np.zeros(self.compiled.table.size, dtype=bool)
        else:
            with self.compiled.lock:
                mask = self._masks.mask_for(self.state)
        self._mask_times.append(time.perf_counter() - t0)
        return mask

    def fill_next_token_bitmask(self, bitmask: np.ndarray, index: int = 0) -> None:
        """Write the mask into ``bitmask`` (int32 words; 2-D: row ``index``).

        Bit ``t % 32`` of word ``t // 32`` is 1 when token ``t`` is allowed, the layout that
        xgrammar and llguidance use, so the same tensors can be applied by their kernels.
        """
        t0 = time.perf_counter()
        row = bitmask[index] if bitmask.ndim == 2 else bitmask
        if self._terminated:
            row[:] = 0
        else:
            with self.compiled.lock:
                packed = self._masks.packed_for(self.state)
            if row.shape[0] < packed.shape[0]:
                raise MatcherError(
                    f"bitmask row has {row.shape[0]} words, the vocabulary needs {packed.shape[0]}"
                )
            if row.shape[0] == packed.shape[0]:
                row[:] = packed  # one copy: the tail's zeroing below is a second numpy call
            else:
                row[: packed.shape[0]] = packed
                row[packed.shape[0]:] = 0
        self._mask_times.append(time.perf_counter() - t0)

    # -- advancing -----------------------------------------------------------------------
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) when the grammar refuses it."""
        if self._terminated:
            return False
        if token_id in self._eos:
            if self.is_accepting():
                self._terminated = True
                self._history.append(self.state)
                return True
            return False
        if not 0 <= token_id < len(self._token_bytes):
            return False
        data = self._token_bytes[token_id]
        if not data:
            return False
        with self.compiled.lock:
            nxt = self._parser.advance(self.state, data)
        if not nxt:
            return False
        self._history.append(nxt)
        return True

    def accept_tokens(self, token_ids: Iterable[int]) -> bool:
        """Accept tokens in order; stops at (and reports) the first refused one."""
        return all(self.accept_token(t) for t in token_ids)

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw bytes (e.g. forced text); all or nothing. Counts as one step for
        ``rollback``."""
        if self._terminated:
            return False
        with self.compiled.lock:
            nxt = self._parser.advance(self.state, data)
        if not nxt:
            return False
        self._history.append(nxt)
        return True

    def rollback(self, n_tokens: int = 1) -> None:
        """Undo the last ``n_tokens`` accepted tokens (or ``accept_bytes`` calls)."""
        accepted = len(self._history) - 1  # one history entry per accepted step
        if n_tokens < 0 or n_tokens > accepted:
            raise MatcherError(
                f"cannot roll back {n_tokens} token(s): only {accepted} accepted"
            )
        if n_tokens == 0:
            return
        del self._history[len(self._history) - n_tokens:]
        self._terminated = False

    def reset(self) -> None:
        """Back to the start of the grammar."""
        self._history = [self._parser.initial]
        self._terminated = False

    def copy(self) -> Matcher:
        """An independent matcher at the same position (shares the compiled grammar)."""
        other = Matcher.__new__(Matcher)
        other.__dict__.update(self.__dict__)
        other._history = list(self._history)
        other._mask_times = []
        return other

    def forced_bytes(self) -> bytes:
        """The bytes the grammar forces next, whatever the model would say.

        Stops where more than one byte is possible or where the text could also end here.
        """
        if self._terminated:
            return b""
        out = bytearray()
        parser = self._parser
        with self.compiled.lock:
            state = self.state
            while len(out) < MAX_FORCED_BYTES and not parser.is_accepting(state):
                allowed = parser.allowed_bytes(state)
                if len(allowed) != 1:
                    break
                out.append(allowed[0])
                state = parser.step(state, allowed[0])
        return bytes(out)

    # -- figures -------------------------------------------------------------------------
    @property
    def stats(self) -> MatcherStats:
        times = sorted(self._mask_times)
        p50 = p99 = None
        if times:
            p50 = times[len(times) // 2] * 1e6
            p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))] * 1e6
        return MatcherStats(
            masks_requested=len(times),
            masks_computed=self._masks.masks_computed,
            cache_hits=self._masks.cache_hits,
            mask_p50_us=p50,
            mask_p99_us=p99,
            compile_ms=self.compiled.compile_ms,
        )
