"""Hugging Face transformers backend: a ``LogitsProcessor`` that applies one matcher per row.

``model.generate`` keeps its own loop; formcast plugs in as a logits processor. At each call
the processor feeds every row's newest token to that row's matcher, then masks the row's scores
with the matcher's next-token mask. Rows may carry different grammars (one matcher each), the
"per-request masks" batching of the article, chapter 4.1.

The clipped mass is measured on the scores the processor receives. ``generate`` runs custom
processors before its temperature/top-p warpers, so with default settings these are the raw
logits (temperature 1, before masking). There is no jump-forward on this path: forced text is
still sampled token by token (each such step has one allowed token, so it is never wrong).

Loading SmolLM2 from its GGUF file (``load_gguf_model``) dequantises the weights with the
``gguf`` package, which needs ``accelerate`` installed; the tokenizer conversion from GGUF takes
seconds, so ``load_gguf_tokenizer`` caches the converted tokenizer on disk.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from formcast.errors import GenerationError, ModelNotFoundError
from formcast.runtime.base import FinishReason, GenerationResult

try:  # transformers is optional: the processor class needs its base class when present
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList
except ImportError:  # pragma: no cover - depends on the install
    torch = None
    LogitsProcessor = object
    LogitsProcessorList = None


def _require_transformers() -> None:
    if torch is None or LogitsProcessorList is None:
        raise GenerationError(
            "the transformers runtime needs torch and transformers: pip install 'formcast[hf]'")


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks each batch row's scores with that row's matcher.

    ``matchers[i]`` constrains row ``i`` (``None`` leaves the row free). After ``generate``,
    ``clipped_mass[i]`` holds row ``i``'s clipped mass per step and ``mask_seconds`` the time
    spent in matchers and masking.
    """

    def __init__(self, matchers: Sequence[Any]) -> None:
        _require_transformers()
        self.matchers = list(matchers)
        self.clipped_mass: list[list[float]] = [[] for _ in self.matchers]
        self.mask_seconds = 0.0
        self.steps = 0
        self._finished: list[int | None] = [None] * len(self.matchers)
        self._seen: int | None = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        t0 = time.perf_counter()
        batch, width = scores.shape
        if batch != len(self.matchers):
            raise GenerationError(
                f"batch has {batch} rows but the processor holds {len(self.matchers)} matchers")
        if self._seen is not None:
            if input_ids.shape[1] != self._seen + 1:
                raise GenerationError(
                    "the processor must see every generated token once; was it reused "
                    "across generate() calls?")
            self._advance(input_ids[:, -1].tolist())
        self._seen = input_ids.shape[1]
        allowed = np.ones((batch, width), dtype=bool)
        constrained = []
        for row, matcher in enumerate(self.matchers):
            if matcher is None:
                continue
            if self._finished[row] is not None:
                # Finished rows repeat their end token (padding), so a caller whose
                # eos_token_id list misses it still gets clean text.
                allowed[row] = False
                allowed[row, self._finished[row]] = True
                continue
            mask = matcher.next_token_mask()
            if mask.shape[0] > width:
                raise GenerationError(
                    f"the matcher's vocabulary has {mask.shape[0]} tokens but the model "
                    f"scores only {width}")
            allowed[row, : mask.shape[0]] = mask
            allowed[row, mask.shape[0]:] = False
            if not allowed[row].any():
                raise GenerationError(f"row {row}: the grammar mask allows no token (dead end)")
            constrained.append(row)
        allowed_t = torch.from_numpy(allowed).to(scores.device)
        if constrained:
            rows = torch.tensor(constrained, device=scores.device)
            probs = torch.softmax(scores[rows].float(), dim=-1)
            kept = (probs * allowed_t[rows]).sum(dim=-1)
            for row, mass in zip(constrained, (1.0 - kept).clamp(0.0, 1.0).tolist(), strict=True):
                self.clipped_mass[row].append(float(mass))
        if constrained or any(f is not None for f in self._finished):
            scores = scores.masked_fill(~allowed_t, float("-inf"))
        self.steps += 1
        self.mask_seconds += time.perf_counter() - t0
        return scores

    def _advance(self, last_tokens: list[int]) -> None:
        for row, token in enumerate(last_tokens):
            matcher = self.matchers[row]
            if matcher is None or self._finished[row] is not None:
                continue
            if not matcher.accept_token(int(token)):
                raise GenerationError(
                    f"row {row}: the matcher refused token {token} that its mask allowed; "
                    "is another processor changing tokens after formcast?")
            if matcher.is_terminated():
                self._finished[row] = int(token)


