"""Derive token bytes, end-of-generation ids and special ids from a Hugging Face tokenizer.

The spelling of the token strings is read from the tokenizer's own decoder configuration
(``ByteLevel``; or ``Replace ▁ -> space`` / ``Metaspace`` plus ``ByteFallback``), never guessed
from what a few tokens look like. Decoder steps that only act on the start of a whole text
(``Metaspace``'s dropped first space, a ``Strip`` after ``Fuse``) are left out, because a
token's bytes are what it contributes in the middle of a text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from formcast.engine.vocab_bytes import (
    END_OF_GENERATION_TEXTS,
    SPM_SPACE,
    byte_level_to_bytes,
    parse_byte_token,
)
from formcast.engine.vocab_gguf import VocabParts
from formcast.errors import VocabularyError

_Step = Callable[[str | bytes], str | bytes]


def backend_of(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind a transformers tokenizer, or the object itself."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    if hasattr(tokenizer, "to_str") and hasattr(tokenizer, "get_added_tokens_decoder"):
        return tokenizer
    raise VocabularyError(
        f"{type(tokenizer).__name__} is not a fast (Rust `tokenizers`) tokenizer, so its exact "
        "token bytes cannot be read; load it with use_fast=True, or build the vocabulary with "
        "Vocabulary.from_tokens")


def read_hf_vocabulary(tokenizer: Any, *, vocab_size: int | None = None,
                       extra_eos_ids: Iterable[int] = ()) -> VocabParts:
    """Read a transformers tokenizer or a ``tokenizers.Tokenizer``.

    ``vocab_size`` pads the vocabulary to the model's logits width when the model has more
    rows than the tokenizer has tokens (the padding ids are special and never allowed).
    """
    backend = backend_of(tokenizer)
    label = type(tokenizer).__name__
    config = json.loads(backend.to_str())
    model = config.get("model") or {}
    _check_model(model, label)
    steps = _decoder_steps(config.get("decoder"), label)

    texts: dict[int, str] = {tid: text for text, tid in
                             backend.get_vocab(with_added_tokens=True).items()}
    added = dict(backend.get_added_tokens_decoder())
    added.update(getattr(tokenizer, "added_tokens_decoder", None) or {})
    for tid, tok in added.items():
        texts[tid] = tok.content
    size = max(texts) + 1 if texts else 0
    if vocab_size is not None:
        if vocab_size < size:
            raise VocabularyError(f"{label}: vocab_size={vocab_size} is smaller than the "
                                  f"tokenizer's {size} token ids")
        size = vocab_size

    special: set[int] = set()
    names: dict[int, str] = {}
    unk = model.get("unk_token")
    token_bytes: list[bytes] = [b""] * size
    for tid in range(size):
        text = texts.get(tid)
        tok = added.get(tid)
        if text is None or (tok is not None and tok.special) or text == unk:
            special.add(tid)
            names[tid] = text if text is not None else f"<unassigned {tid}>"
        elif tok is not None:
            token_bytes[tid] = text.encode("utf-8")  # a non-special added token is plain text
        else:
            token_bytes[tid] = _spell(text, steps)

    eos = {tid for tid in special if names[tid] in END_OF_GENERATION_TEXTS}
    declared = getattr(tokenizer, "eos_token_id", None)
    for tid in [*([declared] if isinstance(declared, int) else []), *extra_eos_ids]:
        if not 0 <= tid < size:
            raise VocabularyError(f"{label}: eos token id {tid} is outside the vocabulary "
                                  f"(0..{size - 1})")
        eos.add(tid)
        special.add(tid)
        token_bytes[tid] = b""
        names.setdefault(tid, texts.get(tid, f"<eos {tid}>"))
    return VocabParts(token_bytes, frozenset(eos), frozenset(special), names)


def _check_model(model: dict[str, Any], label: str) -> None:
    kind = model.get("type")
    if kind not in ("BPE", "Unigram"):
        raise VocabularyError(f"{label}: tokenizer model {kind!r} is not supported (only BPE "
                              "and Unigram keep the text's bytes); use Vocabulary.from_tokens")
    if kind == "BPE" and (model.get("continuing_subword_prefix")
                          or model.get("end_of_word_suffix")):
        raise VocabularyError(f"{label}: BPE with subword prefixes/suffixes is not supported "
                              "(its tokens do not spell the text's bytes)")


def _decoder_steps(decoder: dict[str, Any] | None, label: str) -> list[_Step]:
    """Per-token transformations implied by a decoder config, in order."""
    if decoder is None:
        return []
    flat = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    steps: list[_Step] = []
    fused = False
    for step in flat:
        kind = step.get("type")
        if kind == "ByteLevel":
            steps.append(_byte_level_step)
        elif kind == "Metaspace":
            steps.append(_replace_step(step.get("replacement", SPM_SPACE), " "))
        elif kind == "Replace":
            pattern = step.get("pattern", {})
            if "String" not in pattern:
                raise VocabularyError(f"{label}: decoder Replace with a regex pattern is not "
                                      "supported")
            steps.append(_replace_step(pattern["String"], step.get("content", "")))
        elif kind == "ByteFallback":
            steps.append(_byte_fallback_step)
        elif kind == "Fuse":
            fused = True
        elif kind == "Strip":
            if not fused:  # after Fuse it trims the whole text's start/end, not each token
                steps.append(_strip_step(step.get("content", " "), step.get("start", 0),
                                         step.get("stop", 0)))
        else:
            raise VocabularyError(f"{label}: decoder {kind!r} is not supported (its tokens do "
                                  "not spell the text's bytes); use Vocabulary.from_tokens")
    return steps


def _spell(text: str, steps: list[_Step]) -> bytes:
    value: str | bytes = text
    for step in steps:
        value = step(value)
    return value if isinstance(value, bytes) else value.encode("utf-8")


def _byte_level_step(value: str | bytes) -> str | bytes:
    return byte_level_to_bytes(value) if isinstance(value, str) else value


def _byte_fallback_step(value: str | bytes) -> str | bytes:
    if isinstance(value, str):
        byte = parse_byte_token(value)
        if byte is not None:
            return bytes((byte,))
    return value


def _replace_step(pattern: str, content: str) -> _Step:
    def replace(value: str | bytes) -> str | bytes:
        if isinstance(value, bytes):
            return value.replace(pattern.encode("utf-8"), content.encode("utf-8"))
        return value.replace(pattern, content)
    return replace


def _strip_step(content: str, start: int, stop: int) -> _Step:
    def strip(value: str | bytes) -> str | bytes:
        text = value.decode("utf-8", errors="surrogateescape") if isinstance(value, bytes) \
            else value
        for _ in range(start):
            if text.startswith(content):
                text = text[len(content):]
        for _ in range(stop):
            if content and text.endswith(content):
                text = text[:-len(content)]
        if isinstance(value, bytes):
            return text.encode("utf-8", errors="surrogateescape")
        return text
    return strip
