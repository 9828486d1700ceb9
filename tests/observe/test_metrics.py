"""The metrics registry: counts, histograms and quantiles, JSON and Prometheus exposition."""

from __future__ import annotations

import json
import math

import pytest

from formcast.observe.metrics import Histogram, MetricsRegistry


def test_counter_gauge_and_histogram_values() -> None:
    reg = MetricsRegistry()
    c = reg.counter("requests", "handled requests")
    c.inc()
    c.inc(2)
    assert c.value == 3
    with pytest.raises(ValueError):
        c.inc(-1)
    g = reg.gauge("ratio", "a share")
    g.set(0.25)
    h = reg.histogram("latency_ms", "time", buckets=(1, 10, 100))
    for v in (0.5, 5, 5, 50, 500):
        h.observe(v)
    assert h.count == 5 and h.sum == 560.5
    assert h.cumulative() == [(1, 1), (10, 3), (100, 4), (math.inf, 5)]
    assert reg.counter("requests") is c  # same name, same metric


def test_quantiles_use_nearest_rank() -> None:
    h = Histogram("x", "", buckets=(1,))
    for v in range(1, 101):
        h.observe(v)
    assert h.quantile(0.5) == 50 and h.quantile(0.99) == 99 and h.quantile(1.0) == 100
    assert Histogram("y", "").quantile(0.5) is None


def test_prometheus_text_exposition() -> None:
    reg = MetricsRegistry(prefix="app_")
    reg.counter("outputs", "model outputs").inc(4)
    reg.gauge("repair_ratio", "share\nrepaired").set(0.5)
    h = reg.histogram("attempts", "attempts per call", buckets=(1, 2, 3))
    for v in (1, 1, 3):
        h.observe(v)
    text = reg.to_prometheus()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert "# TYPE app_outputs_total counter" in lines and "app_outputs_total 4" in lines
    assert "# HELP app_repair_ratio share\\nrepaired" in lines and "app_repair_ratio 0.5" in lines
    assert [ln for ln in lines if ln.startswith("app_attempts")] == [
        'app_attempts_bucket{le="1"} 2', 'app_attempts_bucket{le="2"} 2',
        'app_attempts_bucket{le="3"} 3', 'app_attempts_bucket{le="+Inf"} 3',
        "app_attempts_sum 5", "app_attempts_count 3"]


def test_json_export_round_trips() -> None:
    reg = MetricsRegistry()
    reg.counter("a", "").inc()
    reg.histogram("b", "", buckets=(1,)).observe(0.5)
    data = json.loads(reg.to_json())
    assert data["formcast_a"] == {"type": "counter", "help": "", "value": 1.0}
    assert data["formcast_b"]["buckets"] == {"1": 1, "+Inf": 1}
    assert data["formcast_b"]["p50"] == 0.5


def test_names_are_checked_and_kinds_cannot_clash() -> None:
    reg = MetricsRegistry()
    with pytest.raises(ValueError):
        reg.counter("bad name")
    reg.counter("x")
    with pytest.raises(ValueError):
        reg.histogram("x")
