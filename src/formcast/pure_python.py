"""``FORMCAST_PURE_PYTHON=1``: run the Python code paths instead of the C extensions.

Read at each use, not once at import, so that a test can switch it for one block; the
lookup goes straight to the environment's byte dict (``os.environ.get`` ran three Python
functions per call, and a compile asks about five times)."""

from __future__ import annotations

import os

_NAME = "FORMCAST_PURE_PYTHON"
# os.environ keeps its values in ``_data`` under encoded keys, and writes through it
# (``os.environ[...] = ``, ``monkeypatch.setenv``); fall back to the public mapping where a
# Python implementation has no such dict.
_DATA = getattr(os.environ, "_data", None)
_KEY = os.environ.encodekey(_NAME) if _DATA is not None else None  # type: ignore[attr-defined]


def pure_python() -> bool:
    """Whether ``FORMCAST_PURE_PYTHON`` is set to a non-empty value."""
    if _DATA is not None:
        return bool(_DATA.get(_KEY))
    return bool(os.environ.get(_NAME))
