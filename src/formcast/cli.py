"""The ``formcast`` command line: ``generate``, ``compile``, ``eval``, ``bench``.

Each sub-command lives in its own ``_cmd_*`` function; ``main`` only parses arguments and turns
formcast errors into one clear line on stderr with exit code 2 (never a bare traceback).

``generate --schema`` runs the pipeline (constrain, repair, validate, retry, optional salvage)
and exits 0 with a valid value on stdout, 1 when a budget ran out (nothing on stdout), or 3
with ``--salvage`` when stdout holds a degraded, not schema-valid partial result.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from formcast.errors import FormcastError
from formcast.runtime.base import GenerationResult


def _cmd_compile(args: argparse.Namespace) -> int:
    """Print the grammar as GBNF on stdout and the compile report on stderr."""
    from formcast.errors import SchemaError, SchemaSyntaxError
    from formcast.grammar.ir import Grammar
    from formcast.grammar.json_schema import compile_json_schema, load_schema_text

    if args.schema:
        schema = load_schema_text(_read_text(args.schema, "schema file"), source=args.schema)
        try:
            grammar = compile_json_schema(
                schema, whitespace=args.whitespace, strict=args.strict, max_depth=args.max_depth,
                property_order=args.property_order, formats=args.formats)
        except SchemaSyntaxError:
            raise
        except SchemaError as exc:
            raise FormcastError(f"{args.schema}: {exc}") from None
    elif args.gbnf:
        grammar = Grammar.from_gbnf(_read_text(args.gbnf, "GBNF file"))
    else:
        grammar = Grammar.from_regex(args.regex)
    sys.stdout.write(grammar.to_gbnf())
    sys.stdout.flush()
    report = grammar.report
    if report is not None and not args.quiet:
        text = json.dumps(report.to_dict(), indent=2) if args.report_json else report.format()
        print(text, file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------- generate

#: Exit codes of ``formcast generate`` (also listed in its ``--help``).
EXIT_VALID = 0  # stdout holds a value that passed the schema (and the rules)
EXIT_NO_RESULT = 1  # a budget ran out before a valid result; stdout is empty
EXIT_USAGE = 2  # bad input (files, schema, options): one line on stderr, see ``main``
EXIT_DEGRADED = 3  # --salvage: stdout holds salvaged fields that are NOT schema-valid

DEFAULT_MAX_ATTEMPTS = 2

GENERATE_EPILOG = f"""\
With --schema the output goes through the whole pipeline: generation under the grammar
(layer 1), parse-repair and validation against the schema and --rules (layer 2), retries with
the errors fed back, within --max-attempts and --token-budget, and with --salvage the trusted
fields of the last output (layer 3). stderr gets a layer report: each attempt's figures, the
errors (JSON pointers) that caused a retry, the repairs, and which layer produced the result.
--gbnf and --regex constrain decoding only (layer 1): there is no schema to validate against.

exit codes:
  {EXIT_VALID}  a valid value is on stdout
  {EXIT_NO_RESULT}  no valid result within the budgets (stdout empty; stderr names the budget)
  {EXIT_USAGE}  bad input or options
  {EXIT_DEGRADED}  --salvage: stdout holds the salvaged fields of a failed output, marked degraded
     on stderr; they are NOT schema-valid (required fields may be missing)
