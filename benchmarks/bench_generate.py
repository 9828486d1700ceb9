"""End-to-end generation: unconstrained vs formcast vs llama.cpp's own GBNF sampler.

The same model (SmolLM2-135M-Instruct Q4_1 by default), the same chat prompts built from each
example schema, greedy decoding, three ways in one process:

* ``unconstrained``: formcast's decode loop with no grammar (the speed baseline);
* ``formcast``: the same loop with the schema's grammar, masks and jump-forward;
* ``llama.cpp GBNF``: ``Llama.generate(..., grammar=LlamaGrammar.from_string(g.to_gbnf()))``,
  llama.cpp's built-in grammar sampler on the grammar formcast compiled.

Speed is decode tokens per second: output tokens (sampled + forced) divided by the time after
the prompt's prefill, which is identical in all three and reported apart. The ratio compares
each mode with the unconstrained run over the *same number* of output tokens (read from its
per-token timeline), since later tokens attend over a longer context and cost more. The modes run
interleaved per task and repetition, so a busy machine slows all three alike. Outputs are
checked with ``json.loads`` and ``jsonschema`` (formats asserted). Prints a markdown table.

    python benchmarks/bench_generate.py [--repeat 3] [--max-tokens 640] [--model smollm2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from formcast.errors import FormcastError
from formcast.grammar.ir import Grammar
from formcast.pipeline.prompt import schema_messages
from formcast.runtime.llama_cpp import LlamaCppRuntime

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MODES = ("unconstrained", "formcast", "llama.cpp GBNF")


@dataclass
class Run:
    mode: str
    task: str
    text: str
    tokens: int
    decode_seconds: float
    prefill_seconds: float
    forced: int = 0
    clipped: list[float] = field(default_factory=list)
    mask_p50_us: float | None = None
    mask_p99_us: float | None = None
    finish: str = ""
    timeline: list[tuple[int, float]] = field(default_factory=list)  # (tokens, decode seconds)
    parses: bool = False
    valid: bool = False
    error: str = ""


@dataclass
class Task:
    name: str
    schema: dict[str, Any]
    prompt: str
    grammar: Grammar
    gbnf: str
    unenforced: list[str]


def load_tasks(names: list[str], runtime: LlamaCppRuntime) -> list[Task]:
    tasks = []
    for name in names:
        schema = json.loads((EXAMPLES / f"{name}.schema.json").read_text())
        task = (EXAMPLES / f"{name}.prompt.txt").read_text()
        grammar = Grammar.from_json_schema(schema)
        report = grammar.report
        unenforced = [f"{u.pointer}" for u in report.unenforced] if report is not None else []
        prompt = runtime.format_chat(schema_messages(schema, task))
        tasks.append(Task(name, schema, prompt, grammar, grammar.to_gbnf(), unenforced))
    return tasks


def check(run: Run, schema: dict[str, Any]) -> Run:
    try:
        value = json.loads(run.text)
    except json.JSONDecodeError as exc:
        run.error = f"not JSON: {exc.msg} at {exc.lineno}:{exc.colno}"
        return run
    run.parses = True
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = list(validator.iter_errors(value))
    run.valid = not errors
    if errors:
        first = errors[0]
        run.error = f"/{'/'.join(map(str, first.absolute_path))}: {first.message}"
    return run


def run_formcast_loop(rt: LlamaCppRuntime, task: Task, grammar: Grammar | None,
                      max_tokens: int) -> Run:
    stamps: list[tuple[int, float]] = []
    started = time.perf_counter()
    result = rt.generate(task.prompt, grammar=grammar, max_tokens=max_tokens,
                         on_token=lambda n: stamps.append((n, time.perf_counter())))
    prefill = float(result.extra["prefill_seconds"])
    setup = float(result.extra["grammar_setup_seconds"])
    decode_start = started + setup + prefill
    return Run(
        timeline=[(n, t - decode_start) for n, t in stamps],
        mode="formcast" if grammar is not None else "unconstrained", task=task.name,
        text=result.text, tokens=result.total_tokens,
        decode_seconds=result.total_seconds - prefill - setup, prefill_seconds=prefill,
        forced=result.tokens_forced, clipped=result.clipped_mass,
        mask_p50_us=result.mask_p50_us, mask_p99_us=result.mask_p99_us,
        finish=result.finish_reason)


def run_llama_gbnf(rt: LlamaCppRuntime, task: Task, max_tokens: int) -> Run:
    from llama_cpp import LlamaGrammar

    llm = rt.llm
    grammar = LlamaGrammar.from_string(task.gbnf, verbose=False)
    tokens = rt.tokenize_prompt(task.prompt)
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(tokens)  # generate() below sees the whole prompt cached and samples at once
    prefill = time.perf_counter() - t0
    out: list[int] = []
    finish = "length"
    t0 = time.perf_counter()
    for token in llm.generate(tokens, temp=0.0, repeat_penalty=1.0, grammar=grammar):
        if token in rt.eog_ids:
            finish = "eos"
            break
        out.append(token)
        if len(out) >= max_tokens:
            break
    decode = time.perf_counter() - t0
    text = llm.detokenize(out).decode("utf-8", errors="replace")
    return Run(mode="llama.cpp GBNF", task=task.name, text=text, tokens=len(out),
               decode_seconds=decode, prefill_seconds=prefill, finish=finish)


def rate(runs: list[Run]) -> float:
    seconds = sum(r.decode_seconds for r in runs)
    return sum(r.tokens for r in runs) / seconds if seconds > 0 else 0.0


def fmt_us(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def baseline_rate(runs: list[Run], task: str, n_tokens: float) -> float:
    """Unconstrained tokens/s over its first ``n_tokens`` tokens (same output length as the
    constrained run it is compared with: later tokens attend over more context and cost more)."""
    rates = []
    for run in runs:
        if run.task != task or run.mode != "unconstrained":
            continue
        points = [(n, t) for n, t in run.timeline if t > 0]
        reached = [(n, t) for n, t in points if n >= n_tokens] or points[-1:]
        if reached:
            rates.append(reached[0][0] / reached[0][1])
    return statistics.median(rates) if rates else 0.0


def table(tasks: list[Task], runs: list[Run]) -> str:
    lines = [
        "| task | mode | tokens (forced) | decode tok/s | x unconstrained, same length | "
        "parses | schema-valid | clipped mass avg | mask p50 / p99 us |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {mode: [] for mode in MODES}
    for task in tasks:
        for mode in MODES:
            sel = [r for r in runs if r.task == task.name and r.mode == mode]
            if not sel:
                continue
            clipped = [c for r in sel for c in r.clipped]
            tok = statistics.median(r.tokens for r in sel)
            forced = statistics.median(r.forced for r in sel)
            base = baseline_rate(runs, task.name, tok)
            ratio = 1.0 if mode == "unconstrained" else rate(sel) / base if base else 0.0
            ratios[mode].append(ratio)
            p50 = statistics.median([r.mask_p50_us for r in sel if r.mask_p50_us is not None] or [0])
            p99 = max([r.mask_p99_us for r in sel if r.mask_p99_us is not None] or [0])
            lines.append(
                f"| {task.name} | {mode} | {tok:.0f} ({forced:.0f}) | {rate(sel):.1f} | "
                f"{ratio:.2f} | "
                f"{sum(r.parses for r in sel)}/{len(sel)} | {sum(r.valid for r in sel)}/{len(sel)} | "
                f"{statistics.fmean(clipped) if clipped else 0:.3f} | "
                f"{fmt_us(p50 if mode == 'formcast' else None)} / "
                f"{fmt_us(p99 if mode == 'formcast' else None)} |")
    for mode in MODES:
        sel = [r for r in runs if r.mode == mode]
        if not sel:
            continue
        mean_ratio = statistics.fmean(ratios[mode]) if ratios[mode] else 0.0
        lines.append(
            f"| **all** | **{mode}** | {sum(r.tokens for r in sel)} ({sum(r.forced for r in sel)}) | "
            f"**{rate(sel):.1f}** | **{mean_ratio:.2f}** (mean of tasks) | "
            f"{100 * sum(r.parses for r in sel) / len(sel):.0f}% | "
            f"{100 * sum(r.valid for r in sel) / len(sel):.0f}% | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tasks", default="invoice,ticket_triage,tool_call")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=640)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--show-outputs", action="store_true")
    args = parser.parse_args(argv)

    rt = LlamaCppRuntime(args.model, n_ctx=2048)
    tasks = load_tasks(args.tasks.split(","), rt)
    modes = [m for m in MODES if m in args.modes.split(",")]
    runs: list[Run] = []
    for rep in range(args.repeat):
        for task in tasks:
            for mode in modes:
                print(f"rep {rep + 1}/{args.repeat} {task.name}: {mode}...", file=sys.stderr)
                try:
                    if mode == "unconstrained":
                        run = run_formcast_loop(rt, task, None, args.max_tokens)
                    elif mode == "formcast":
                        run = run_formcast_loop(rt, task, task.grammar, args.max_tokens)
                    else:
                        run = run_llama_gbnf(rt, task, args.max_tokens)
                except FormcastError as exc:  # counted as a failed run, never hidden
                    runs.append(Run(mode=mode, task=task.name, text="", tokens=0,
                                    decode_seconds=0.0, prefill_seconds=0.0, finish="error",
                                    error=f"{type(exc).__name__}: {exc}"))
                    continue
                runs.append(check(run, task.schema))

    print(f"model: {Path(rt.model_path).name}; greedy; max {args.max_tokens} tokens; "
          f"{args.repeat} repetition(s) per task and mode (the first formcast run of a task "
          "starts with a cold mask cache)\n")
    print(table(tasks, runs))
    print()
    for task in tasks:
        note = ", ".join(task.unenforced) if task.unenforced else "none"
        print(f"- {task.name}: prefill {statistics.median(r.prefill_seconds for r in runs if r.task == task.name):.2f} s; "
              f"keywords not enforced by the grammar: {note}")
    failures = [r for r in runs if not r.valid]
    if failures:
        print("\ninvalid outputs:")
        for r in failures:
            print(f"- {r.task} / {r.mode} ({r.finish}): {r.error}")
    if args.show_outputs:
        for r in runs:
            print(f"\n### {r.task} / {r.mode}\n{r.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
