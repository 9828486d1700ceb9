"""The grammar modules as mypyc extensions (setup.py) and as Python source.

An install compiles the front ends; ``FORMCAST_PURE_PYTHON=1`` runs their source. Both must
compile every schema to the same grammar, and an extension that no longer matches its edited
source must not be imported silently.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import formcast.grammar
import formcast.grammar.json_schema
from formcast.grammar import _refuse_stale_extensions
from formcast.grammar.json_schema import compile_json_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = sorted((ROOT / "examples" / "schemas").glob("*.json")) + sorted(
    (ROOT / "benchmarks" / "grammars" / "schema").glob("*.schema.json"))
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

_PRINT_GRAMMARS = """
import json, sys
import formcast.grammar.json_schema as m
from formcast.grammar.json_schema import compile_json_schema
out = {"module": m.__file__, "grammars": []}
for path in sys.argv[1:]:
    g = compile_json_schema(json.load(open(path)), strict=False, cache=None)
    out["grammars"].append([g.to_gbnf(), [u.as_tuple() for u in g.report.unenforced]])
print(json.dumps(out))
"""


def _compiled_in_process() -> bool:
    return not formcast.grammar.json_schema.__file__.endswith(".py")


def test_source_and_this_process_compile_the_same_grammars() -> None:
    env = dict(os.environ, FORMCAST_PURE_PYTHON="1")
    run = subprocess.run([sys.executable, "-c", _PRINT_GRAMMARS, *map(str, SCHEMAS)], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    pure = json.loads(run.stdout)
    assert pure["module"].endswith("json_schema.py")  # the switch loads the source
    for path, (gbnf, unenforced) in zip(SCHEMAS, pure["grammars"], strict=True):
        here = compile_json_schema(json.loads(path.read_text()), strict=False, cache=None)
        assert here.to_gbnf() == gbnf, path.name
        assert [list(u.as_tuple()) for u in here.report.unenforced] == unenforced, path.name


@pytest.mark.skipif(not _compiled_in_process(), reason="the grammar modules are not compiled "
                    "in this install (no mypyc, FORMCAST_NO_MYPYC or FORMCAST_PURE_PYTHON)")
def test_an_install_with_mypyc_imports_the_extensions() -> None:
    assert formcast.grammar.json_schema.__file__.endswith(SUFFIX)


def _touch(path: Path, mtime: float) -> None:
    path.write_text("")
    os.utime(path, (mtime, mtime))


def test_an_extension_older_than_its_source_is_refused(tmp_path: Path) -> None:
    _touch(tmp_path / f"json_schema{SUFFIX}", 1_000_000)
    _touch(tmp_path / "json_schema.py", 1_000_000 + 60)
    with pytest.raises(ImportError, match=r"json_schema\.py changed after it was compiled"):
        _refuse_stale_extensions(tmp_path)


def test_a_rebuild_that_kept_the_shim_is_not_stale(tmp_path: Path) -> None:
    _touch(tmp_path / f"json_schema{SUFFIX}", 1_000_000)  # the shim, unchanged by the rebuild
    _touch(tmp_path / "json_schema.py", 1_000_000 + 60)
    _touch(tmp_path / f"json_schema__mypyc{SUFFIX}", 1_000_000 + 120)
    _refuse_stale_extensions(tmp_path)
    _touch(tmp_path / "json_schema.py", 1_000_000 + 180)  # edited after that rebuild
    with pytest.raises(ImportError, match="changed after it was compiled"):
        _refuse_stale_extensions(tmp_path)


def test_an_extension_written_with_its_source_is_imported(tmp_path: Path) -> None:
    _touch(tmp_path / "json_schema.py", 1_000_000)
    _touch(tmp_path / f"json_schema{SUFFIX}", 1_000_000 + 60)
    _touch(tmp_path / "regex.py", 1_000_000 + 61)  # an installer wrote it a moment later
    _touch(tmp_path / f"regex{SUFFIX}", 1_000_000 + 60)
    _touch(tmp_path / f"regex__mypyc{SUFFIX}", 1_000_000)  # a helper without a source
    _refuse_stale_extensions(tmp_path)