"""


@dataclass
class GenerationRequest:
    """Everything one layer-1 generation needs, model aside: messages, constraint, sampling."""

    messages: list[dict[str, str]]
    grammar: Any = None
    schema: dict[str, Any] | None = None
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None


def run_generation(runtime: Any, request: GenerationRequest,
                   on_token: Callable[[int], None] | None = None) -> GenerationResult:
    """One layer-1 generation: ``generate --gbnf/--regex`` and ``demo`` (which compares raw
    constrained and unconstrained decoding). ``generate --schema`` uses the pipeline instead."""
    prompt = runtime.format_chat(request.messages)
    return runtime.generate(prompt, grammar=request.grammar, max_tokens=request.max_tokens,
                            temperature=request.temperature, top_p=request.top_p,
                            seed=request.seed, on_token=on_token)


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise FormcastError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FormcastError(f"cannot read {what} {path}: {exc}") from None


def _load_schema(path: str) -> dict[str, Any]:
    text = _read_text(path, "schema file")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormcastError(f"schema file {path} is not valid JSON: {exc.msg} at line "
                            f"{exc.lineno}, column {exc.colno}") from None
    if not isinstance(schema, dict | bool):
        raise FormcastError(f"schema file {path}: a JSON Schema must be an object or a "
                            f"boolean, got {type(schema).__name__}")
    return schema if isinstance(schema, dict) else {} if schema else {"not": {}}


def _unenforced(grammar: Any) -> list[str]:
    """One line per schema keyword the grammar could not enforce (the validator checks them)."""
    report = getattr(grammar, "report", None)
    if report is None:
        return []
    return [f"{item.pointer or '/'} ({item.reason})" for item in report.unenforced]


def _task_text(args: argparse.Namespace) -> str:
    task = _read_text(args.prompt_file, "prompt file") if args.prompt_file is not None \
        else args.prompt
    if not task or not task.strip():
        raise FormcastError("the prompt is empty")
    return task


class _Progress:
    """A one-line progress indicator on stderr (redrawn in place on a terminal)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.live = enabled and sys.stderr.isatty()
        self._label = ""
        self._last = 0.0

    def start(self, label: str) -> None:
        self._label = label
        self._last = time.perf_counter()
        if self.enabled:
            sys.stderr.write(f"{label}...\r" if self.live else f"{label}...\n")
            sys.stderr.flush()

    def tokens(self, count: int) -> None:
        now = time.perf_counter()
        if self.live and now - self._last > 0.1:
            self._last = now
            sys.stderr.write(f"\r{self._label}: {count} tokens")
            sys.stderr.flush()

    def done(self) -> None:
        if self.live:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _load_runtime(model: str, progress: _Progress) -> Any:
    from formcast.runtime.llama_cpp import LlamaCppRuntime
    from formcast.runtime.models import resolve_model_path

    path = resolve_model_path(model)  # fails fast, before anything slow
    progress.start(f"loading {os.path.basename(path)}")
    try:
        return LlamaCppRuntime(path)
    finally:
        progress.done()


def _generation_lines(result: GenerationResult, *, constrained: bool,
                      judged: bool = False) -> list[str]:
    """The layer-1 figures of one generation: tokens, time, clipped mass, mask latency.

    ``judged``: layer 2 says whether the output is complete, so a stop at the token limit is
    only noted, not called incomplete (the JSON may have ended before the prose around it).
    """
    prefill = float(result.extra.get("prefill_seconds", 0.0))
    decode = max(result.total_seconds - prefill, 1e-9)
    lines = [
        f"{result.total_tokens} tokens ({result.tokens_generated} sampled, "
        f"{result.tokens_forced} forced) in {result.total_seconds:.2f} s "
        f"(prefill {prefill:.2f} s for {result.prompt_tokens} prompt tokens, "
        f"decode {result.total_tokens / decode:.1f} tok/s), finish: {result.finish_reason}",
    ]
    if constrained:
        mass = result.clipped_mass
        avg = result.clipped_mass_avg
        p50 = f"{result.mask_p50_us:.0f}" if result.mask_p50_us is not None else "-"
        p99 = f"{result.mask_p99_us:.0f}" if result.mask_p99_us is not None else "-"
        share = 100.0 * result.mask_seconds / result.total_seconds if result.total_seconds else 0.0
        lines.append(
            f"clipped mass avg {avg if avg is not None else 0.0:.3f} max "
            f"{max(mass) if mass else 0.0:.3f}; mask p50 {p50} us p99 {p99} us; "
            f"masking {1000 * result.mask_seconds:.0f} ms ({share:.1f}% of the time)")
    else:
        lines.append("unconstrained")
    if result.finish_reason == "length" and judged:
        lines.append("stopped at the token limit of the attempt")
    elif result.finish_reason == "length":
        lines.append("stopped at the token budget: the output is incomplete (raise --max-tokens)")
    return lines


