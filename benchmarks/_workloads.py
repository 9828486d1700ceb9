"""Benchmark workloads: a grammar spec plus real sample outputs, loaded from ``grammars/``.

Layout: ``grammars/<section>/<stem>.<kind>`` holds one grammar (``.gbnf``, ``.regex`` or
``.schema.json``) and ``grammars/<section>/<stem>.samples.txt`` the texts in its language. Two
grammars of one section with the same stem share the samples file (the JSON GBNF grammar and the
``{}`` schema do). In a samples file, samples are separated by lines holding only ``%%``; lines
starting with ``%% `` are comments; the newline before a separator (or the end of the file) is
not part of the sample, so a sample that must end with a newline is followed by an empty line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GRAMMARS_DIR = Path(__file__).resolve().parent / "grammars"

SECTION_TITLES = {
    "json": "JSON (generic)",
    "gbnf": "GBNF grammars",
    "regex": "Regular expressions",
    "schema": "JSON Schemas (realistic)",
}
SECTION_ORDER = list(SECTION_TITLES)

KIND_SUFFIXES = {".gbnf": "gbnf", ".regex": "regex", ".schema.json": "schema"}


@dataclass
class Workload:
    """One grammar and the sample outputs it is measured on."""

    section: str
    name: str  # file name, e.g. "invoice.schema.json"
    kind: str  # "gbnf" | "regex" | "schema"
    spec: Any  # GBNF text, regex pattern, or parsed JSON Schema
    samples: list[str]
    tokens: list[list[int]] = field(default_factory=list)  # filled by tokenize()


def parse_samples(text: str) -> list[str]:
    """Split a samples file into its samples (see the module docstring for the format)."""
    lines = [ln for ln in text.split("\n") if not ln.startswith("%% ")]
    samples: list[str] = []
    current: list[str] = []
    for line in lines:
        if line == "%%":
            samples.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current and current != [""]:
        last = "\n".join(current)
        # The file's final newline belongs to the format, not to the sample.
        samples.append(last[:-1] if last.endswith("\n") else last)
    return samples


def _kind_of(path: Path) -> tuple[str, str] | None:
    for suffix, kind in KIND_SUFFIXES.items():
        if path.name.endswith(suffix):
            return kind, path.name[: -len(suffix)]
    return None


def load_workloads(root: Path = GRAMMARS_DIR, only: list[str] | None = None) -> list[Workload]:
    """Every grammar under ``root`` with its samples, in section order then by name."""
    workloads: list[Workload] = []
    for section in SECTION_ORDER:
        folder = root / section
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            found = _kind_of(path)
            if found is None:
                continue
            kind, stem = found
            if only and not any(sub in path.name for sub in only):
                continue
            samples_path = folder / f"{stem}.samples.txt"
            if not samples_path.is_file():
                raise FileNotFoundError(f"{path}: no samples file {samples_path.name}")
            raw = path.read_text(encoding="utf-8")
            if kind == "schema":
                spec: Any = json.loads(raw)
            elif kind == "regex":
                spec = raw.rstrip("\n")
            else:
                spec = raw
            samples = parse_samples(samples_path.read_text(encoding="utf-8"))
            workloads.append(Workload(section, path.name, kind, spec, samples))
    return workloads


def tokenize(workloads: list[Workload], hf_tokenizer: Any, max_samples: int | None = None) -> list[str]:
    """Fill ``tokens`` with each sample's token ids; return warnings for lossy round trips."""
    warnings: list[str] = []
    for w in workloads:
        if max_samples is not None:
            w.samples = w.samples[:max_samples]
        w.tokens = []
        for i, text in enumerate(w.samples):
            ids = hf_tokenizer.encode(text, add_special_tokens=False)
            if hf_tokenizer.decode(ids) != text:
                warnings.append(f"{w.name} sample {i + 1}: tokenizer does not round-trip the text")
            w.tokens.append(list(ids))
    return warnings
