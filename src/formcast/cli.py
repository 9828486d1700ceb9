"""The ``formcast`` command line: ``generate``, ``compile``, ``eval``, ``bench``.

Each sub-command lives in its own ``_cmd_*`` function; ``main`` only parses arguments and turns
formcast errors into one clear line on stderr with exit code 2 (never a bare traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from formcast.errors import FormcastError


def _cmd_compile(args: argparse.Namespace) -> int:
    raise FormcastError("compile is not implemented yet")


def _cmd_generate(args: argparse.Namespace) -> int:
    raise FormcastError("generate is not implemented yet")


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

    p = sub.add_parser("compile", help="compile a JSON Schema / GBNF / regex and print GBNF + report")
    p.add_argument("--schema", help="JSON Schema file")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("generate", help="generate constrained output with a local model")
    p.add_argument("--schema", help="JSON Schema file")
    p.set_defaults(func=_cmd_generate)

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
