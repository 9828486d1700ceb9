"""A slow, obviously correct recognizer for the grammar IR: the test oracle for the engine.

The grammar is flattened into a plain context-free grammar over single-byte terminals (each
terminal a set of byte values) and run through a textbook Earley recognizer, with the
Aycock-Horspool fix for nullable rules. Earley handles every context-free grammar, left
recursion and ambiguity included, so nothing about the engine's own tricks leaks in here.

``CharSet`` becomes the alternatives of ``ir.utf8_byte_sequences``; ``Repeat`` becomes
``min`` copies of its item followed by either a left-recursive tail (unbounded) or a chain of
nested optionals (bounded); unproductive rules (``Choice(())``, empty byte sets and anything
that needs them) are dropped first, so that a live Earley item always has a completion and the
``prefix`` answer is exact.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from formcast.grammar.ir import Expr, Grammar, utf8_byte_sequences
from formcast.grammar.ir_kinds import BYTE_SET, CHAR_SET, CHOICE, LITERAL, REF, REPEAT, SEQ

__all__ = ["recognizes"]


def recognizes(grammar: Grammar, data: bytes, *, prefix: bool = False) -> bool:
    """Whether ``data`` is in the language of ``grammar`` (starting from ``grammar.start``).

    With ``prefix=True``: whether ``data`` can be extended to a string in the language (the
    empty string is a prefix of every non-empty language).
    """
    cfg = _compile(grammar)
    if not cfg.productive_start:
        return False
    return _earley(cfg, bytes(data), prefix)


# ----------------------------------------------------------------------------- flat CFG
#
# Symbols are ints: a nonterminal is >= 0, a terminal is ``~index`` into ``terminals`` (a
# 256-entry table of 0/1 bytes). Production 0 is the augmented start ``S' -> start``.


@dataclass(frozen=True)
class _CFG:
    lhs: tuple[int, ...]  # production -> nonterminal
    rhs: tuple[tuple[int, ...], ...]  # production -> symbols
    by_lhs: tuple[tuple[int, ...], ...]  # nonterminal -> production ids
    nullable: tuple[bool, ...]  # nonterminal -> derives the empty string
    terminals: tuple[bytes, ...]
    productive_start: bool


class _Builder:
    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.prods: list[tuple[int, tuple[int, ...]]] = []
        self.n_nonterminals = 0
        self.terminals: list[bytes] = []
        self._terminal_ids: dict[bytes, int] = {}
        self._expr_ids: dict[Expr, int] = {}
        self._rule_ids: dict[str, int] = {}

    def nonterminal(self) -> int:
        self.n_nonterminals += 1
        return self.n_nonterminals - 1

    def terminal(self, ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> int:
        table = bytearray(256)
        for lo, hi in ranges:
            for b in range(max(lo, 0), min(hi, 255) + 1):
                table[b] = 1
        key = bytes(table)
        if key not in self._terminal_ids:
            self._terminal_ids[key] = len(self.terminals)
            self.terminals.append(key)
        return ~self._terminal_ids[key]

    def rule(self, name: str) -> int:
        if name not in self._rule_ids:
            nt = self._rule_ids[name] = self.nonterminal()
            self.prods.append((nt, self.symbols(self.grammar.rules[name])))
        return self._rule_ids[name]

    def symbols(self, expr: Expr) -> tuple[int, ...]:
        """The symbol string that derives exactly the strings of ``expr``."""
        if isinstance(expr, LITERAL):
            return tuple(self.terminal([(b, b)]) for b in expr.data)
        if isinstance(expr, BYTE_SET):
            return (self.terminal(expr.ranges),)
        if isinstance(expr, SEQ):
            return tuple(s for item in expr.items for s in self.symbols(item))
        if isinstance(expr, REF):
            return (self.rule(expr.name),)
        return (self.expr_nonterminal(expr),)

    def expr_nonterminal(self, expr: Expr) -> int:
        if expr in self._expr_ids:
            return self._expr_ids[expr]
        nt = self._expr_ids[expr] = self.nonterminal()
        if isinstance(expr, CHOICE):
            for item in expr.items:
                self.prods.append((nt, self.symbols(item)))
        elif isinstance(expr, CHAR_SET):
            for lo, hi in expr.codepoint_ranges():
                for byte_ranges in utf8_byte_sequences(lo, hi):
                    self.prods.append((nt, tuple(self.terminal([r]) for r in byte_ranges)))
        elif isinstance(expr, REPEAT):
            once = self.symbols(expr.item)
            required = once * expr.min
            if expr.max is None:  # tail -> tail item | ε   (left recursion suits Earley)
                tail = self.nonterminal()
                self.prods.append((tail, (tail, *once)))
                self.prods.append((tail, ()))
                self.prods.append((nt, (*required, tail)))
            else:  # opt_k -> item opt_{k-1} | ε
                rest: tuple[int, ...] = ()
                for _ in range(expr.max - expr.min):
                    opt = self.nonterminal()
                    self.prods.append((opt, (*once, *rest)))
                    self.prods.append((opt, ()))
                    rest = (opt,)
                self.prods.append((nt, (*required, *rest)))
        else:
            raise TypeError(f"not an IR expression: {expr!r}")
        return nt


@lru_cache(maxsize=64)
def _compile(grammar: Grammar) -> _CFG:
    b = _Builder(grammar)
    start = b.nonterminal()  # S'
    b.prods.append((start, ()))  # placeholder, patched below so that it is production 0
    b.prods[0] = (start, (b.rule(grammar.start),))

    empty_terminals = {~i for i, t in enumerate(b.terminals) if not any(t)}
    productive = _fixpoint(b, lambda sym, known: sym in known if sym >= 0
                           else sym not in empty_terminals)
    prods = [(lhs, rhs) for lhs, rhs in b.prods
             if lhs in productive and all(s in productive if s >= 0 else s not in empty_terminals
                                          for s in rhs)]
    if not prods or prods[0][0] != start:  # the start itself is unproductive
        return _CFG((), (), (), (), (), False)
    nullable = _fixpoint(b, lambda sym, known: sym >= 0 and sym in known, prods)
    by_lhs: list[list[int]] = [[] for _ in range(b.n_nonterminals)]
    for i, (lhs, _) in enumerate(prods):
        by_lhs[lhs].append(i)
    return _CFG(
        lhs=tuple(lhs for lhs, _ in prods),
        rhs=tuple(rhs for _, rhs in prods),
        by_lhs=tuple(tuple(p) for p in by_lhs),
        nullable=tuple(nt in nullable for nt in range(b.n_nonterminals)),
        terminals=tuple(b.terminals),
        productive_start=True,
    )


def _fixpoint(b: _Builder, ok, prods=None) -> set[int]:
    """Nonterminals with a production whose every symbol satisfies ``ok(symbol, known)``."""
    prods = b.prods if prods is None else prods
    known: set[int] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in prods:
            if lhs not in known and all(ok(s, known) for s in rhs):
                known.add(lhs)
                changed = True
    return known


# ----------------------------------------------------------------------------- Earley


def _earley(cfg: _CFG, data: bytes, prefix: bool) -> bool:
    n = len(data)
    rhs, lhs, by_lhs, nullable, terminals = cfg.rhs, cfg.lhs, cfg.by_lhs, cfg.nullable, cfg.terminals
    # An item is (production, dot, origin). waiting[i][A] = items of set i whose dot is before A.
    current: set[tuple[int, int, int]] = {(0, 0, 0)}
    waiting: list[dict[int, list[tuple[int, int, int]]]] = []
    for i in range(n + 1):
        waiting.append(defaultdict(list))
        here = waiting[i]
        predicted: set[int] = set()
        agenda = list(current)
        nxt: set[tuple[int, int, int]] = set()
        byte = data[i] if i < n else -1
        while agenda:
            item = agenda.pop()
            prod, dot, origin = item
            body = rhs[prod]
            if dot == len(body):  # complete: advance everything in `origin` waiting on lhs
                for p, d, o in waiting[origin].get(lhs[prod], ()):
                    new = (p, d + 1, o)
                    if new not in current:
                        current.add(new)
                        agenda.append(new)
                continue
            sym = body[dot]
            if sym < 0:  # terminal: scan
                if byte >= 0 and terminals[~sym][byte]:
                    nxt.add((prod, dot + 1, origin))
                continue
            here[sym].append(item)
            if sym not in predicted:
                predicted.add(sym)
                for p in by_lhs[sym]:
                    new = (p, 0, i)
                    if new not in current:
                        current.add(new)
                        agenda.append(new)
            if nullable[sym]:  # Aycock-Horspool: step over a nullable nonterminal at once
                new = (prod, dot + 1, origin)
                if new not in current:
                    current.add(new)
                    agenda.append(new)
        if i == n:
            break
        if not nxt:
            return False
        current = nxt
    if prefix:
        return True
    return (0, 1, 0) in current
