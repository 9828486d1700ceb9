"""The ``formcast`` command line: ``generate``, ``compile``, ``eval``, ``bench``.

Each sub-command lives in its own ``_cmd_*`` function; ``main`` only parses arguments and turns
formcast errors into one clear line on stderr with exit code 2 (never a bare traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from formcast.errors import FormcastError


def _cmd_compile(args: argparse.Namespace) -> int:
    raise FormcastError("compile is not implemented yet")


def _cmd_generate(args: argparse.Namespace) -> int:
    raise FormcastError("generate is not implemented yet")


def _cmd_eval(args: argparse.Namespace) -> int:
    raise FormcastError("eval is not implemented yet")


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
    p.add_argument("--schema", help="JSON Schema file")
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
