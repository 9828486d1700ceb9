"""Read the key-value metadata of a GGUF file, fast, without loading any tensor.

``gguf.GGUFReader`` builds one numpy view per array element, which takes 10-15 s for
Gemma 3's 262,144-token vocabulary. The metadata section is a simple, documented layout
(magic, version, counts, then typed key-value pairs), so reading it directly from a memory
map takes well under a second. Only the fields up to the end of the key-value section are
touched; tensor data is never read.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any

import numpy as np

from formcast.errors import VocabularyError

GGUF_MAGIC = b"GGUF"

# GGUF value type codes (GGUF spec; same numbering as gguf.GGUFValueType).
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = range(10)
_UINT64, _INT64, _FLOAT64 = 10, 11, 12

_SCALAR_DTYPES: dict[int, str] = {
    _UINT8: "u1", _INT8: "i1", _UINT16: "u2", _INT16: "i2", _UINT32: "u4", _INT32: "i4",
    _FLOAT32: "f4", _BOOL: "?", _UINT64: "u8", _INT64: "i8", _FLOAT64: "f8",
}


def is_gguf_file(path: str | os.PathLike[str]) -> bool:
    """True when the file starts with the GGUF magic bytes."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


def read_gguf_metadata(path: str | os.PathLike[str], *,
                       prefixes: tuple[str, ...] = ("general.", "tokenizer."),
                       skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Return the metadata whose keys start with one of ``prefixes`` and are not in ``skip``.

    Scalars come back as Python values, strings as ``str`` (invalid UTF-8 replaced), numeric
    arrays as numpy arrays and string arrays as lists of ``str``. Other keys are stepped over
    without decoding their values (a BPE merge list is 50k+ strings nobody here needs).

    Raises VocabularyError naming the file when it is missing, not GGUF, or truncated.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            if head != GGUF_MAGIC:
                raise VocabularyError(
                    f"{path}: not a GGUF file (first bytes {head!r}, expected {GGUF_MAGIC!r})")
            try:
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError) as exc:
                raise VocabularyError(f"{path}: cannot map file ({exc})") from None
    except FileNotFoundError:
        raise VocabularyError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise VocabularyError(f"{path}: is a directory, not a GGUF file") from None
    except PermissionError:
        raise VocabularyError(f"{path}: permission denied") from None
    try:
        return _MetadataParser(buf, path).parse(prefixes, skip)
    finally:
        buf.close()


class _MetadataParser:
    """Cursor over the GGUF header; one instance per read."""

    def __init__(self, buf: mmap.mmap, path: str) -> None:
        self.buf = buf
        self.path = path
        self.pos = 4
        self.endian = "<"

    def parse(self, prefixes: tuple[str, ...], skip: frozenset[str]) -> dict[str, Any]:
        try:
            return self._parse(prefixes, skip)
        except VocabularyError:
            raise
        except (struct.error, IndexError, ValueError, OverflowError) as exc:
            raise VocabularyError(
                f"{self.path}: truncated or corrupt GGUF metadata at byte {self.pos} ({exc})"
            ) from None

    def _parse(self, prefixes: tuple[str, ...], skip: frozenset[str]) -> dict[str, Any]:
        version = struct.unpack_from("<I", self.buf, 4)[0]
        if version & 0xFFFF == 0:  # a big-endian file reads as a huge little-endian number
            self.endian = ">"
            version = struct.unpack_from(">I", self.buf, 4)[0]
        if version < 2:
            raise VocabularyError(f"{self.path}: GGUF version {version} is too old (need 2 or 3)")
        self.pos = 8
        _tensor_count = self._unpack("Q")
        kv_count = self._unpack("Q")
        out: dict[str, Any] = {}
        for _ in range(kv_count):
            key = self._string()
            vtype = self._unpack("I")
            wanted = key.startswith(prefixes) and key not in skip
            value = self._value(vtype, decode=wanted)
            if wanted:
                out[key] = value
        return out

    def _unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(self.endian + fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def _raw_string(self) -> bytes:
        n = self._unpack("Q")
        end = self.pos + n
        if end > len(self.buf):
            raise ValueError(f"string of {n} bytes runs past the end of the file")
        raw = self.buf[self.pos:end]
        self.pos = end
        return raw

    def _string(self) -> str:
        return self._raw_string().decode("utf-8", errors="replace")

    def _value(self, vtype: int, *, decode: bool) -> Any:
        if vtype in _SCALAR_DTYPES:
            dtype = np.dtype(_SCALAR_DTYPES[vtype]).newbyteorder(self.endian)
            value = np.frombuffer(self.buf, dtype=dtype, count=1, offset=self.pos)[0].item()
            self.pos += dtype.itemsize
            return value
        if vtype == _STRING:
            return self._string() if decode else self._raw_string()
        if vtype == _ARRAY:
            item_type = self._unpack("I")
            count = self._unpack("Q")
            return self._array(item_type, count, decode=decode)
        raise ValueError(f"unknown GGUF value type {vtype}")

    def _array(self, item_type: int, count: int, *, decode: bool) -> Any:
        if item_type in _SCALAR_DTYPES:
            dtype = np.dtype(_SCALAR_DTYPES[item_type]).newbyteorder(self.endian)
            nbytes = dtype.itemsize * count
            if self.pos + nbytes > len(self.buf):
                raise ValueError(f"array of {count} items runs past the end of the file")
            arr = None
            if decode:
                arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos += nbytes
            return arr
        if item_type == _STRING:
            return self._string_array(count, decode=decode)
        return [self._value(item_type, decode=decode) for _ in range(count)]

    def _string_array(self, count: int, *, decode: bool) -> list[str] | None:
        buf, pos, size = self.buf, self.pos, len(self.buf)
        unpack_len = struct.Struct(self.endian + "Q").unpack_from
        items: list[str] = []
        append = items.append
        for _ in range(count):
            n = unpack_len(buf, pos)[0]
            start = pos + 8
            pos = start + n
            if pos > size:
                raise ValueError("string array runs past the end of the file")
            if decode:
                append(buf[start:pos].decode("utf-8", errors="replace"))
        self.pos = pos
        return items if decode else None
