"""Token-mask benchmark: formcast against llguidance and xgrammar on the SmolLM2 vocabulary.

For every grammar under ``benchmarks/grammars/`` (a JSON grammar, GBNF grammars, regexes and
realistic JSON Schemas) and every engine it measures:

* compile time: p50 over ``--compile-rounds`` fresh compiles (no compiler cache can serve
  them), the engines taking turns round by round so that machine noise hits them alike, in
  an order that alternates so that each engine follows each other equally often;
* per-token mask time, p50 and p99 over every step of every sample output: the time of the one
  call that fills a packed int32 bitmask for the current state, taken before each token of the
  sample is accepted and once after the last. "cold" is the first pass over a freshly compiled
  grammar, "warm" a second pass with new matchers of the same compiled grammar (formcast
  memoises masks across matchers; the peers keep little or nothing, so their warm ≈ cold);
* correctness on the way: each sample token must be allowed by the mask and accepted, and the
  matcher must accept at the end; failures are listed, never hidden.

Every figure is printed with its ratio to llguidance. Engines that are not installed, and
grammars an engine cannot compile, are shown as "n/a (reason)".

    python benchmarks/bench_masks.py [--engines formcast,llguidance,xgrammar] [--repeats 5]
                                     [--compile-rounds 21] [--quick] [--only invoice,json]
                                     [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from _engines import BASELINE, ENGINE_NAMES, Engine, EngineUnavailable, make_engine
from _measure import (
    PassResult,
    RunResult,
    interleaved_compiles,
    keep_mask,
    measure,
    set_agreement,
    warm_up,
)
from _report import render
from _tokenizer import load_smollm2_tokenizer, smollm2_gguf_path
from _workloads import GRAMMARS_DIR, Workload, load_workloads, tokenize


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINE_NAMES),
                        help="comma-separated engines to run (default: all three)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="fresh compiles per grammar, each followed by a cold pass whose "
                             "steps are pooled (default 5, 2 with --quick)")
    parser.add_argument("--compile-rounds", type=int, default=None,
                        help="rounds of interleaved fresh compiles (one per engine a round) "
                             "whose p50 is the compile figure (default 21, 5 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer compiles and at most two samples per grammar")
    parser.add_argument("--only", default="",
                        help="comma-separated substrings; run only grammars whose file name has one")
    parser.add_argument("--grammars", type=Path, default=GRAMMARS_DIR, help="grammar folder")
    parser.add_argument("--json", type=Path, default=None, help="also write raw figures here")
    args = parser.parse_args(argv)
    args.engine_list = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in args.engine_list if e not in ENGINE_NAMES]
    if unknown:
        parser.error(f"unknown engine(s) {', '.join(unknown)}; choose from {', '.join(ENGINE_NAMES)}")
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.compile_rounds is None:
        args.compile_rounds = 5 if args.quick else 21
    if args.compile_rounds < 1:
        parser.error("--compile-rounds must be at least 1")
    return args


def load_engines(names: list[str], hf_tokenizer: object, gguf: Path) -> tuple[list[Engine], dict[str, str]]:
    engines: list[Engine] = []
    missing: dict[str, str] = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            engine = make_engine(name, hf_tokenizer, gguf)
        except EngineUnavailable as exc:
            missing[name] = str(exc)
            log(f"  {name}: n/a ({exc})")
            continue
        log(f"  {engine.describe()}: vocabulary of {engine.vocab_size} tokens "
            f"loaded in {time.perf_counter() - t0:.1f} s")
        engines.append(engine)
    return engines, missing


def header(args: argparse.Namespace, engines: list[Engine], missing: dict[str, str],
           workloads: list[Workload], vocab_size: int) -> list[str]:
    steps = sum(len(t) + 1 for w in workloads for t in w.tokens)
    lines = [
        "## Token-mask benchmark (SmolLM2-135M vocabulary)",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, CPU only",
        f"- vocabulary: {vocab_size} tokens; {len(workloads)} grammars, "
        f"{sum(len(w.samples) for w in workloads)} samples, {steps} mask steps per engine and pass",
        f"- engines: {', '.join(e.describe() for e in engines) or 'none'}",
    ]
    lines += [f"- {name}: n/a ({reason})" for name, reason in missing.items()]
    lines += [
        f"- compile: p50 of {args.compile_rounds} fresh compiles per engine, the engines taking "
        "turns round by round so machine noise hits them alike, in an order that alternates so each "
        "engine follows each other equally often (llguidance: GBNF→Lark conversion "
        "+ `LLMatcher`; xgrammar: a new `GrammarCompiler(cache_enabled=False)`; formcast: front "
        "end + `Matcher` with its compile caches emptied before the timer starts, as the previous "
        "compile of every engine is dropped before it); per-vocabulary tables are built beforehand "
        "(every engine first compiles and walks a small regex and a small JSON Schema, untimed)",
        "- mask: the one call that fills a packed int32 bitmask for the current state, timed at "
        "every step of every sample; p50/p99 over all steps. cold = first pass over each fresh "
        f"compile, pooled over {args.repeats} rounds in which the engines take turns; warm = one "
        "more pass with new matchers "
        "of the same compiled grammar (formcast memoises masks across matchers)",
        f"- (×N) = ratio to {BASELINE}; medians across grammars, their ratio the median of the "
        "per-grammar ratios",
        f"- 'same mask' = share of cold steps whose bitmask equals {BASELINE}'s bit for bit "
        "(special tokens other than end-of-generation ignored). Engines differ by policy, not "
        f"only by bugs: {BASELINE} refuses tokens that split forced text non-canonically (`d` "
        "before `ue` when `due` is forced) and some splits its Lark lexer resolves differently; "
        "xgrammar allows DEL (0x7F) inside JSON strings",
    ]
    return lines


def warm_up_workloads() -> list[Workload]:
    """Small grammars every engine compiles and walks before anything is timed: a regex, and
    a JSON Schema whose sample passes through strings, numbers, an array and an object, so
    that tables an engine builds once per vocabulary on first use (formcast: the tokens a
    JSON string's characters admit) are not billed to whichever grammar comes first."""
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "age": {"type": "integer"}, "score": {"type": "number"}}}
    sample = '{"name": "Ada Lovelace", "tags": ["math", "poetry"], "age": 36, "score": 9.5}'
    return [Workload("warmup", "warmup.regex", "regex", "[a-z]{1,12}( [a-z]{1,12}){0,8}",
                     ["hello world"]),
            Workload("warmup", "warmup.schema.json", "schema", schema, [sample])]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log("loading the SmolLM2 tokenizer…")
    gguf = smollm2_gguf_path()
    hf_tokenizer = load_smollm2_tokenizer()
    only = [s for s in args.only.split(",") if s]
    workloads = load_workloads(args.grammars, only or None)
    if not workloads:
        log("no grammar matches --only")
        return 2
    for warning in tokenize(workloads, hf_tokenizer, max_samples=2 if args.quick else None):
        log(f"  warning: {warning}")
    warmups = warm_up_workloads()
    tokenize(warmups, hf_tokenizer)

    log("loading engines…")
    engines, missing = load_engines(args.engine_list, hf_tokenizer, gguf)
    for engine in engines:
        for warmup in warmups:
            problem = warm_up(engine, warmup)
            if problem:
                log(f"  {engine.name}: warm-up on {warmup.name} failed ({problem})")

    # Engines differ on whether special tokens other than end-of-generation may be left set in
    # a mask (xgrammar leaves them set inside strings); ignore those bits when comparing masks.
    eos = {hf_tokenizer.eos_token_id}
    ignored = sorted(i for i, t in hf_tokenizer.added_tokens_decoder.items()
                     if t.special and i not in eos)
    keep = keep_mask((len(hf_tokenizer) + 31) // 32, ignored)

    results: list[RunResult] = []
    for w in workloads:
        t0 = time.perf_counter()
        compile_times = interleaved_compiles(engines, w, args.compile_rounds)
        for r in measure(engines, w, args.repeats, keep):
            if r.engine in compile_times and r.na_reason is None:
                r.compile_ms = compile_times[r.engine]
            status = r.na_reason or f"compile {r.compile_p50_ms:.2f} ms, {r.steps} steps"
            log(f"  {w.name:<26} {r.engine:<10} {status}")
            results.append(r)
        log(f"  {w.name:<26} measured in {time.perf_counter() - t0:.1f} s")
        for name, reason in missing.items():
            results.append(RunResult(w.name, w.section, name, na_reason=reason))
    set_agreement(results, BASELINE)

    lines = header(args, engines, missing, workloads, len(hf_tokenizer))
    lines += render(results, args.engine_list, BASELINE)
    lines += ["", f"_total benchmark time {time.perf_counter() - started:.0f} s_"]
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps([_raw(r) for r in results], indent=1))
    return 0


def _raw(r: RunResult) -> dict[str, object]:
    def stats(p: PassResult | None) -> dict[str, object] | None:
        if p is None:
            return None
        return {"steps": len(p.times_ns), "p50_us": p.percentile_us(50),
                "p99_us": p.percentile_us(99), "problems": p.problems}

    return {"grammar": r.workload, "section": r.section, "engine": r.engine, "na": r.na_reason,
            "compile_ms": r.compile_ms, "cold": stats(r.cold), "warm": stats(r.warm),
            "agreement": r.agreement}


if __name__ == "__main__":
    sys.exit(main())
