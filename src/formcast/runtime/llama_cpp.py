"""The embedded default runtime: a decode loop over llama-cpp-python with grammar masks.

llama.cpp evaluates the model; everything between two evaluations happens here, in numpy:
read the last position's logits (a zero-copy view of llama.cpp's buffer), ask the matcher for
the mask, measure the clipped mass, sample, feed the token back to the matcher.

Jump-forward. When the grammar leaves only one way to continue (``matcher.forced_bytes()``,
e.g. ``"currency": "`` after a comma in a fixed-order object), those bytes are appended without
sampling: they are tokenised with the model's own tokenizer and evaluated in the same batch as
the sampled token, so a forced run costs one model call instead of one per token.

The tokenisation of forced text must be one the model could have produced itself, or the next
logits are conditioned on an odd split. Two rules keep it safe:

* the forced bytes are tokenised together with the token just sampled, and used only when
  that tokenisation starts with the sampled token itself: otherwise the sampled token and the
  forced text would merge in the tokenizer's own split (e.g. a sampled `` "c`` before a forced
  ``urrency":``), the model would see an odd split, and nothing is forced at this step;
* the *last* forced token is dropped and left for the model to sample under the mask, unless
  the forced text ends the output. Forced text such as ``"name": "`` could merge with the first
  free bytes into one token (`` "J``); sampling it lets the model choose that longer token.

The forced tokens are then checked: their bytes must spell the forced prefix exactly and the
matcher must accept each of them; otherwise nothing is forced at this step and decoding goes on
token by token (always correct, only slower).

On the invoice example the forced tokens are exactly the tokens greedy decoding picks one by
one. Greedy outputs with and without jump-forward can still differ later: llama.cpp's logits
for a token depend slightly on how many tokens share its batch (different matmul kernels), and
two near-tied candidates (``"EUR"`` / ``"USD"``) can swap. Evaluating the same forced tokens one
at a time reproduces the step-by-step output exactly.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from formcast.errors import GenerationError, ModelNotFoundError
from formcast.runtime.base import FinishReason, GenerationResult
from formcast.runtime.models import resolve_model_path
from formcast.runtime.sampling import Sampler, choose, restrict

ProgressCallback = Callable[[int], None]

# llama.cpp built-in chat templates for GGUF files that carry no Jinja template.
_BUILTIN_TEMPLATES = {"gemma3": "gemma", "gemma2": "gemma", "gemma": "gemma"}


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise GenerationError(
            "llama-cpp-python is not installed: pip install 'formcast[llama]'") from exc
    return llama_cpp


def _cpu_uses_amx(llama_cpp: Any) -> bool:
    info = llama_cpp.llama_print_system_info()
    text = info.decode(errors="replace") if isinstance(info, bytes) else str(info)
    return "AMX_INT8 = 1" in text


@contextlib.contextmanager
def _without_extra_buffer_types(llama_cpp: Any, enabled: bool) -> Iterator[None]:
    """Load the model with llama.cpp's extra (repacking) buffer types switched off.

    A llama.cpp built with ``-march=native`` on a CPU with AMX routes quantised matmuls through
    its AMX kernels, which crash (SIGSEGV in ``ggml_backend_amx_mul_mat``) on our Q4_1 model in
    this environment. ``Llama()`` has no argument for ``use_extra_bufts``, so the default model
    parameters are patched for the duration of the load only.
    """
    if not enabled:
        yield
        return
    module = llama_cpp.llama_cpp
    original = module.llama_model_default_params

    def params_without_extra_buffers() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    module.llama_model_default_params = params_without_extra_buffers
    try:
        yield
    finally:
        module.llama_model_default_params = original


class LlamaCppRuntime:
    """A GGUF model loaded in-process with llama-cpp-python, generating under a grammar.

    ``model`` is ``"smollm2"``, ``"gemma3"`` or a path to a ``.gguf`` file. ``jump_forward``
    turns forced-text batching on (default) or off (every token is sampled, for comparison).
    """

    name = "llama.cpp"

    def __init__(self, model: str = "smollm2", *, n_ctx: int = 4096, n_threads: int | None = None,
                 n_threads_batch: int | None = None, jump_forward: bool = True,
                 verbose: bool = False) -> None:
        llama_cpp = _import_llama_cpp()
        # Half the cores, and the same count for batches (prompt, jump-forward runs): ggml's
        # threads spin at barriers, so with more threads than free cores a multi-token eval
        # took 5-10x longer than a single-token one on a shared 2-core machine.
        n_threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
        n_threads_batch = n_threads_batch or n_threads
        self.model_path = resolve_model_path(model)
        self.jump_forward = jump_forward
        started = time.perf_counter()
        disable_extra = _cpu_uses_amx(llama_cpp)
        try:
            with _without_extra_buffer_types(llama_cpp, disable_extra):
                self.llm = llama_cpp.Llama(
                    model_path=self.model_path, n_ctx=n_ctx, n_threads=n_threads,
                    n_threads_batch=n_threads_batch, logits_all=False, verbose=verbose)
        except ValueError as exc:
            if not os.path.isfile(self.model_path):
                raise ModelNotFoundError(f"model file not found: {self.model_path}") from exc
            raise GenerationError(f"llama.cpp could not load {self.model_path}: {exc}") from exc
        self.load_seconds = time.perf_counter() - started
        self._llama_cpp = llama_cpp
        self.n_vocab = int(self.llm.n_vocab())
        self._vocab: Any = None
        self._formatter: Any = None
        self._eog_ids: frozenset[int] | None = None
        self._eog_array: np.ndarray | None = None

    # ------------------------------------------------------------------ model facts
    @property
    def vocab(self) -> Any:
        """The model's ``formcast.engine.vocab.Vocabulary`` (read from the GGUF, cached)."""
        if self._vocab is None:
            from formcast.engine.vocab import Vocabulary

            vocab = Vocabulary.from_gguf(self.model_path)
            if vocab.size != self.n_vocab:
                raise GenerationError(
                    f"{self.model_path}: GGUF vocabulary has {vocab.size} tokens but the model "
                    f"outputs {self.n_vocab} logits")
            self._vocab = vocab
        return self._vocab

    @property
    def eog_ids(self) -> frozenset[int]:
        """Token ids that end a generation (end of turn, end of text)."""
        if self._eog_ids is None:
            self._eog_ids = frozenset(int(t) for t in self.vocab.eos_ids)
        return self._eog_ids

    @property
    def eog_array(self) -> np.ndarray:
        if self._eog_array is None:
            self._eog_array = np.fromiter(sorted(self.eog_ids), dtype=np.intp)
        return self._eog_array

    @property
    def chat_template(self) -> str | None:
        return self.llm.metadata.get("tokenizer.chat_template")

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        """Render ``messages`` with the chat template stored in the GGUF file.

        Files without ``tokenizer.chat_template`` (the Gemma 3 270M build we ship) fall back to
        llama.cpp's built-in template for the model's architecture (ChatML when unknown).
        """
        template = self.chat_template
        if not template:
            arch = str(self.llm.metadata.get("general.architecture", ""))
            return self._apply_builtin_template(_BUILTIN_TEMPLATES.get(arch, "chatml"), messages)
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            self._formatter = Jinja2ChatFormatter(
                template=template, eos_token=self._token_text(self.llm.token_eos()),
                bos_token=self._token_text(self.llm.token_bos()), add_generation_prompt=True)
        try:
            return self._formatter(messages=messages).prompt
        except Exception as exc:  # jinja2 errors carry no formcast context
            raise GenerationError(f"the model's chat template failed to render: {exc}") from exc

    def _apply_builtin_template(self, name: str, messages: list[dict[str, str]]) -> str:
        llama_cpp = self._llama_cpp
        encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]
        chat = (llama_cpp.llama_chat_message * len(encoded))(
            *[llama_cpp.llama_chat_message(role, content) for role, content in encoded])
        size = 2 * sum(len(r) + len(c) for r, c in encoded) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(encoded), True,
                                                    buf, size)
            if n < 0:
                raise GenerationError(f"llama.cpp has no built-in chat template {name!r}")
            if n <= size:
                return buf.raw[:n].decode("utf-8")
            size = n
        raise GenerationError("llama.cpp chat template output did not fit its buffer")

    def tokenize_prompt(self, prompt: str) -> list[int]:
        """Tokens of a formatted prompt: special tokens parsed, BOS added once when the model
        wants one and the template did not already write it."""
        bos = self.llm.token_bos()
        wants_bos = self.llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
        tokens = self.llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        if wants_bos and bos >= 0 and (not tokens or tokens[0] != bos):
            tokens.insert(0, bos)
        return tokens

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    def _logits(self) -> np.ndarray:
        ptr = self._llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    # ------------------------------------------------------------------ generation
    def new_matcher(self, grammar: Any) -> Any:
        """A fresh matcher for ``grammar`` over this model's vocabulary (compiled once, cached)."""
        from formcast.engine.matcher import Matcher

        return Matcher(grammar, self.vocab)

    def generate(self, prompt: str, *, grammar: Any = None, max_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 on_token: ProgressCallback | None = None) -> GenerationResult:
        """Generate from a formatted prompt, constrained by ``grammar`` when given.

        ``on_token`` is called with the running token count (sampled + forced) after every
        model call, for progress displays.
        """
        if max_tokens < 1:
            raise GenerationError(f"max_tokens must be >= 1, got {max_tokens}")
        started = time.perf_counter()
        sampler = Sampler(temperature, top_p, seed)
        matcher = self.new_matcher(grammar) if grammar is not None else None
        compile_seconds = time.perf_counter() - started
        prompt_tokens = self.tokenize_prompt(prompt)
        n_ctx = int(self.llm.n_ctx())
        if len(prompt_tokens) + max_tokens > n_ctx:
            raise GenerationError(
                f"prompt ({len(prompt_tokens)} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"context window of {n_ctx} tokens")
        loop = _DecodeLoop(self, matcher, sampler, on_token)
        loop.prefill(prompt_tokens)
        finish = loop.run(max_tokens)
        total = time.perf_counter() - started
        # The vocabulary's bytes are the ones the matcher checked, so the text is exactly the
        # string the grammar accepted (llama.cpp's detokenizer may trim a leading space).
        text = self.vocab.decode(loop.output).decode("utf-8", errors="replace")
        stats = matcher.stats if matcher is not None else None
        return GenerationResult(
            text=text,
            finish_reason=finish,
            tokens_generated=loop.sampled,
            tokens_forced=loop.forced,
            prompt_tokens=len(prompt_tokens),
            model_seconds=loop.model_seconds,
            mask_seconds=loop.mask_seconds,
            total_seconds=total,
            clipped_mass=loop.clipped,
            mask_p50_us=stats.mask_p50_us if stats else None,
            mask_p99_us=stats.mask_p99_us if stats else None,
            extra={
                "runtime": self.name,
                "model": os.path.basename(self.model_path),
                "prefill_seconds": loop.prefill_seconds,
                "sample_seconds": loop.sample_seconds,
                "grammar_setup_seconds": compile_seconds,
                "forced_runs": loop.forced_runs,
                "jump_forward": self.jump_forward and matcher is not None,
                **({"masks_computed": stats.masks_computed, "mask_cache_hits": stats.cache_hits,
                    "compile_ms": stats.compile_ms} if stats else {}),
            },
        )


class _DecodeLoop:
    """The state of one generation: tokens so far, counters and timers."""

    def __init__(self, runtime: LlamaCppRuntime, matcher: Any, sampler: Sampler,
                 on_token: ProgressCallback | None) -> None:
        self.rt = runtime
        self.llm = runtime.llm
        self.matcher = matcher
        self.sampler = sampler
        self.on_token = on_token
        self.output: list[int] = []
        self.sampled = 0
        self.forced = 0
        self.forced_runs = 0
        self.clipped: list[float] = []
        self.model_seconds = 0.0
        self.prefill_seconds = 0.0
        self.mask_seconds = 0.0
        self.sample_seconds = 0.0

    def _eval(self, tokens: list[int]) -> None:
        t0 = time.perf_counter()
        try:
            self.llm.eval(tokens)
        except RuntimeError as exc:
            raise GenerationError(f"llama.cpp failed to evaluate {len(tokens)} token(s): {exc}"
                                  ) from exc
        self.model_seconds += time.perf_counter() - t0

    def prefill(self, prompt_tokens: list[int]) -> None:
        self.llm.reset()
        t0 = time.perf_counter()
        self._eval(prompt_tokens)
        self.prefill_seconds = time.perf_counter() - t0

    def run(self, max_tokens: int) -> FinishReason:
        eog = self.rt.eog_ids
        while len(self.output) < max_tokens:
            token = self._sample()
            if token in eog:
                return "eos"
            self.output.append(token)
            self.sampled += 1
            batch = [token]
            if self.matcher is not None:
                batch += self._jump_forward(max_tokens - len(self.output))
                if self._grammar_complete():
                    return "grammar"
            if len(self.output) >= max_tokens:
                break
            self._eval(batch)
            if self.on_token is not None:
                self.on_token(len(self.output))
        return "length"

    def _sample(self) -> int:
        logits = self.rt._logits()
        if self.matcher is None:
            t0 = time.perf_counter()
            token = choose(restrict(logits, None), temperature=self.sampler.temperature,
                           top_p=self.sampler.top_p, rng=self.sampler.rng)
            self.sample_seconds += time.perf_counter() - t0
            return token
        t0 = time.perf_counter()
        cands = restrict(logits, self.matcher.next_token_mask())
        t1 = time.perf_counter()
        token = choose(cands, temperature=self.sampler.temperature, top_p=self.sampler.top_p,
                       rng=self.sampler.rng)
        t2 = time.perf_counter()
        accepted = self.matcher.accept_token(token)
        self.mask_seconds += (t1 - t0) + (time.perf_counter() - t2)
        self.sample_seconds += t2 - t1
        self.clipped.append(cands.clipped_mass)
        if not accepted:
            raise GenerationError(
                f"the matcher refused token {token} that its own mask allowed "
                f"(bytes {self.rt.vocab.token_bytes[token]!r}); this is a formcast bug")
        return token

    def _grammar_complete(self) -> bool:
        """True when the grammar allows nothing but the end of the output."""
        t0 = time.perf_counter()
        done = self.matcher.is_terminated() or _only_end_allowed(self.matcher, self.rt.eog_array)
        self.mask_seconds += time.perf_counter() - t0
        return done

    def _jump_forward(self, budget: int) -> list[int]:
        """Accept and return the tokens of the forced text (see the module docstring)."""
        if not self.rt.jump_forward or budget <= 0:
            return []
        t0 = time.perf_counter()
        forced = self.matcher.forced_bytes()
        tokens: list[int] = []
        if forced:
            tokens = self._safe_forced_tokens(forced, budget)
        self.mask_seconds += time.perf_counter() - t0
        if tokens:
            self.output.extend(tokens)
            self.forced += len(tokens)
            self.forced_runs += 1
        return tokens

    def _safe_forced_tokens(self, forced: bytes, budget: int) -> list[int]:
        token_bytes = self.rt.vocab.token_bytes
        # Tokenise the forced text behind the token just sampled: if the tokenizer would merge
        # that token with the forced bytes, the split is not one the model would make, so wait.
        last = self.output[-1]
        tokens = self.llm.tokenize(token_bytes[last] + forced, add_bos=False, special=False)
        if not tokens or tokens[0] != last:
            return []
        tokens = tokens[1:]
        if b"".join(token_bytes[t] for t in tokens) != forced:
            return []  # the tokenizer added or changed bytes (space prefix, normalisation)
        probe = self.matcher.copy()
        if not probe.accept_tokens(tokens):
            return []
        if not _only_end_allowed(probe, self.rt.eog_array):
            tokens = tokens[:-1]
        tokens = tokens[:budget]
        if not tokens:
            return []
        if not self.matcher.accept_tokens(tokens):  # pragma: no cover - probe accepted them
            raise GenerationError("matcher refused forced tokens its copy accepted")
        return tokens


def _only_end_allowed(matcher: Any, eog: np.ndarray) -> bool:
    """Whether ``matcher`` is accepting and its mask allows end-of-generation tokens only."""
    if not matcher.is_accepting():
        return False
    mask = matcher.next_token_mask()
    return int(np.count_nonzero(mask)) == int(np.count_nonzero(mask[eog]))
