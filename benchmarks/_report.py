"""Markdown tables of the results: one per section, each figure with its ratio to the baseline."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from _measure import RunResult
from _workloads import SECTION_ORDER, SECTION_TITLES

Metric = Callable[[RunResult], float | None]

METRICS: list[tuple[str, Metric]] = [
    ("compile ms p50", lambda r: r.compile_p50_ms),
    ("cold mask p50 µs", lambda r: r.cold.percentile_us(50) if r.cold else None),
    ("cold mask p99 µs", lambda r: r.cold.percentile_us(99) if r.cold else None),
    ("warm mask p50 µs", lambda r: r.warm.percentile_us(50) if r.warm else None),
    ("warm mask p99 µs", lambda r: r.warm.percentile_us(99) if r.warm else None),
]


def fmt(x: float | None) -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return ""
    return f" ({r:.2f}×)" if r < 10 else f" ({r:.0f}×)"


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def section_table(results: list[RunResult], engines: list[str], baseline: str) -> list[str]:
    """Rows for one section, then one median row per engine."""
    head = ["grammar", "engine", *(name for name, _ in METRICS), "steps", f"same mask as {baseline}", "problems"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = list(dict.fromkeys(r.workload for r in results))
    by_key = {(r.workload, r.engine): r for r in results}
    figures: dict[str, list[list[float]]] = {e: [[] for _ in METRICS] for e in engines}
    ratios: dict[str, list[list[float]]] = {e: [[] for _ in METRICS] for e in engines}
    for name in names:
        base = by_key.get((name, baseline))
        for engine in engines:
            r = by_key.get((name, engine))
            if r is None:
                continue
            if r.na_reason:
                cells = [name, engine, f"n/a ({r.na_reason})", *["–"] * (len(METRICS) - 1), "–", "–", ""]
                lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
                continue
            cells = [name, engine]
            for i, (_, metric) in enumerate(METRICS):
                value = metric(r)
                rel = ratio(value, metric(base)) if base is not None and engine != baseline else None
                if value is not None:
                    figures[engine][i].append(value)
                if rel is not None:
                    ratios[engine][i].append(rel)
                cells.append(fmt(value) + fmt_ratio(rel))
            cells.append(str(r.steps) if r.warm else "–")
            cells.append("" if engine == baseline else
                         (f"{100 * r.agreement:.0f}%" if r.agreement is not None else "–"))
            cells.append(f"{len(r.problems)}" if r.problems else "")
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    for engine in engines:
        if not any(figures[engine]):
            continue
        cells = ["**median**", engine]
        for i in range(len(METRICS)):
            rel = _median(ratios[engine][i]) if engine != baseline else None
            cells.append(fmt(_median(figures[engine][i])) + fmt_ratio(rel))
        cells += ["", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def targets(results: list[RunResult], subject: str, baseline: str) -> list[str]:
    """How many grammars meet the issues' targets for ``subject`` against ``baseline``."""
    by_key = {(r.workload, r.engine): r for r in results}
    lines: list[str] = []
    groups = [
        ("JSON, GBNF and regex grammars", ("json", "gbnf", "regex"), "compile < 20 ms"),
        ("JSON Schemas", ("schema",), f"compile p50 ≤ {baseline}"),
    ]
    for title, sections, compile_rule in groups:
        names = list(dict.fromkeys(r.workload for r in results if r.section in sections))
        if not names:
            continue
        counts = {"compile": 0, "cold p50": 0, "cold p99": 0, "warm p50": 0, "warm p99": 0}
        measured = 0
        for name in names:
            r, base = by_key.get((name, subject)), by_key.get((name, baseline))
            if r is None or base is None or r.na_reason or base.na_reason:
                continue
            measured += 1
            c, bc = r.compile_p50_ms, base.compile_p50_ms
            if c is not None and (c < 20.0 if "20 ms" in compile_rule else bc is not None and c <= bc):
                counts["compile"] += 1
            for key, (_, metric) in zip(list(counts)[1:], METRICS[1:], strict=True):
                rel = ratio(metric(r), metric(base))
                if rel is not None and rel <= 3.0:
                    counts[key] += 1
        total = len(names)
        lines.append(
            f"- {title} ({measured}/{total} measured on both): {compile_rule}: "
            f"{counts['compile']}/{total}; mask within 3× of {baseline} — "
            f"cold p50 {counts['cold p50']}/{total}, cold p99 {counts['cold p99']}/{total}, "
            f"warm p50 {counts['warm p50']}/{total}, warm p99 {counts['warm p99']}/{total}"
        )
    return lines


def render(results: list[RunResult], engines: list[str], baseline: str) -> list[str]:
    """All section tables, the problem list and the target check."""
    out: list[str] = []
    for section in SECTION_ORDER:
        part = [r for r in results if r.section == section]
        if not part:
            continue
        out += ["", f"### {SECTION_TITLES[section]}", ""]
        out += section_table(part, engines, baseline)
    problems = [(r, p) for r in results for p in r.problems[:5]]
    if problems:
        out += ["", "### Problems (a sample an engine rejects is a bug in the sample or the engine)", ""]
        out += [f"- {r.workload} / {r.engine}: {p}" for r, p in problems]
    if "formcast" in engines and baseline in engines:
        out += ["", f"### Targets (formcast against {baseline})", ""]
        out += targets(results, "formcast", baseline)
    return out
