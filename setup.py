"""Build hook for the optional C extensions (everything else is in pyproject.toml).

- The engine's C trie walk, determiniser and NFA builder. ``optional=True``: on a machine
  without a C compiler the install still succeeds and the engine falls back to its Python
  code (slower cold masks, same answers).
- The grammar front ends (JSON Schema, GBNF, regex) compiled by mypyc, a build requirement:
  the same Python modules as native code, about 1.45x faster to compile a JSON Schema.
  Optional too: without a C compiler they stay Python. The IR's node classes
  (``ir_nodes.py``) are not compiled: mypyc's frozen dataclasses were no faster to build, and
  cannot be unpickled; the functions that build nodes (``ir_build.py``) are. ``ir.py`` (the
  ``Grammar`` class, and the IR gathered in one namespace) stays Python too.
  ``FORMCAST_NO_MYPYC=1`` at install skips this; ``FORMCAST_PURE_PYTHON=1`` at run time
  loads the Python source instead.
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup

ENGINE_EXTENSIONS = [
    Extension(
        f"formcast.engine.{name}",
        sources=[f"src/formcast/engine/{name}.c"],
        depends=["src/formcast/engine/_determinise_api.h",
                 "src/formcast/engine/_seq_items.h",
                 "src/formcast/engine/_nfa_paste.h",
                 "src/formcast/engine/_parser_closure.h"],
        extra_compile_args=["-O2"],
        optional=True,
    )
    for name in ("_trie_walk", "_determinise", "_nfa_build")
] + [
    # The IR's expression nodes as C types (ir_nodes.py keeps the dataclasses as the
    # reference and the fallback).
    Extension("formcast.grammar._ir_nodes", sources=["src/formcast/grammar/_ir_nodes.c"],
              extra_compile_args=["-O2"], optional=True),
    # The canonical JSON text a compile hashes its schema by (cache.canonical_utf8).
    Extension("formcast.grammar._canonical", sources=["src/formcast/grammar/_canonical.c"],
              extra_compile_args=["-O2"], optional=True),
]

# mypycify type-checks and writes the C code when called: only for commands that build
# (not for the metadata and build-requirement queries pip makes first).
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}
# Modules of formcast.grammar left as Python source (see the docstring).
NOT_COMPILED = {"__init__.py", "ir.py", "ir_nodes.py"}


def compiled_front_end() -> list[Extension]:
    """mypyc extensions of the grammar modules, or none when mypyc is not wanted or there."""
    if os.environ.get("FORMCAST_NO_MYPYC") or not BUILD_COMMANDS & set(sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        # pip's isolated build has it (pyproject's build requirements); a bare
        # `setup.py build_ext` in a venv without mypy would leave stale compiled modules.
        print("formcast: mypy (mypyc) is not installed here, so the grammar modules are not "
              "compiled; pip install 'mypy==1.13.0' first, or reinstall with pip",
              file=sys.stderr)
        return []
    modules = sorted(str(p) for p in Path("src/formcast/grammar").glob("*.py")
                     if p.name not in NOT_COMPILED)
    # separate=True: one extension per module (gcc can build them in parallel; most of the
    # time is mypycify's own). It makes mypyc run mypy incrementally, and a cache left by an
    # earlier build can give modules that disagree (a missing export): each build starts
    # from an empty cache of its own.
    cache = Path("build") / "mypyc-cache"
    shutil.rmtree(cache, ignore_errors=True)
    extensions = mypycify(["--cache-dir", str(cache), *modules], separate=True, opt_level="3")
    for extension in extensions:
        extension.optional = True
    return extensions


setup(
    ext_modules=ENGINE_EXTENSIONS + compiled_front_end(),
    options={"build_ext": {"parallel": os.cpu_count() or 1}},
)