def _format_report(result: GenerationResult, *, constrained: bool,
                   unenforced: Sequence[str] = ()) -> str:
    """The report of one layer-1 generation (``generate --gbnf/--regex`` and ``demo``)."""
    lines = _generation_lines(result, constrained=constrained)
    if constrained and unenforced:
        lines.insert(2, "not enforced by the grammar (check after generation): "
                     + "; ".join(unenforced))
    return "\n".join(lines)


def _print_report(lines: Sequence[str]) -> None:
    print("\n".join(f"formcast: {line}" for line in lines), file=sys.stderr)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _cmd_generate(args: argparse.Namespace) -> int:
    if args.schema is not None:
        return _generate_with_pipeline(args)
    return _generate_layer1(args)


# -- generate --gbnf / --regex: layer 1 only

_PIPELINE_ONLY = (("max_attempts", "--max-attempts"), ("token_budget", "--token-budget"),
                  ("salvage", "--salvage"), ("rules", "--rules"),
                  ("strict_integers", "--strict-integers"))


def _generate_layer1(args: argparse.Namespace) -> int:
    from formcast.grammar.ir import Grammar
    from formcast.pipeline.prompt import plain_messages

    given = [flag for attr, flag in _PIPELINE_ONLY if getattr(args, attr) not in (None, False)]
    if given:
        raise FormcastError(f"{', '.join(given)} need(s) --schema: a GBNF or regex constraint "
                            "has no schema to validate, repair or retry against")
    task = _task_text(args)
    grammar = None
    if not args.no_constraint and args.gbnf is not None:
        grammar = Grammar.from_gbnf(_read_text(args.gbnf, "GBNF file"))
    elif not args.no_constraint:
        grammar = Grammar.from_regex(args.regex)
    request = GenerationRequest(plain_messages(task), grammar, None, max_tokens=args.max_tokens,
                                temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    progress = _Progress(enabled=not args.quiet)
    runtime = _load_runtime(args.model, progress)
    progress.start("generating")
    try:
        result = run_generation(runtime, request, on_token=progress.tokens)
    finally:
        progress.done()
    print(result.text)
    if not args.quiet:
        kind = "GBNF" if args.gbnf is not None else "regex"
        _print_report([*_generation_lines(result, constrained=grammar is not None),
                       f"layer 1 only: a {kind} constraint has no schema, so the output was "
                       "not repaired, validated or retried"])
    return EXIT_VALID


# -- generate --schema: the pipeline


class _ObservedRuntime:
    """The loaded runtime as the pipeline sees it.

    Each attempt gets a progress line and the command's ``--top-p``, and its full
    ``GenerationResult`` is kept for the layer report (the pipeline's attempt records keep only
    what layers 2 and 3 need). The runtime is attached after the schema has compiled, so a bad
    schema fails before the slow model load.
    """

    def __init__(self, progress: _Progress, *, top_p: float, max_attempts: int) -> None:
        self.runtime: Any = None
        self.progress = progress
        self.top_p = top_p
        self.max_attempts = max_attempts
        self.generations: list[GenerationResult | None] = []  # one per attempt, None if it failed

    @property
    def name(self) -> str:
        return str(getattr(self.runtime, "name", "llama.cpp"))

    @property
    def model_path(self) -> str | None:
        return getattr(self.runtime, "model_path", None)

    def attach(self, runtime: Any) -> None:
        self.runtime = runtime

    def _loaded(self) -> Any:
        if self.runtime is None:  # pragma: no cover - _generate_with_pipeline attaches first
            raise FormcastError("the model is not loaded yet")
        return self.runtime

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        return self._loaded().format_chat(messages)

    def generate(self, prompt: str, *, grammar: Any = None, max_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 on_token: Callable[[int], None] | None = None) -> GenerationResult:
        runtime = self._loaded()
        self.generations.append(None)
        self.progress.start(f"attempt {len(self.generations)} of {self.max_attempts}")
        try:
            result = runtime.generate(prompt, grammar=grammar, max_tokens=max_tokens,
                                      temperature=temperature, top_p=self.top_p, seed=seed,
                                      on_token=self.progress.tokens)
        finally:
            self.progress.done()
        self.generations[-1] = result
        return result

    def generation(self, number: int) -> GenerationResult | None:
        """The result of attempt ``number`` (1-based), if it produced one."""
        return self.generations[number - 1] if 0 < number <= len(self.generations) else None


def _compile_for_pipeline(pipeline: Any, schema: dict[str, Any], args: argparse.Namespace,
                          ) -> Any:
    """The validator and (unless --no-constraint) the grammar; --strict refuses a schema with
    keywords the grammar cannot enforce."""
    from formcast.errors import SchemaError, SchemaSyntaxError

    try:
        compiled = pipeline.compile(schema, grammar=not args.no_constraint)
    except SchemaSyntaxError:
        raise
    except SchemaError as exc:
        raise FormcastError(f"{args.schema}: {exc}") from None
    report = getattr(compiled.grammar, "report", None)
    if args.strict and report is not None and report.unenforced:
        items = "; ".join(f"{u.pointer or '/'}: {u.keyword}: {u.reason}"
                          for u in report.unenforced)
        raise FormcastError(f"{args.schema}: {len(report.unenforced)} schema keyword(s) cannot "
                            f"be enforced by the grammar (drop --strict to let the validator "
                            f"check them after generation): {items}")
    return compiled


def _generate_with_pipeline(args: argparse.Namespace) -> int:
    from formcast.errors import BudgetExhaustedError
    from formcast.pipeline.pipeline import Pipeline
    from formcast.pipeline.retry import RetryPolicy

    task = _task_text(args)
    schema = _load_schema(args.schema)
    max_attempts = DEFAULT_MAX_ATTEMPTS if args.max_attempts is None else args.max_attempts
    for flag, value in (("--max-attempts", max_attempts), ("--max-tokens", args.max_tokens),
                        ("--token-budget", args.token_budget)):
        if value is not None and value < 1:
            raise FormcastError(f"{flag} must be at least 1, got {value}")
    policy = RetryPolicy(max_attempts=max_attempts, token_budget=args.token_budget,
                         max_tokens=args.max_tokens, salvage=args.salvage)
    rules = _eval_rules(args.rules)
    progress = _Progress(enabled=not args.quiet)
    model = _ObservedRuntime(progress, top_p=args.top_p,
                             max_attempts=policy.effective_max_attempts)
    pipeline = Pipeline(model, policy=policy, strict_integers=args.strict_integers,
                        temperature=args.temperature, seed=args.seed, log=False)
    compiled = _compile_for_pipeline(pipeline, schema, args)  # before the slow model load
    model.attach(_load_runtime(args.model, progress))
    constrained = not args.no_constraint
    try:
        result = pipeline.generate(task, schema=schema, rules=rules, constrain=constrained)
    except BudgetExhaustedError as exc:
        if not args.quiet:
            history = getattr(exc, "history", ())
            _print_report([*_attempt_lines(history, model, constrained, bool(rules)),
                           f"layer: none, no valid result: budget exhausted ({exc.budget}) "
                           f"after {_totals(history)}", *_unenforced_line(compiled.grammar)])
        print(f"formcast generate: error: budget exhausted ({exc.budget}): "
              f"{_one_line(str(exc))}", file=sys.stderr)
        return EXIT_NO_RESULT

    if not args.quiet:
        _print_report([*_attempt_lines(result.history, model, constrained, bool(rules)),
                       _layer_line(result, compiled, constrained),
                       *_unenforced_line(compiled.grammar)])
    if result.valid:
        print(result.raw.strip() if result.layer_used == "constrain"
              else json.dumps(result.value, ensure_ascii=False, indent=2))
        return EXIT_VALID
    if result.salvaged is None:  # pragma: no cover - the pipeline raises instead
        print("formcast generate: error: no valid result", file=sys.stderr)
        return EXIT_NO_RESULT
    print(json.dumps(result.salvaged, ensure_ascii=False, indent=2))
    print(f"formcast generate: warning: degraded result (layer 3 salvage, confidence "
          f"{result.confidence:.2f}): stdout holds the fields kept from a failed output, which "
          f"are NOT schema-valid; exit code {EXIT_DEGRADED}", file=sys.stderr)
    return EXIT_DEGRADED


def _attempt_lines(history: Sequence[Any], model: _ObservedRuntime, constrained: bool,
                   with_rules: bool) -> list[str]:
    """Per attempt: the layer-1 figures, the repairs made, and why it was rejected."""
    lines: list[str] = []
    for index, attempt in enumerate(history):
        head = f"attempt {attempt.number} of {model.max_attempts}: "
        gen = model.generation(attempt.number)
        if gen is None:
            lines.append(head + "the model call failed")
        else:
            figures = _generation_lines(gen, constrained=constrained, judged=True)
            lines += [head + figures[0], *(f"  {line}" for line in figures[1:])]
        if attempt.repairs:
            lines.append("  repairs: " + "; ".join(str(r) for r in attempt.repairs))
        if attempt.errors:
            shown = "; ".join(f"{e} [{e.kind}]" for e in attempt.errors[:5])
            more = f" (+{len(attempt.errors) - 5} more)" if len(attempt.errors) > 5 else ""
            then = (f", fed back to attempt {history[index + 1].number}"
                    if index + 1 < len(history) else "")
            lines.append(f"  rejected{then}: {_one_line(shown)}{more}")
        elif gen is not None:
            lines.append("  accepted: schema-valid" + (", rules pass" if with_rules else ""))
    return lines


def _totals(history: Sequence[Any]) -> str:
    tokens = sum(a.tokens for a in history)
    seconds = sum(a.seconds for a in history)
    return f"{len(history)} attempt(s), {tokens} tokens, {seconds:.2f} s"


def _layer_line(result: Any, compiled: Any, constrained: bool) -> str:
    """Which layer produced the result, and how far to trust it."""
    from formcast.pipeline.result import json_pointer

    totals = _totals(result.history)
    if result.layer_used == "constrain":
        how = ("valid as generated under the grammar" if constrained
               else "valid as generated (no grammar in this run)")
        return f"layer: constrain, {how} ({totals})"
    if result.layer_used == "repair":
        kinds = ", ".join(sorted({r.kind for r in result.repairs}))
        return f"layer: repair, valid after parse-repair ({kinds}) ({totals})"
    if result.layer_used == "retry":
        return (f"layer: retry, valid on attempt {result.attempts} after "
                f"{result.attempts - 1} rejected ({totals})")
    record = result.metrics
    budget = getattr(record, "budget_exhausted", None) or "unknown"
    salvaged = result.salvaged or {}
    kept = [json_pointer([key]) for key in salvaged]
    missing = [json_pointer([key]) for key in compiled.top_level_keys or () if key not in salvaged]
    return (f"layer: salvage, DEGRADED (confidence {result.confidence:.2f}, not valid): budget "
            f"exhausted ({budget}) after {totals}; kept {', '.join(kept) or 'nothing'}"
            + (f"; missing {', '.join(missing)}" if missing else ""))


def _unenforced_line(grammar: Any) -> list[str]:
    unenforced = _unenforced(grammar)
    return ["not enforced by the grammar (checked by the validator): " + "; ".join(unenforced)
            ] if unenforced else []


# ----------------------------------------------------------------------------- demo

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def _validity(text: str, schema: dict[str, Any]) -> str:
    """'schema-valid', or what is wrong: not JSON (where), or the first schema violation."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value),
                    key=lambda e: list(e.absolute_path))
    if not errors:
        return "schema-valid"
    first = errors[0]
    pointer = "/" + "/".join(str(p) for p in first.absolute_path)
    return f"JSON but schema-invalid ({len(errors)} error(s); {pointer}: {first.message})"


def _cmd_demo(args: argparse.Namespace) -> int:
    from formcast.grammar.ir import Grammar
    from formcast.pipeline.prompt import schema_messages

    schema_path = Path(args.examples) / f"{args.task}.schema.json"
    prompt_path = Path(args.examples) / f"{args.task}.prompt.txt"
    schema = _load_schema(str(schema_path))
    task = _read_text(str(prompt_path), "prompt file")
    grammar = Grammar.from_json_schema(schema, strict=False)
    messages = schema_messages(schema, task)
    progress = _Progress()
    runtime = _load_runtime(args.model, progress)
    print(f"task: {args.task} ({schema_path.name}, {prompt_path.name}); model: "
          f"{os.path.basename(runtime.model_path)}; greedy, max {args.max_tokens} tokens\n")
    panels = []
    for label, constraint in (("unconstrained", None), ("formcast (constrained)", grammar)):
        request = GenerationRequest(messages, constraint, schema, max_tokens=args.max_tokens)
        progress.start(f"generating {label}")
        try:
            result = run_generation(runtime, request, on_token=progress.tokens)
        finally:
            progress.done()
        report = _format_report(result, constrained=constraint is not None,
                                unenforced=_unenforced(constraint))
        panels.append((label, result.text.strip() or "(empty)",
                       f"--- {_validity(result.text, schema)}\n{report}"))
    width = args.width or shutil.get_terminal_size((100, 24)).columns
    print(_side_by_side(panels, width) if width >= 120 else _stacked(panels))
    return 0


def _stacked(panels: list[tuple[str, str, str]], max_lines: int = 40) -> str:
    def cut(text: str) -> str:
        lines = text.splitlines()
        if len(lines) <= max_lines:
            return text
        return "\n".join(lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"])

    return "\n\n".join(f"=== {label} ===\n{cut(text)}\n{footer}"
                        for label, text, footer in panels)


def _side_by_side(panels: list[tuple[str, str, str]], width: int, max_lines: int = 40) -> str:
    """Two columns: each output wrapped to half the terminal, long outputs cut with a count."""
    col = (width - 3) // 2

    def column(label: str, text: str, footer: str) -> list[str]:
        body = [piece for line in text.splitlines()
                for piece in (textwrap.wrap(line, col, replace_whitespace=False,
                                            drop_whitespace=False) or [""])]
        if len(body) > max_lines:
            body = body[:max_lines] + [f"... ({len(body) - max_lines} more lines)"]
        tail = [piece for line in footer.splitlines() for piece in textwrap.wrap(line, col)]
        return [f"=== {label} ===", *body, "", *tail]

    left, right = (column(*panel) for panel in panels)
    rows = max(len(left), len(right))
    left += [""] * (rows - len(left))
    right += [""] * (rows - len(right))
    return "\n".join(f"{a:<{col}} | {b}".rstrip() for a, b in zip(left, right, strict=True))


# ----------------------------------------------------------------------------- eval


def _eval_read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise FormcastError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormcastError(f"{what} {path} is not valid JSON: {exc.msg} at line {exc.lineno}, "
                            f"column {exc.colno}") from None


def _eval_prompts(path: str) -> list[str]:
    """Prompts from ``.jsonl`` (a string or {"prompt": ...} per line), ``.json`` (a list of
    those) or text (prompts separated by lines holding only ``---``)."""
    def one(item: Any, where: str) -> str:
        text = item.get("prompt") if isinstance(item, dict) else item
        if not isinstance(text, str) or not text.strip():
            raise FormcastError(f"{where}: expected a non-empty prompt string or "
                                '{"prompt": "..."}')
        return text

    if path.endswith(".json"):
        data = _eval_read_json(path, "prompts file")
        if not isinstance(data, list):
            raise FormcastError(f"prompts file {path}: expected a JSON list of prompts")
        return [one(item, f"{path}: item {i}") for i, item in enumerate(data)]
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise FormcastError(f"cannot read prompts file {path}: {exc.strerror or exc}") from None
    if path.endswith(".jsonl"):
        prompts = []
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    prompts.append(one(json.loads(line), f"{path}:{number}"))
                except json.JSONDecodeError as exc:
                    raise FormcastError(f"{path}:{number}:{exc.colno}: not valid JSON: "
                                        f"{exc.msg}") from None
        return prompts
    blocks, current = [], []
    for line in [*lines, "---"]:
        if line.strip() == "---":
            if "\n".join(current).strip():
                blocks.append("\n".join(current).strip())
            current = []
        else:
            current.append(line)
    return blocks


def _eval_rules(spec: str | None) -> list[Any]:
    """``module:attribute`` naming a list of rules (or a function returning one).

    The module is looked up on the import path and in the current directory (an installed
    ``formcast`` script does not put the working directory on the path).
    """
    if not spec:
        return []
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise FormcastError(f"--rules expects module:attribute, got {spec!r}")
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, SyntaxError) as exc:
        raise FormcastError(f"cannot load rules {spec}: {exc}") from None
    finally:
        if added:
            sys.path.remove(cwd)
    if callable(found) and not isinstance(found, list | tuple):
        try:
            found = found()
        except Exception as exc:  # noqa: BLE001 - the user's code: say whose call failed
            raise FormcastError(f"rules {spec}: calling it to get the rules failed: "
                                f"{exc!r}") from None
    if not isinstance(found, list | tuple):
        raise FormcastError(f"rules {spec} must be a list of rules (or a function returning "
                            f"one), not {type(found).__name__}")
    return list(found)


def _eval_runtime(model: str) -> Any:
    from formcast.runtime.llama_cpp import LlamaCppRuntime

    return LlamaCppRuntime(model)


def _cmd_eval(args: argparse.Namespace) -> int:
    from formcast.pipeline.pipeline import Pipeline, evaluate

    schema = _eval_read_json(args.schema, "schema file")
    prompts = _eval_prompts(args.prompts)
    if args.limit is not None:
        prompts = prompts[:args.limit]
    if not prompts:
        raise FormcastError(f"no prompts in {args.prompts}")
    rules = _eval_rules(args.rules)
    print(f"loading model {args.model}...", file=sys.stderr)
    pipeline = Pipeline(_eval_runtime(args.model), log=False, seed=args.seed)

    def progress(arm: str, index: int, total: int) -> None:
        if not args.quiet:
            print(f"{arm}: prompt {index + 1}/{total}", file=sys.stderr)

    report = evaluate(pipeline, schema, prompts, rules=rules, max_tokens=args.max_tokens,
                      progress=progress)
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    else:
        print(report.table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="formcast", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="compile a JSON Schema / GBNF / regex and print GBNF + report",
                       description="Prints the grammar as GBNF on stdout and, for a JSON Schema, "
                       "the compile report (what is enforced, what is left to the validator) on "
                       "stderr.")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--schema", help="JSON Schema file")
    source.add_argument("--gbnf", help="GBNF grammar file (printed back normalised)")
    source.add_argument("--regex", help="regular expression (full match)")
    p.add_argument("--whitespace", default="flexible",
                   help="'flexible' (bounded, default), 'compact' (none) or a regex over "
                        "space/tab/newline")
    p.add_argument("--max-depth", type=int, default=None,
                   help="nesting bound for generic JSON values (schema true / untyped)")
    p.add_argument("--property-order", choices=("schema", "any"), default="schema",
                   help="'schema' (default) or 'any' (objects of at most 5 properties)")
    p.add_argument("--formats", choices=("assert", "annotate"), default="assert",
                   help="enforce known string formats (default) or treat them as annotations")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 2) when some keyword cannot be enforced by the grammar")
    p.add_argument("--report-json", action="store_true", help="print the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="GBNF only, no report")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("generate", help="generate structured output with a local model",
                       description="Generates with a local model. stdout holds only the value; "
                       "progress and the report go to stderr.", epilog=GENERATE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    constraint = p.add_mutually_exclusive_group(required=True)
    constraint.add_argument("--schema", help="JSON Schema file: builds the prompt and the "
                            "grammar, and the output goes through repair, validation and retries")
    constraint.add_argument("--gbnf", help="constrain by a GBNF grammar file instead (layer 1 only)")
    constraint.add_argument("--regex", help="constrain by a regular expression instead (layer 1 only)")
    task = p.add_mutually_exclusive_group(required=True)
    task.add_argument("--prompt", help="the task text")
    task.add_argument("--prompt-file", help="file holding the task text")
    p.add_argument("--model", default="smollm2",
                   help="smollm2 (default), gemma3, or a path to a .gguf file")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="token limit of one attempt (default 512)")
    p.add_argument("--no-constraint", action="store_true",
                   help="generate without the grammar (same prompt), to compare; with --schema "
                        "the raw output still goes through repair, validation and retries")
    p.add_argument("--strict", action="store_true",
                   help="refuse a schema with keywords the grammar cannot enforce")
    layers = p.add_argument_group("pipeline (with --schema)")
    layers.add_argument("--max-attempts", type=int, default=None, metavar="N",
                        help=f"attempts before giving up (default {DEFAULT_MAX_ATTEMPTS}); each "
                             "retry tells the model which fields were wrong")
    layers.add_argument("--token-budget", type=int, default=None, metavar="N",
                        help="tokens for all attempts together (default: no cap beyond "
                             "attempts x --max-tokens)")
    layers.add_argument("--salvage", action="store_true",
                        help=f"when the budgets run out, print the trusted fields of the last "
                             f"output, marked degraded, and exit {EXIT_DEGRADED} (off by default)")
    layers.add_argument("--rules", metavar="MODULE:ATTR",
                        help="semantic rules to check after the schema, as module:attribute "
                             "(a list of rules, or a function returning one)")
    layers.add_argument("--strict-integers", action="store_true",
                        help="refuse 1.0 where the schema says integer")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress and no report (failures and warnings are still shown)")
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("demo", help="invoice example: unconstrained vs constrained, side by side")
    p.add_argument("--task", default="invoice",
                   help="example name in examples/ (invoice, ticket_triage, tool_call)")
    p.add_argument("--examples", default=str(EXAMPLES_DIR), help="examples folder")
    p.add_argument("--model", default="smollm2", help="smollm2 (default), gemma3 or a .gguf path")
    p.add_argument("--max-tokens", type=int, default=640, help="token budget (default 640)")
    p.add_argument("--width", type=int, default=None,
                   help="columns for the side-by-side view (default: the terminal's; "
                        "below 120 the outputs are stacked)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("eval", help="compare constrained and unconstrained generation on prompts")
    p.add_argument("--schema", required=True, help="JSON Schema file")
    p.add_argument("--prompts", required=True,
                   help="prompts: .jsonl, .json list, or text with prompts separated by ---")
    p.add_argument("--rules", help="semantic rules to check, as module:attribute (a list)")
    p.add_argument("--model", default="smollm2", help="smollm2 (default), gemma3 or a .gguf path")
    p.add_argument("--max-tokens", type=int, default=512, help="token limit per output (512)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (greedy by default)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FormcastError as exc:
        print(f"formcast {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
