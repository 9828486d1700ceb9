"""A small metrics registry: counters, gauges and histograms, exported as JSON and as the
Prometheus text exposition format (version 0.0.4).

Why not ``prometheus_client``: one less dependency for a library, and the JSON view needs
quantiles (mask p50/p99) that a bucketed histogram cannot give exactly, so histograms here also
keep a bounded window of raw observations.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")

DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def _check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"invalid metric name {name!r} (Prometheus names match "
                         "[a-zA-Z_:][a-zA-Z0-9_:]*)")
    return name


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class Counter:
    """A count that only goes up."""

    kind = "counter"

    def __init__(self, name: str, help: str) -> None:  # noqa: A002 - Prometheus' own word
        self.name, self.help = _check_name(name), help
        self._value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"counter {self.name} cannot decrease (got {amount})")
        with self._lock:
            self._value += amount

    @property
    def value(self) -> float:
        return self._value

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "help": self.help, "value": self._value}

    def exposition(self) -> list[str]:
        name = self.name if self.name.endswith("_total") else self.name + "_total"
        return [f"# HELP {name} {_escape_help(self.help)}", f"# TYPE {name} counter",
                f"{name} {_fmt(self._value)}"]


class Gauge:
    """A value that is set (a ratio, a size)."""

    kind = "gauge"

    def __init__(self, name: str, help: str) -> None:  # noqa: A002
        self.name, self.help = _check_name(name), help
        self._value: float | None = None

    def set(self, value: float | None) -> None:
        self._value = None if value is None else float(value)

    @property
    def value(self) -> float | None:
        return self._value

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "help": self.help, "value": self._value}

    def exposition(self) -> list[str]:
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} gauge"]
        if self._value is not None:
            lines.append(f"{self.name} {_fmt(self._value)}")
        return lines


class Histogram:
    """Bucketed observations (for Prometheus) plus a window of recent raw values (for quantiles)."""

    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Sequence[float] = DEFAULT_BUCKETS,  # noqa: A002
                 window: int = 10_000) -> None:
        self.name, self.help = _check_name(name), help
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.buckets = tuple(bounds)
        self._counts = [0] * len(self.buckets)
        self._sum = 0.0
        self._count = 0
        self._recent: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        value = float(value)
        with self._lock:
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    self._counts[i] += 1
                    break
            self._sum += value
            self._count += 1
            self._recent.append(value)

    @property
    def count(self) -> int:
        return self._count

    @property
    def sum(self) -> float:
        return self._sum

    @property
    def mean(self) -> float | None:
        return self._sum / self._count if self._count else None

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (nearest rank) of the recent window, or None when empty."""
        with self._lock:
            values = sorted(self._recent)
        if not values:
            return None
        rank = max(1, math.ceil(q * len(values)))
        return values[rank - 1]

    def cumulative(self) -> list[tuple[float, int]]:
        total, out = 0, []
        for bound, n in zip(self.buckets, self._counts, strict=True):
            total += n
            out.append((bound, total))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "help": self.help, "count": self._count, "sum": self._sum,
                "buckets": {_fmt(b): n for b, n in self.cumulative()},
                "p50": self.quantile(0.5), "p99": self.quantile(0.99)}

    def exposition(self) -> list[str]:
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} histogram"]
        lines += [f'{self.name}_bucket{{le="{_fmt(b)}"}} {n}' for b, n in self.cumulative()]
        lines += [f"{self.name}_sum {_fmt(self._sum)}", f"{self.name}_count {self._count}"]
        return lines


Metric = Counter | Gauge | Histogram


class MetricsRegistry:
    """Named metrics, created on first use and exported together."""

    def __init__(self, prefix: str = "formcast_") -> None:
        self.prefix = prefix
        self._metrics: dict[str, Metric] = {}
        self._lock = threading.Lock()

    def _get(self, cls: type, name: str, help: str, **options: Any) -> Any:  # noqa: A002
        full = self.prefix + name
        with self._lock:
            metric = self._metrics.get(full)
            if metric is None:
                metric = cls(full, help, **options)
                self._metrics[full] = metric
            elif not isinstance(metric, cls):
                raise ValueError(f"metric {full} is a {metric.kind}, not a {cls.kind}")
            return metric

    def counter(self, name: str, help: str = "") -> Counter:  # noqa: A002
        return self._get(Counter, name, help)

    def gauge(self, name: str, help: str = "") -> Gauge:  # noqa: A002
        return self._get(Gauge, name, help)

    def histogram(self, name: str, help: str = "",  # noqa: A002
                  buckets: Iterable[float] = DEFAULT_BUCKETS) -> Histogram:
        return self._get(Histogram, name, help, buckets=tuple(buckets))

    def get(self, name: str) -> Metric | None:
        return self._metrics.get(self.prefix + name)

    def __iter__(self):  # noqa: ANN204
        return iter(list(self._metrics.values()))

    def to_dict(self) -> dict[str, Any]:
        return {m.name: m.to_dict() for m in self}

    def to_json(self, **dumps: Any) -> str:
        return json.dumps(self.to_dict(), **dumps)

    def to_prometheus(self) -> str:
        """The Prometheus text exposition of every metric, ending with a newline."""
        lines: list[str] = []
        for metric in self:
            lines += metric.exposition()
        return "\n".join(lines) + "\n"
