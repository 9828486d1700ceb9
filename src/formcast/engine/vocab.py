"""The vocabulary as the engine sees it: token id -> the exact bytes it adds to the text.

Grammars are matched on bytes, so every token is judged by its whole byte string, including
tokens that cross grammar boundaries (``{"``, ``":``) and tokens that carry only part of a
UTF-8 character (``<0xE4>``). Special tokens (control, unknown, unused, end-of-generation)
add no bytes: they can never appear inside grammar text; the matcher allows the
``eos_ids`` only where the grammar may end.

A vocabulary has a ``fingerprint`` over everything that can change a mask; compiled artifacts
derived from it are cached under that fingerprint, never under the model's name.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from formcast.engine import vocab_cache
from formcast.engine.models import gemma3_gguf_path, smollm2_gguf_path
from formcast.engine.vocab_gguf import VocabParts
from formcast.errors import VocabularyError

__all__ = ["Vocabulary", "gemma3_gguf_path", "smollm2_gguf_path"]


class Vocabulary:
    """Token bytes, end-of-generation ids and special ids of one model's tokenizer.

    Build it with ``from_gguf``, ``from_huggingface`` or ``from_tokens``; treat it as
    read-only (the fingerprint is computed once).
    """

    __slots__ = ("token_bytes", "size", "eos_ids", "special_ids", "name", "fingerprint",
                 "_special_names")

    token_bytes: list[bytes]
    size: int
    eos_ids: frozenset[int]
    special_ids: frozenset[int]
    name: str
    fingerprint: str

    def __init__(self, token_bytes: Sequence[bytes], *, eos_ids: Iterable[int],
                 special_ids: Iterable[int] = (), name: str = "custom",
                 special_names: dict[int, str] | None = None) -> None:
        tokens = [bytes(b) for b in token_bytes]
        size = len(tokens)
        if size == 0:
            raise VocabularyError(f"vocabulary {name!r} has no tokens")
        eos = frozenset(int(t) for t in eos_ids)
        special = frozenset(int(t) for t in special_ids) | eos
        bad = sorted(t for t in special if not 0 <= t < size)
        if bad:
            raise VocabularyError(f"vocabulary {name!r}: token id {bad[0]} is outside the "
                                  f"vocabulary (0..{size - 1})")
        for tid in special:
            if tokens[tid]:
                raise VocabularyError(
                    f"vocabulary {name!r}: special token {tid} has bytes {tokens[tid]!r}; "
                    "special and end-of-generation tokens must map to b''")
        self.token_bytes = tokens
        self.size = size
        self.eos_ids = eos
        self.special_ids = special
        self.name = name
        self._special_names = dict(special_names or {})
        self.fingerprint = _fingerprint(tokens, eos, special)

    # -- construction -------------------------------------------------------------------

    @classmethod
    def from_tokens(cls, token_bytes: Sequence[bytes], *, eos_ids: Iterable[int],
                    special_ids: Iterable[int] = (), name: str = "custom") -> Vocabulary:
        """A vocabulary from explicit token bytes, for tests and custom tokenizers.

        End-of-generation ids are special too; both must map to ``b""``.
        """
        return cls(token_bytes, eos_ids=eos_ids, special_ids=special_ids, name=name)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], *, use_cache: bool = True) -> Vocabulary:
        """The vocabulary stored in a GGUF model's metadata (no llama.cpp needed).

        Results are cached on disk (see ``formcast.engine.vocab_cache``), keyed by the
        file's absolute path, size and mtime. Raises VocabularyError for a missing file, a
        file that is not GGUF, or a GGUF without a tokenizer.
        """
        path = Path(path)
        if not path.is_file():
            what = "is not a file" if path.exists() else "no such file"
            raise VocabularyError(f"{path}: {what} (expected a GGUF model file)")
        name = path.name.removesuffix(".gguf")
        key = vocab_cache.source_key(path) if use_cache else None
        if key is not None:
            cached = cls._from_cache(key)
            if cached is not None:
                return cached
        from formcast.engine.vocab_gguf import read_gguf_vocabulary

        vocab = cls._from_parts(read_gguf_vocabulary(path), name)
        if key is not None:
            vocab_cache.store(key, vocab.token_bytes, vocab._cache_record())
        return vocab

    @classmethod
    def from_huggingface(cls, tokenizer: Any, *, vocab_size: int | None = None,
                         extra_eos_ids: Iterable[int] = (), name: str | None = None
                         ) -> Vocabulary:
        """The vocabulary of a transformers fast tokenizer or a ``tokenizers.Tokenizer``.

        ``vocab_size`` pads to the model's logits width when it exceeds the tokenizer's ids;
        ``extra_eos_ids`` adds end ids the tokenizer does not declare (for example from a
        model's generation config).
        """
        from formcast.engine.vocab_hf import read_hf_vocabulary

        parts = read_hf_vocabulary(tokenizer, vocab_size=vocab_size, extra_eos_ids=extra_eos_ids)
        if name is None:
            name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
        return cls._from_parts(parts, name)

    @classmethod
    def _from_parts(cls, parts: VocabParts, name: str) -> Vocabulary:
        return cls(parts.token_bytes, eos_ids=parts.eos_ids, special_ids=parts.special_ids,
                   name=name, special_names=parts.special_names)

    @classmethod
    def _from_cache(cls, key: str) -> Vocabulary | None:
        entry = vocab_cache.load(key)
        if entry is None:
            return None
        token_bytes, record = entry
        try:
            vocab = cls(token_bytes, eos_ids=record["eos_ids"], special_ids=record["special_ids"],
                        name=record["name"],
                        special_names={int(k): v for k, v in record["special_names"].items()})
            intact = vocab.fingerprint == record["fingerprint"]
        except (KeyError, TypeError, ValueError, AttributeError, VocabularyError):
            intact = False
        if not intact:
            vocab_cache.discard(key)
            return None
        return vocab

    def _cache_record(self) -> dict[str, Any]:
        return {"name": self.name, "fingerprint": self.fingerprint,
                "eos_ids": sorted(self.eos_ids), "special_ids": sorted(self.special_ids),
                "special_names": {str(k): v for k, v in self._special_names.items()}}

    # -- use ------------------------------------------------------------------------------

    def token_text(self, tid: int) -> str:
        """A readable form of one token for errors and debugging, e.g. ``' the'`` or
        ``<|im_end|>``. Never raises: an id outside the vocabulary reads ``<invalid id N>``."""
        if not 0 <= tid < self.size:
            return f"<invalid id {tid}>"
        if tid in self.special_ids:
            return self._special_names.get(tid) or f"<special {tid}>"
        return repr(self.token_bytes[tid].decode("utf-8", errors="backslashreplace"))

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes a sequence of token ids spells (special tokens add nothing)."""
        ids = list(ids)
        if ids and (min(ids) < 0 or max(ids) >= self.size):
            bad = next(i for i in ids if not 0 <= i < self.size)
            raise VocabularyError(f"token id {bad} is outside vocabulary {self.name!r} "
                                  f"(0..{self.size - 1})")
        table = self.token_bytes
        return b"".join([table[i] for i in ids])

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        """Equal when every token's bytes, the end ids and the special ids are equal."""
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self.fingerprint == other.fingerprint and self.size == other.size

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return (f"Vocabulary(name={self.name!r}, size={self.size}, eos={sorted(self.eos_ids)}, "
                f"special={len(self.special_ids)}, fingerprint={self.fingerprint[:12]}...)")


def _fingerprint(tokens: list[bytes], eos: frozenset[int], special: frozenset[int]) -> str:
    """sha256 (first 32 hex) over every token's length and bytes, then the eos and special ids."""
    h = hashlib.sha256(b"formcast-vocabulary\0")
    h.update(len(tokens).to_bytes(8, "little"))
    h.update(b"".join(len(b).to_bytes(4, "little") + b for b in tokens))
    h.update(b"eos:" + ",".join(map(str, sorted(eos))).encode())
    h.update(b";special:" + ",".join(map(str, sorted(special))).encode())
    return h.hexdigest()[:32]
