"""Observability: a metrics registry (JSON and Prometheus text) and per-generation records."""

from formcast.observe.metrics import Counter, Gauge, Histogram, MetricsRegistry
from formcast.observe.quality import PipelineMetrics, default_metrics
from formcast.observe.record import GenerationRecord, OutputRecord, log_record

__all__ = [
    "Counter", "Gauge", "GenerationRecord", "Histogram", "MetricsRegistry", "OutputRecord",
    "PipelineMetrics", "default_metrics", "log_record",
]
