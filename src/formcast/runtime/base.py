"""What every model runtime returns, and the protocol the pipeline relies on.

A runtime knows models, not schemas: it takes a prompt and an optional compiled grammar and
returns the text plus the figures that prove what the constraint did (forced tokens, mask time,
clipped probability mass computed from the real logits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

FinishReason = Literal["eos", "length", "stop", "grammar"]


@dataclass
class GenerationResult:
    """One generation's output and measurements.

    ``clipped_mass`` holds, per sampled step, the softmax mass (temperature 1, before masking)
    of the tokens the mask removed; forced (jump-forward) tokens have no entry.
    """

    text: str
    finish_reason: FinishReason
    tokens_generated: int = 0
    tokens_forced: int = 0
    prompt_tokens: int = 0
    model_seconds: float = 0.0
    mask_seconds: float = 0.0
    total_seconds: float = 0.0
    clipped_mass: list[float] = field(default_factory=list)
    mask_p50_us: float | None = None
    mask_p99_us: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def clipped_mass_avg(self) -> float | None:
        return sum(self.clipped_mass) / len(self.clipped_mass) if self.clipped_mass else None

    @property
    def total_tokens(self) -> int:
        return self.tokens_generated + self.tokens_forced

    @property
    def tokens_per_second(self) -> float:
        return self.total_tokens / self.total_seconds if self.total_seconds > 0 else 0.0


@runtime_checkable
class Runtime(Protocol):
    """A model backend that can generate under a grammar constraint."""

    name: str

    def generate(self, prompt: str, *, grammar: Any = None, max_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 on_token: Callable[[int], None] | None = None) -> GenerationResult:
        """Generate from a fully formatted prompt (chat template already applied).

        ``grammar`` is a ``formcast.grammar.ir.Grammar`` (compiled and cached per vocabulary by
        the runtime) or ``None`` for unconstrained generation. ``on_token`` (optional) is
        called with the number of tokens produced so far, for progress displays.
        """
        ...

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        """Apply the model's chat template to ``[{"role": ..., "content": ...}]``."""
        ...
