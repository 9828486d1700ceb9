"""On-disk cache of derived vocabularies, so a 262k-token vocabulary loads in milliseconds.

One ``.npz`` file per source file, named by a key over the source's absolute path, size,
modification time and this module's format version: editing or replacing the model file, or
changing how vocabularies are derived, gives a new key. Entries are written atomically and
checked on load (format, fingerprint recomputed by the caller); anything unreadable counts
as a miss and is rebuilt, never trusted.

``FORMCAST_CACHE_DIR`` moves the cache (default ``~/.cache/formcast``); vocabularies live in
its ``vocab/`` folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

# Bump when the file layout changes: old entries are then ignored. Changes to the derivation
# rules are caught without a bump: the key also hashes the source of the modules that hold them.
FORMAT_VERSION = 1
_RULE_MODULES = ("gguf_meta.py", "vocab_gguf.py", "vocab_bytes.py", "vocab_cache.py")


def cache_dir() -> Path:
    """Folder holding cached vocabularies (``$FORMCAST_CACHE_DIR/vocab``)."""
    root = os.environ.get("FORMCAST_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "formcast"
    return base / "vocab"


@lru_cache(maxsize=1)
def _rules_digest() -> str:
    h = hashlib.sha256()
    for name in _RULE_MODULES:
        try:
            h.update(Path(__file__).with_name(name).read_bytes())
        except OSError:  # installed without sources (zip): the format version alone decides
            h.update(name.encode())
    return h.hexdigest()[:16]


def source_key(path: str | os.PathLike[str]) -> str:
    """Cache key of a source file: absolute path, size, mtime, format version and rules."""
    resolved = Path(path).resolve()
    st = resolved.stat()
    ident = (f"{resolved}\0{st.st_size}\0{st.st_mtime_ns}\0v{FORMAT_VERSION}"
             f"\0{_rules_digest()}")
    return hashlib.sha256(ident.encode("utf-8", errors="surrogateescape")).hexdigest()[:40]


def entry_path(key: str) -> Path:
    return cache_dir() / f"{key}.npz"


def store(key: str, token_bytes: list[bytes], record: dict[str, Any]) -> Path | None:
    """Write one entry atomically; returns its path, or None when the cache is not writable.

    ``record`` is JSON-serialisable metadata (name, fingerprint, ids...). A cache that cannot
    be written only costs speed, so OSErrors are swallowed.
    """
    lengths = np.fromiter((len(b) for b in token_bytes), dtype=np.int64, count=len(token_bytes))
    blob = np.frombuffer(b"".join(token_bytes), dtype=np.uint8)
    meta = json.dumps({**record, "format": FORMAT_VERSION}).encode("utf-8")
    target = entry_path(key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, blob=blob, lengths=lengths,
                         meta=np.frombuffer(meta, dtype=np.uint8))
            os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is not a secret
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return None
    return target


def load(key: str) -> tuple[list[bytes], dict[str, Any]] | None:
    """Read one entry: ``(token_bytes, record)``, or None when absent, stale or unreadable."""
    target = entry_path(key)
    if not target.is_file():
        return None
    try:
        with np.load(target, allow_pickle=False) as data:
            blob = data["blob"].tobytes()
            lengths = data["lengths"]
            record = json.loads(data["meta"].tobytes().decode("utf-8"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, UnicodeDecodeError, EOFError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT_VERSION:
        return None
    if lengths.ndim != 1 or (lengths < 0).any() or int(lengths.sum()) != len(blob):
        return None
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return [blob[s:e] for s, e in zip(starts, ends, strict=True)], record


def discard(key: str) -> None:
    """Remove an entry found to be corrupt."""
    with contextlib.suppress(OSError):
        entry_path(key).unlink(missing_ok=True)
