"""The quality and cost figures of chapter 13.4, aggregated from generation records.

Rates are kept apart on purpose (chapter 12): ``format_first_pass`` is the health of layer 1,
``repair_rate`` the early warning that layer 2 is propping it up, ``semantic_pass_rate`` what
the business sees. The three output rates are per model output (each attempt counts), the
attempt histogram and degraded count per generation.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from formcast.observe.metrics import MetricsRegistry
from formcast.observe.record import GenerationRecord

_ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
_MS_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000)
_US_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 25000)
_MASS_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1)


class PipelineMetrics:
    """Feeds ``GenerationRecord``s into a ``MetricsRegistry`` and reads the rates back."""

    def __init__(self, registry: MetricsRegistry | None = None) -> None:
        self.registry = registry or MetricsRegistry()
        r = self.registry
        self.generations = r.counter("generations", "generate() calls finished or failed")
        self.valid = r.counter("valid", "generations that returned a valid value")
        self.degraded = r.counter("degraded", "generations answered by salvage (layer 3)")
        self.exhausted = r.counter("budget_exhausted", "generations that ran out of a budget")
        self.outputs = r.counter("outputs", "model outputs checked (one per attempt)")
        self.format_as_is = r.counter("outputs_format_first_pass",
                                      "outputs valid against the schema with no repair")
        self.repaired = r.counter("outputs_repaired", "outputs that needed parse-repair")
        self.format_after_repair = r.counter("outputs_format_after_repair",
                                             "outputs valid against the schema after repair")
        self.semantic_ok = r.counter("outputs_semantic_pass",
                                     "outputs valid against the schema and the semantic rules")
        self.cache_hits = r.counter("grammar_cache_hits", "schema compiles served by the cache")
        self.cache_lookups = r.counter("grammar_cache_lookups", "schema compile requests")
        self.tokens = r.counter("tokens", "tokens generated over all attempts")
        self.attempts = r.histogram("attempts", "attempts per generation", _ATTEMPT_BUCKETS)
        self.compile_ms = r.histogram("schema_compile_ms", "schema to grammar time (ms)",
                                      _MS_BUCKETS)
        self.clipped_mass = r.histogram("clipped_mass", "average clipped probability mass "
                                        "per constrained output", _MASS_BUCKETS)
        self.mask_p50 = r.histogram("mask_p50_us", "per-generation median mask time (us)",
                                    _US_BUCKETS)
        self.mask_p99 = r.histogram("mask_p99_us", "per-generation p99 mask time (us)",
                                    _US_BUCKETS)
        self.latency = r.histogram("generation_seconds", "generate() wall time (s)")
        self._ratios = {
            name: r.gauge(name + "_ratio", text) for name, text in (
                ("format_first_pass", "share of outputs valid against the schema as is"),
                ("post_repair_pass", "share of outputs valid against the schema after repair"),
                ("repair", "share of outputs that needed repair"),
                ("semantic_pass", "share of outputs that also pass the semantic rules"),
                ("grammar_cache_hit", "share of schema compiles served by the cache"),
            )}
        self._layers: dict[str, Any] = {}

    def observe(self, record: GenerationRecord) -> None:
        """Add one generation's figures."""
        self.generations.inc()
        if record.valid:
            self.valid.inc()
        if record.degraded:
            self.degraded.inc()
        if record.budget_exhausted:
            self.exhausted.inc()
        if record.layer_used:
            layer = self._layers.get(record.layer_used)
            if layer is None:
                layer = self.registry.counter(f"layer_{record.layer_used}",
                                              f"generations answered by layer '{record.layer_used}'")
                self._layers[record.layer_used] = layer
            layer.inc()
        self.attempts.observe(record.attempts)
        self.tokens.inc(record.tokens)
        self.latency.observe(record.seconds)
        for out in record.outputs:
            self.outputs.inc()
            self.format_as_is.inc(out.format_as_is)
            self.repaired.inc(out.repaired)
            self.format_after_repair.inc(out.format_after_repair)
            self.semantic_ok.inc(out.semantic_ok)
            if out.clipped_mass_avg is not None:
                self.clipped_mass.observe(out.clipped_mass_avg)
        if record.grammar_cache_hit is not None:
            self.cache_lookups.inc()
            self.cache_hits.inc(record.grammar_cache_hit)
        if record.schema_compile_ms is not None:
            self.compile_ms.observe(record.schema_compile_ms)
        if record.mask_p50_us is not None:
            self.mask_p50.observe(record.mask_p50_us)
        if record.mask_p99_us is not None:
            self.mask_p99.observe(record.mask_p99_us)
        self._update_ratios()

    def _update_ratios(self) -> None:
        for name, value in self.rates().items():
            self._ratios[name].set(value)

    def rates(self) -> dict[str, float | None]:
        outputs = self.outputs.value
        lookups = self.cache_lookups.value

        def share(counter: Any, total: float) -> float | None:
            return counter.value / total if total else None

        return {
            "format_first_pass": share(self.format_as_is, outputs),
            "post_repair_pass": share(self.format_after_repair, outputs),
            "repair": share(self.repaired, outputs),
            "semantic_pass": share(self.semantic_ok, outputs),
            "grammar_cache_hit": share(self.cache_hits, lookups),
        }

    def summary(self) -> dict[str, Any]:
        """The chapter 13.4 fields, by name, as plain JSON values."""
        rates = self.rates()
        return {
            "generations": int(self.generations.value),
            "outputs": int(self.outputs.value),
            "format_first_pass": rates["format_first_pass"],
            "post_repair_pass": rates["post_repair_pass"],
            "repair_rate": rates["repair"],
            "semantic_pass_rate": rates["semantic_pass"],
            "valid": int(self.valid.value),
            "degraded": int(self.degraded.value),
            "budget_exhausted": int(self.exhausted.value),
            "clipped_mass_avg": self.clipped_mass.mean,
            "schema_compile_ms": {"avg": self.compile_ms.mean, "p99": self.compile_ms.quantile(0.99)},
            "grammar_cache_hit_rate": rates["grammar_cache_hit"],
            "mask_p50_us": self.mask_p50.quantile(0.5),
            "mask_p99_us": self.mask_p99.quantile(0.99),
            "attempts_histogram": _attempt_counts(self.attempts),
            "layers": {name: int(c.value) for name, c in self._layers.items()},
            "tokens": int(self.tokens.value),
        }

    def to_json(self, **dumps: Any) -> str:
        return json.dumps({"summary": self.summary(), "metrics": self.registry.to_dict()}, **dumps)

    def to_prometheus(self) -> str:
        return self.registry.to_prometheus()


def _attempt_counts(hist: Any) -> dict[str, int]:
    """Per-bucket (not cumulative) counts: how many generations took 1, 2, 3... attempts."""
    out: dict[str, int] = {}
    previous = 0
    for bound, cumulative in hist.cumulative():
        label = "+Inf" if bound == float("inf") else str(int(bound))
        if cumulative - previous:
            out[label] = cumulative - previous
        previous = cumulative
    return out


_DEFAULT: PipelineMetrics | None = None
_DEFAULT_LOCK = threading.Lock()


def default_metrics() -> PipelineMetrics:
    """The process-wide metrics that ``formcast.generate`` records into."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = PipelineMetrics()
        return _DEFAULT
