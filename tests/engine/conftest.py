"""Engine-test fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_tokenize(smollm2_encode):
    """SmolLM2's own tokenizer (llama.cpp when installed, else transformers)."""
    return smollm2_encode
