"""The grammar front ends (JSON Schema, GBNF, regex) and the IR they compile to.

An install may compile these modules with mypyc (see setup.py): each ``x.py`` then has an
extension module beside it, which Python imports in its place. ``FORMCAST_PURE_PYTHON=1``
(read when this package is first imported) loads the ``.py`` source instead. An extension
older than its source, a source tree edited after its install, is refused: it would run code
that is no longer there.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

# Source files may be written up to this long after their extension by an installer.
_INSTALL_SLACK_SECONDS = 2.0


class _SourceFirst:
    """A meta-path finder that loads this package's modules from their ``.py`` files."""

    def __init__(self, package: str, directory: Path) -> None:
        self.prefix = package + "."
        self.directory = directory

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if not name.startswith(self.prefix) or "." in name[len(self.prefix):]:
            return None
        source = self.directory / (name[len(self.prefix):] + ".py")
        return importlib.util.spec_from_file_location(name, source) if source.is_file() else None


def _refuse_stale_extensions(directory: Path) -> None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for extension in directory.glob("*" + suffix):
            stem = extension.name[: -len(suffix)]
            source = directory / (stem + ".py")
            if not source.is_file():
                continue
            # mypyc's code is in ``x__mypyc``; ``x`` is a shim a rebuild may leave as it was.
            code = directory / (stem + "__mypyc" + suffix)
            built = max(extension.stat().st_mtime,
                        code.stat().st_mtime if code.is_file() else 0.0)
            if source.stat().st_mtime > built + _INSTALL_SLACK_SECONDS:
                raise ImportError(
                    f"{source} changed after it was compiled to {extension.name}: reinstall "
                    "formcast (make install, or pip install -e .) to compile it again, or set "
                    "FORMCAST_PURE_PYTHON=1 to run the Python source")


_HERE = Path(__file__).parent
if os.environ.get("FORMCAST_PURE_PYTHON"):
    sys.meta_path.insert(0, _SourceFirst(__name__, _HERE))
else:
    _refuse_stale_extensions(_HERE)
