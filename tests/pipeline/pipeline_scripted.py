"""Scripted stand-ins for a model, so layer 2 and 3 behaviour can be asserted exactly.

They do not pretend to be models: each returns the next output of a fixed script and records
what the pipeline sent it (prompt, max_tokens, grammar), which is what the tests check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from formcast.runtime.base import GenerationResult


@dataclass
class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it and is recorded."""

    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class ScriptedGenerator:
    """A ``fn(prompt, max_tokens)`` generator returning scripted outputs in order.

    Each script entry is text, or ``(text, tokens)`` to report an exact token count, or an
    exception to raise. ``seconds`` advances ``clock`` per call.
    """

    script: list[Any]
    clock: FakeClock | None = None
    seconds: float = 0.0
    prompts: list[str] = field(default_factory=list)
    max_tokens: list[int] = field(default_factory=list)

    def __call__(self, prompt: str, max_tokens: int) -> str | GenerationResult:
        self.prompts.append(prompt)
        self.max_tokens.append(max_tokens)
        if self.clock is not None:
            self.clock.now += self.seconds
        if not self.script:
            raise AssertionError("the pipeline asked for more outputs than scripted")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, tuple):
            text, tokens = item
            finish = "length" if tokens >= max_tokens else "eos"
            return GenerationResult(text=text, finish_reason=finish,
                                    tokens_generated=min(tokens, max_tokens))
        return item


@dataclass
class ScriptedRuntime:
    """A ``Runtime`` with a fixed script; records the grammar object it was given each time."""

    script: list[Any]
    name: str = "scripted"
    prompts: list[str] = field(default_factory=list)
    grammars: list[Any] = field(default_factory=list)
    max_tokens: list[int] = field(default_factory=list)

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"

    def generate(self, prompt: str, *, grammar: Any = None, max_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 ) -> GenerationResult:
        self.prompts.append(prompt)
        self.grammars.append(grammar)
        self.max_tokens.append(max_tokens)
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, GenerationResult):
            return item
        text = item
        return GenerationResult(text=text, finish_reason="eos",
                                tokens_generated=max(1, len(text) // 4),
                                clipped_mass=[0.1, 0.3] if grammar is not None else [])
