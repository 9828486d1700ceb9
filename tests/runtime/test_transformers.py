"""The transformers LogitsProcessor: per-row matchers, real tokenizer, random and real weights."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from formcast.engine.models import smollm2_gguf_path  # noqa: E402
from formcast.engine.vocab import Vocabulary  # noqa: E402
from formcast.errors import GenerationError  # noqa: E402
from formcast.grammar.ir import Grammar  # noqa: E402
from formcast.runtime.transformers import (  # noqa: E402
    GrammarLogitsProcessor,
    TransformersRuntime,
    load_gguf_model,
    load_gguf_tokenizer,
)

RECORD = r'\{"id": [1-9][0-9]{0,3}, "ok": (true|false)\}'
WORD = r"[a-z]{2,6}(-[a-z]{2,6}){0,2}"


@pytest.fixture(scope="module")
def tokenizer():
    return load_gguf_tokenizer(smollm2_gguf_path())


@pytest.fixture(scope="module")
def hf_vocab(tokenizer):
    return Vocabulary.from_huggingface(tokenizer, vocab_size=49152)


@pytest.fixture(scope="module")
def random_model():
    """A two-layer Llama with SmolLM2's vocabulary size and random weights (no download)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(config).eval()


def _generate(model, tokenizer, prompts, processor, **kwargs):
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(**batch, max_new_tokens=40,
                             logits_processor=transformers.LogitsProcessorList([processor]),
                             eos_token_id=[0, 2], pad_token_id=2, **kwargs)
    return [out[i, batch["input_ids"].shape[1]:].tolist() for i in range(len(prompts))]


def _text(vocab, ids):
    ends = [i for i, t in enumerate(ids) if t in (0, 2)]
    ids = ids[: ends[0]] if ends else ids
    return vocab.decode(ids).decode("utf-8")


def test_cached_tokenizer_matches_the_gguf_tokenizer(tokenizer):
    assert len(tokenizer) == 49152
    ids = tokenizer("{\"total\": 12.5}", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == "{\"total\": 12.5}"
    reloaded = load_gguf_tokenizer(smollm2_gguf_path())  # second call: from the disk cache
    assert reloaded("héllo wörld")["input_ids"] == tokenizer("héllo wörld")["input_ids"]


def test_random_model_output_matches_each_rows_own_grammar(random_model, tokenizer, hf_vocab):
    from formcast.engine.matcher import Matcher

    grammars = [Grammar.from_regex(RECORD), Grammar.from_regex(WORD)]
    processor = GrammarLogitsProcessor([Matcher(g, hf_vocab) for g in grammars])
    prompts = ["Give me a record:", "A word please, a longer prompt than the first one:"]
    rows = _generate(random_model, tokenizer, prompts, processor)
    assert re.fullmatch(RECORD, _text(hf_vocab, rows[0]))
    assert re.fullmatch(WORD, _text(hf_vocab, rows[1]))
    for row in range(2):
        masses = processor.clipped_mass[row]
        assert masses and all(0.0 <= m <= 1.0 for m in masses)
    # a random model wants almost nothing the grammar allows: most of the mass is clipped
    assert sum(processor.clipped_mass[0]) / len(processor.clipped_mass[0]) > 0.5


def test_unconstrained_rows_are_left_alone(random_model, tokenizer, hf_vocab):
    from formcast.engine.matcher import Matcher

    free = GrammarLogitsProcessor([None])
    baseline = _generate(random_model, tokenizer, ["Hello"], free)[0]
    assert free.clipped_mass == [[]]
    constrained = GrammarLogitsProcessor([Matcher(Grammar.from_regex(WORD), hf_vocab)])
    assert _generate(random_model, tokenizer, ["Hello"], constrained)[0] != baseline


def test_seeded_sampling_stays_in_grammar_and_repeats(random_model, tokenizer, hf_vocab):
    from formcast.engine.matcher import Matcher

    outputs = []
    for _ in range(2):
        torch.manual_seed(7)
        processor = GrammarLogitsProcessor([Matcher(Grammar.from_regex(RECORD), hf_vocab)])
        ids = _generate(random_model, tokenizer, ["x"], processor, do_sample=True,
                        temperature=1.0, top_k=0)[0]
        outputs.append(_text(hf_vocab, ids))
    assert outputs[0] == outputs[1]
    assert re.fullmatch(RECORD, outputs[0])


def test_runtime_protocol_on_random_weights(random_model, tokenizer, hf_vocab):
    runtime = TransformersRuntime(random_model, tokenizer, hf_vocab)
    prompt = runtime.format_chat([{"role": "user", "content": "a record"}])
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    result = runtime.generate(prompt, grammar=Grammar.from_regex(RECORD), max_tokens=40)
    assert re.fullmatch(RECORD, result.text)
    assert result.finish_reason == "eos"
    assert len(result.clipped_mass) == result.tokens_generated + 1  # + the EOS step
    assert result.mask_p50_us is not None


def test_processor_rejects_a_batch_of_the_wrong_size(hf_vocab):
    from formcast.engine.matcher import Matcher

    processor = GrammarLogitsProcessor([Matcher(Grammar.from_regex(WORD), hf_vocab)])
    with pytest.raises(GenerationError, match="2 rows"):
        processor(torch.zeros((2, 3), dtype=torch.long), torch.zeros((2, 49152)))


@pytest.mark.model
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None,
                    reason="transformers needs accelerate to load GGUF weights "
                           "(pip install accelerate)")
def test_real_smollm2_weights_from_gguf_produce_valid_json(tokenizer, hf_vocab):
    model = load_gguf_model(smollm2_gguf_path())  # Q4_1, dequantised by transformers' loader
    runtime = TransformersRuntime(model, tokenizer, hf_vocab)
    gbnf = r'''root ::= "{\"city\": \"" [A-Za-z ]{2,20} "\"}"'''
    prompt = runtime.format_chat([{"role": "user", "content":
                                   "What is the capital of France? Answer as JSON."}])
    result = runtime.generate(prompt, grammar=Grammar.from_gbnf(gbnf), max_tokens=24)
    assert json.loads(result.text) == {"city": "Paris"}
    assert result.finish_reason == "eos"
    # real weights: the model mostly agrees with the grammar (unlike the random model)
    assert sum(result.clipped_mass) / len(result.clipped_mass) < 0.5
