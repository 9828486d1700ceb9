"""Engine-test fixtures: the model's own tokenizer, to turn real text into real token ids."""

from __future__ import annotations

import pytest

from formcast.engine.models import smollm2_gguf_path


@pytest.fixture(scope="session")
def smollm2_tokenize():
    """Tokenize with llama.cpp's tokenizer for SmolLM2 (vocab only: loads in well under 1 s)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(smollm2_gguf_path()), vocab_only=True, verbose=False)

    def tokenize(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    return tokenize
