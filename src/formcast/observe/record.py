"""One structured record per generation, and per model output within it.

The record is the unit of observability: the metrics registry aggregates it, and it is also
written as one JSON log line (logger ``formcast.generation``), so a failure can be traced back
to its schema, attempts, repairs and errors without re-running anything.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

LOGGER_NAME = "formcast.generation"


@dataclass(frozen=True)
class OutputRecord:
    """The checks one model output went through (one per attempt).

    ``format_as_is``: parsed without any repair and valid against the schema (first-pass format).
    ``format_after_repair``: valid against the schema after a faithful repair.
    ``semantic_ok``: valid against the schema and every semantic rule (after repair).
    """

    parsed_as_is: bool
    repaired: bool
    format_as_is: bool
    format_after_repair: bool
    semantic_ok: bool
    tokens: int = 0
    seconds: float = 0.0
    finish_reason: str | None = None
    repair_kinds: tuple[str, ...] = ()
    error_kinds: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    clipped_mass_avg: float | None = None
    clipped_steps: int = 0


@dataclass(frozen=True)
class GenerationRecord:
    """Everything measured about one ``generate`` call."""

    schema_hash: str
    model: str
    constrained: bool
    layer_used: str | None
    valid: bool
    degraded: bool
    confidence: float
    attempts: int
    tokens: int
    seconds: float
    budget_exhausted: str | None = None
    schema_compile_ms: float | None = None
    grammar_cache_hit: bool | None = None
    mask_p50_us: float | None = None
    mask_p99_us: float | None = None
    outputs: tuple[OutputRecord, ...] = field(default=())

    @property
    def clipped_mass_avg(self) -> float | None:
        """Average clipped mass over every sampled step of every attempt."""
        steps = sum(o.clipped_steps for o in self.outputs if o.clipped_mass_avg is not None)
        if not steps:
            return None
        return sum(o.clipped_mass_avg * o.clipped_steps for o in self.outputs
                   if o.clipped_mass_avg is not None) / steps

    @property
    def format_first_pass(self) -> bool:
        """Did the first output pass the schema without any repair?"""
        return bool(self.outputs) and self.outputs[0].format_as_is

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["clipped_mass_avg"] = self.clipped_mass_avg
        data["format_first_pass"] = self.format_first_pass
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


def log_record(record: GenerationRecord, logger: logging.Logger | None = None,
               level: int = logging.INFO) -> None:
    """Write ``record`` as one JSON line; failures are logged at WARNING."""
    logger = logger or logging.getLogger(LOGGER_NAME)
    if not record.valid:
        level = max(level, logging.WARNING)
    if logger.isEnabledFor(level):
        logger.log(level, record.to_json())
