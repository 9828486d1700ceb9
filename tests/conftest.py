"""Session-wide fixtures: the two real vocabularies and their models' own tokenizers, and a
probe for reference cycles a piece of code leaves behind.

Vocabularies are read from the shipped GGUF files (and cached on disk by formcast, so a
second session loads Gemma 3's 262k tokens in a fraction of a second). The encoders turn text
into the ids the model itself would produce: llama.cpp's tokenizer when llama-cpp-python is
installed (vocab only, under a second), else transformers' GGUF tokenizer (5-15 s, once).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from formcast.engine.models import gemma3_gguf_path, smollm2_gguf_path
from formcast.engine.vocab import Vocabulary
from formcast.errors import ModelNotFoundError

Encode = Callable[[str], list[int]]


def _model_path(locate: Callable[[], Path]) -> Path:
    try:
        return locate()
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _model_path(smollm2_gguf_path)


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return _model_path(gemma3_gguf_path)


@pytest.fixture(scope="session")
def smollm2_vocab(smollm2_path: Path) -> Vocabulary:
    """SmolLM2-135M-Instruct: 49,152-token byte-level BPE vocabulary."""
    return Vocabulary.from_gguf(smollm2_path)


@pytest.fixture(scope="session")
def gemma3_vocab(gemma3_path: Path) -> Vocabulary:
    """Gemma 3 270M: 262,144-token SentencePiece vocabulary with byte fallback."""
    return Vocabulary.from_gguf(gemma3_path)


def model_encoder(path: Path) -> Encode:
    """Text -> token ids with the model's own tokenizer, without special-token parsing."""
    try:
        from llama_cpp import Llama
    except ImportError:
        pass
    else:
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    transformers = pytest.importorskip("transformers", reason="needs llama_cpp or transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return lambda text: tok.encode(text, add_special_tokens=False)


@pytest.fixture(scope="session")
def smollm2_encode(smollm2_path: Path) -> Encode:
    return model_encoder(smollm2_path)


@pytest.fixture(scope="session")
def gemma3_encode(gemma3_path: Path) -> Encode:
    return model_encoder(gemma3_path)


def _cyclic_leftovers(run: Callable[[], None]) -> Counter[str]:
    """Run ``run`` with the collector off, then count by type what only the cyclic collector
    could free afterwards (``run`` must drop its own references to what it built)."""
    was_enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return Counter(type(obj).__name__ for obj in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


@pytest.fixture
def cyclic_leftovers() -> Callable[[Callable[[], None]], Counter[str]]:
    return _cyclic_leftovers
