"""Derive token bytes, end-of-generation ids and special ids from GGUF tokenizer metadata.

The rules follow what llama.cpp does when it turns a token into text with special tokens
hidden, so a mask computed from these bytes matches what the runtime will print:

* NORMAL tokens: byte-level decode for ``gpt2`` vocabularies, ``▁`` -> space for SentencePiece
  (``llama``) and Unigram (``t5``) vocabularies;
* BYTE tokens ``<0xNN>``: the single byte NN;
* USER_DEFINED tokens: their literal UTF-8 text (Gemma's runs of spaces, tabs, html tags);
* CONTROL, UNKNOWN and UNUSED tokens: no bytes at all, and listed as special.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from formcast.engine.gguf_meta import read_gguf_metadata
from formcast.engine.vocab_bytes import (
    END_OF_GENERATION_TEXTS,
    byte_level_to_bytes,
    parse_byte_token,
    sentencepiece_to_bytes,
)
from formcast.errors import VocabularyError

# llama.cpp token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_HIDDEN_TYPES = (UNKNOWN, CONTROL, UNUSED)

_SPELLINGS = {"gpt2": byte_level_to_bytes, "llama": sentencepiece_to_bytes,
              "t5": sentencepiece_to_bytes}

# llama.cpp also ends generation on "</s>" (added for PaddleOCR), even where it is ordinary
# text such as Gemma 3's html tag 212, and hides it as a control token; it takes the rule back
# for vocabularies with "<|tool_response>" (Gemma 4). Mirrored so masks match what the
# llama.cpp runtime will print and where it will stop.
_LLAMA_CPP_EXTRA_EOG = "</s>"
_LLAMA_CPP_EXTRA_EOG_UNLESS = "<|tool_response>"

_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
             "tokenizer.ggml.eom_token_id")


class VocabParts(NamedTuple):
    """What a vocabulary reader produces; ``Vocabulary`` is built from it."""

    token_bytes: list[bytes]
    eos_ids: frozenset[int]
    special_ids: frozenset[int]
    special_names: dict[int, str]


def read_gguf_vocabulary(path: str | os.PathLike[str]) -> VocabParts:
    """Read the tokenizer of a GGUF model file. Raises VocabularyError naming what is missing."""
    path = os.fspath(path)
    meta = read_gguf_metadata(path, prefixes=("tokenizer.ggml.",),
                              skip=frozenset({"tokenizer.ggml.merges", "tokenizer.ggml.scores"}))
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if model is None or tokens is None:
        missing = "tokenizer.ggml.model" if model is None else "tokenizer.ggml.tokens"
        raise VocabularyError(f"{path}: GGUF file has no tokenizer (metadata key {missing!r} "
                              "is missing)")
    if not tokens:
        raise VocabularyError(f"{path}: GGUF tokenizer has an empty token list")
    spell = _SPELLINGS.get(model)
    if spell is None:
        raise VocabularyError(
            f"{path}: tokenizer model {model!r} is not supported (supported: "
            f"{', '.join(sorted(_SPELLINGS))}); build the vocabulary with "
            "Vocabulary.from_tokens instead")
    types = _token_types(meta, len(tokens), path)
    return _derive(tokens, types, spell, meta, path)


def _token_types(meta: dict[str, Any], n: int, path: str) -> np.ndarray:
    types = meta.get("tokenizer.ggml.token_type")
    if types is None:  # old files: every token is a normal one, as llama.cpp assumes
        return np.full(n, NORMAL, dtype=np.int32)
    types = np.asarray(types, dtype=np.int32)
    if len(types) != n:
        raise VocabularyError(f"{path}: tokenizer.ggml.token_type has {len(types)} entries "
                              f"but tokenizer.ggml.tokens has {n}")
    return types


def _derive(tokens: list[str], types: np.ndarray, spell: Any, meta: dict[str, Any],
            path: str) -> VocabParts:
    end_texts = END_OF_GENERATION_TEXTS
    if _LLAMA_CPP_EXTRA_EOG_UNLESS not in tokens:
        end_texts = end_texts | {_LLAMA_CPP_EXTRA_EOG}
    token_bytes: list[bytes] = []
    special: set[int] = set()
    names: dict[int, str] = {}
    for tid, (text, ttype) in enumerate(zip(tokens, types.tolist(), strict=True)):
        if ttype in _HIDDEN_TYPES or text in end_texts:
            token_bytes.append(b"")
            special.add(tid)
            names[tid] = text
        elif ttype == BYTE:
            value = parse_byte_token(text)
            if value is None:
                raise VocabularyError(f"{path}: token {tid} is typed BYTE but its text {text!r} "
                                      "is not of the form <0xNN>")
            token_bytes.append(bytes((value,)))
        elif ttype == USER_DEFINED:
            token_bytes.append(text.encode("utf-8"))
        else:
            token_bytes.append(spell(text))

    eos = {tid for tid in special if tokens[tid] in end_texts}
    for key in _EOS_KEYS:
        tid = meta.get(key)
        if tid is None:
            continue
        if not 0 <= tid < len(tokens):
            raise VocabularyError(f"{path}: {key} = {tid} is outside the vocabulary "
                                  f"(0..{len(tokens) - 1})")
        eos.add(tid)
    for tid in eos:  # an end marker never contributes text, whatever its declared type
        token_bytes[tid] = b""
        special.add(tid)
        names.setdefault(tid, tokens[tid])
    return VocabParts(token_bytes, frozenset(eos), frozenset(special), names)
