"""The ``formcast`` command line: ``generate``, ``compile``, ``eval``, ``bench``.

Each sub-command lives in its own ``_cmd_*`` function; ``main`` only parses arguments and turns
formcast errors into one clear line on stderr with exit code 2 (never a bare traceback).
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


@dataclass
class GenerationRequest:
    """Everything one ``generate`` call needs, model aside: messages, constraint, sampling."""

    messages: list[dict[str, str]]
    grammar: Any = None
    schema: dict[str, Any] | None = None
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None


def run_generation(runtime: Any, request: GenerationRequest,
                   on_token: Callable[[int], None] | None = None) -> GenerationResult:
    """The one generation call of the CLI (layer 1 only, for now).

    ``generate`` and ``demo`` go through here, so routing them through the full pipeline
    (repair, validate, retry) later means changing this function only.
    """
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
    return [f"{item.pointer} ({item.reason})" for item in report.unenforced]


def _request_from_args(args: argparse.Namespace) -> GenerationRequest:
    from formcast.grammar.ir import Grammar
    from formcast.pipeline.prompt import plain_messages, schema_messages

    if args.prompt_file is not None:
        task = _read_text(args.prompt_file, "prompt file")
    else:
        task = args.prompt
    if not task or not task.strip():
        raise FormcastError("the prompt is empty")
    schema = None
    grammar = None
    if args.schema is not None:
        schema = _load_schema(args.schema)
        messages = schema_messages(schema, task)
        if not args.no_constraint:
            grammar = Grammar.from_json_schema(schema, strict=args.strict)
    else:
        messages = plain_messages(task)
        if not args.no_constraint and args.gbnf is not None:
            grammar = Grammar.from_gbnf(_read_text(args.gbnf, "GBNF file"))
        elif not args.no_constraint:
            grammar = Grammar.from_regex(args.regex)
    return GenerationRequest(messages, grammar, schema, max_tokens=args.max_tokens,
                             temperature=args.temperature, top_p=args.top_p, seed=args.seed)


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


def _format_report(result: GenerationResult, *, constrained: bool,
                   unenforced: Sequence[str] = ()) -> str:
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
        if unenforced:
            lines.append("not enforced by the grammar (check after generation): "
                         + "; ".join(unenforced))
    else:
        lines.append("unconstrained")
    if result.finish_reason == "length":
        lines.append("stopped at the token budget: the output is incomplete (raise --max-tokens)")
    return "\n".join(lines)


def _cmd_generate(args: argparse.Namespace) -> int:
    request = _request_from_args(args)
    progress = _Progress(enabled=not args.quiet)
    runtime = _load_runtime(args.model, progress)
    progress.start("generating")
    try:
        result = run_generation(runtime, request, on_token=progress.tokens)
    finally:
        progress.done()
    print(result.text)
    if not args.quiet:
        report = _format_report(result, constrained=request.grammar is not None,
                                unenforced=_unenforced(request.grammar))
        print("\n".join(f"formcast: {line}" for line in report.splitlines()), file=sys.stderr)
    return 0


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
    """``module:attribute`` naming a list of rules (or a function returning one)."""
    if not spec:
        return []
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise FormcastError(f"--rules expects module:attribute, got {spec!r}")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise FormcastError(f"cannot load rules {spec}: {exc}") from None
    found = found() if callable(found) and not isinstance(found, list | tuple) else found
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

    p = sub.add_parser("generate", help="generate constrained output with a local model")
    constraint = p.add_mutually_exclusive_group(required=True)
    constraint.add_argument("--schema", help="JSON Schema file (builds the prompt and the constraint)")
    constraint.add_argument("--gbnf", help="constrain by a GBNF grammar file instead")
    constraint.add_argument("--regex", help="constrain by a regular expression instead")
    task = p.add_mutually_exclusive_group(required=True)
    task.add_argument("--prompt", help="the task text")
    task.add_argument("--prompt-file", help="file holding the task text")
    p.add_argument("--model", default="smollm2",
                   help="smollm2 (default), gemma3, or a path to a .gguf file")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--max-tokens", type=int, default=512, help="token budget (default 512)")
    p.add_argument("--no-constraint", action="store_true",
                   help="generate without the grammar (same prompt), to compare")
    p.add_argument("--strict", action="store_true",
                   help="refuse a schema with keywords the grammar cannot enforce")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no report")
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