class TransformersRuntime:
    """A transformers causal LM generating under a grammar (``Runtime`` protocol)."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, vocab: Any = None) -> None:
        _require_transformers()
        self.model = model
        self.tokenizer = tokenizer
        if vocab is None:
            from formcast.engine.vocab import Vocabulary

            vocab = Vocabulary.from_huggingface(
                tokenizer, vocab_size=int(model.config.vocab_size))
        self.vocab = vocab

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise GenerationError("the tokenizer has no chat template; pass a formatted prompt")
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)

    def new_matcher(self, grammar: Any) -> Any:
        from formcast.engine.matcher import Matcher

        return Matcher(grammar, self.vocab)

    def generate(self, prompt: str, *, grammar: Any = None, max_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 on_token: Callable[[int], None] | None = None) -> GenerationResult:
        """Generate from a formatted prompt; ``on_token`` is accepted for interface parity and
        called once at the end (``generate`` gives no per-token hook without streaming)."""
        if max_tokens < 1:
            raise GenerationError(f"max_tokens must be >= 1, got {max_tokens}")
        started = time.perf_counter()
        encoded = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        input_ids = encoded["input_ids"].to(self.model.device)
        processor = GrammarLogitsProcessor([self.new_matcher(grammar) if grammar else None])
        eos = sorted(int(t) for t in self.vocab.eos_ids)
        kwargs: dict[str, Any] = {"do_sample": temperature > 0.0}
        if temperature > 0.0:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
            if seed is not None:
                torch.manual_seed(seed)
        with torch.inference_mode():
            output = self.model.generate(
                input_ids, attention_mask=encoded["attention_mask"].to(self.model.device),
                max_new_tokens=max_tokens, logits_processor=LogitsProcessorList([processor]),
                eos_token_id=eos, pad_token_id=eos[0] if eos else None, **kwargs)
        total = time.perf_counter() - started
        new = output[0, input_ids.shape[1]:].tolist()
        finish: FinishReason = "length"
        if new and new[-1] in eos:
            finish = "eos"
            new = new[:-1]
        if on_token is not None:
            on_token(len(new))
        matcher = processor.matchers[0]
        stats = matcher.stats if matcher is not None else None
        return GenerationResult(
            text=self.vocab.decode(new).decode("utf-8", errors="replace"),
            finish_reason=finish,
            tokens_generated=len(new),
            tokens_forced=0,
            prompt_tokens=int(input_ids.shape[1]),
            model_seconds=total - processor.mask_seconds,
            mask_seconds=processor.mask_seconds if matcher is not None else 0.0,
            total_seconds=total,
            clipped_mass=processor.clipped_mass[0],
            mask_p50_us=stats.mask_p50_us if stats else None,
            mask_p99_us=stats.mask_p99_us if stats else None,
            extra={"runtime": self.name},
        )


# ----------------------------------------------------------------------------- GGUF loading


def _cache_root() -> Path:
    root = os.environ.get("FORMCAST_CACHE_DIR")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "formcast") / "hf"


def _source_key(path: Path) -> str:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}"
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


def load_gguf_tokenizer(gguf_path: str | os.PathLike[str]) -> Any:
    """The transformers tokenizer stored in a GGUF file, converted once and cached on disk.

    Converting a GGUF tokenizer takes several seconds (tens for big vocabularies); the saved
    copy reloads in a fraction of a second. The cache key holds the file's path, size and
    modification time, so a replaced model file is converted again.
    """
    _require_transformers()
    from transformers import AutoTokenizer

    path = Path(gguf_path)
    if not path.is_file():
        raise ModelNotFoundError(f"model file not found: {path}")
    cached = _cache_root() / f"tokenizer-{_source_key(path)}"
    if (cached / "tokenizer_config.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(cached))
        except (OSError, ValueError):
            pass  # unreadable cache entry: convert again
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    try:
        tokenizer.save_pretrained(str(tmp))
        if cached.exists():  # another process saved it first, or a broken entry
            shutil.rmtree(cached)
        os.replace(tmp, cached)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # a read-only cache only costs time
    return tokenizer


def load_gguf_model(gguf_path: str | os.PathLike[str]) -> Any:
    """A transformers causal LM with weights dequantised from a GGUF file (float32, CPU)."""
    _require_transformers()
    from transformers import AutoModelForCausalLM

    path = Path(gguf_path)
    if not path.is_file():
        raise ModelNotFoundError(f"model file not found: {path}")
    try:
        import accelerate  # noqa: F401  (transformers requires it for GGUF loading)
    except ImportError as exc:
        raise GenerationError(
            "loading GGUF weights into transformers needs accelerate: pip install accelerate"
        ) from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    except (ValueError, NotImplementedError) as exc:
        raise GenerationError(f"transformers cannot load {path.name}: {exc}") from exc
    model.eval()
    return model
