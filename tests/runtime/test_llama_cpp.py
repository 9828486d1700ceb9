"""The llama.cpp decode loop on the real SmolLM2 model: constraint, jump-forward, measurements."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from formcast.errors import GenerationError, ModelNotFoundError  # noqa: E402
from formcast.grammar.ir import Grammar  # noqa: E402
from formcast.pipeline.prompt import schema_messages  # noqa: E402
from formcast.runtime.base import Runtime  # noqa: E402
from formcast.runtime.llama_cpp import LlamaCppRuntime  # noqa: E402
from formcast.runtime.sampling import restrict  # noqa: E402

pytestmark = pytest.mark.model

INVOICE_TEXT = ("INVOlCE No: INV-2024-0183  Date: 14.03.2024\n"
                "NORDLICHT OFFICE SUPPLIES GmbH\nT0TAL EUR 303.21")
RECORD = r'\{"invoice_number": "[A-Z0-9-]{3,16}", "currency": "(EUR|USD|GBP)", "total": [0-9]{1,6}\.[0-9]{2}\}'
GBNF = r'''
root ::= "{" ws "\"invoice_number\":" ws string "," ws "\"total\":" ws number ws "}"
string ::= "\"" [A-Za-z0-9 -]{1,24} "\""
number ::= [0-9]{1,6} ("." [0-9]{1,2})?
ws ::= " "?
'''


@pytest.fixture(scope="module")
def runtime() -> LlamaCppRuntime:
    return LlamaCppRuntime("smollm2", n_ctx=2048)


@pytest.fixture(scope="module")
def prompt(runtime) -> str:
    return runtime.format_chat([
        {"role": "system", "content": "Reply with one JSON object only."},
        {"role": "user", "content": f"Extract invoice_number, currency and total:\n{INVOICE_TEXT}"},
    ])


def test_runtime_follows_the_protocol_and_the_gguf_chat_template(runtime, prompt):
    assert isinstance(runtime, Runtime)
    assert prompt.startswith("<|im_start|>system\nReply with one JSON object only.<|im_end|>")
    assert prompt.endswith("<|im_start|>assistant\n")
    tokens = runtime.tokenize_prompt(prompt)
    assert tokens[0] == 1  # <|im_start|> parsed as the special token, not as text
    assert runtime.eog_ids >= {2}  # <|im_end|> ends a turn


def test_regex_constraint_output_matches_and_is_measured(runtime, prompt):
    result = runtime.generate(prompt, grammar=Grammar.from_regex(RECORD), max_tokens=80)
    assert re.fullmatch(RECORD, result.text), result.text
    assert result.finish_reason in ("eos", "grammar")
    assert result.tokens_forced > 0  # the keys and punctuation were jumped over
    assert len(result.clipped_mass) == result.tokens_generated + (result.finish_reason == "eos")
    assert all(0.0 <= m <= 1.0 for m in result.clipped_mass)
    assert result.model_seconds > 0 and result.mask_seconds > 0
    assert result.mask_p50_us is not None and result.mask_p99_us >= result.mask_p50_us
    assert result.extra["forced_runs"] >= 1


def test_gbnf_constraint_with_and_without_jump_forward(runtime, prompt):
    grammar = Grammar.from_gbnf(GBNF)
    jumping = runtime.generate(prompt, grammar=grammar, max_tokens=80)
    runtime.jump_forward = False
    try:
        stepping = runtime.generate(prompt, grammar=grammar, max_tokens=80)
    finally:
        runtime.jump_forward = True
    pattern = r'\{ ?"invoice_number": ?"[A-Za-z0-9 -]{1,24}", ?"total": ?[0-9]{1,6}(\.[0-9]{1,2})? ?\}'
    for result in (jumping, stepping):
        assert re.fullmatch(pattern, result.text), result.text
    assert stepping.tokens_forced == 0 and jumping.tokens_forced > 0
    # jump-forward evaluates forced runs in one batch: fewer model calls for the same text
    assert jumping.tokens_generated < stepping.tokens_generated


def test_first_step_clipped_mass_comes_from_the_real_logits(runtime, prompt):
    grammar = Grammar.from_regex(RECORD)
    result = runtime.generate(prompt, grammar=grammar, max_tokens=4)
    # recompute step one by hand: the prompt's last logits, the initial mask
    runtime.llm.reset()
    runtime.llm.eval(runtime.tokenize_prompt(prompt))
    logits = runtime._logits().copy()
    mask = runtime.new_matcher(grammar).next_token_mask()
    p = np.exp(logits.astype(np.float64) - logits.max())
    expected = float(p[~mask].sum() / p.sum())
    assert result.clipped_mass[0] == pytest.approx(expected, abs=1e-4)
    assert restrict(logits, mask).clipped_mass == pytest.approx(expected, abs=1e-4)


def test_unconstrained_generation_reports_no_mask_figures(runtime, prompt):
    result = runtime.generate(prompt, max_tokens=12)
    assert result.tokens_generated > 0 and result.tokens_forced == 0
    assert result.clipped_mass == [] and result.mask_seconds == 0.0
    assert result.mask_p50_us is None
    again = runtime.generate(prompt, max_tokens=12)
    assert again.text == result.text  # greedy is deterministic


def test_seeded_sampling_is_reproducible_and_constrained(runtime, prompt):
    grammar = Grammar.from_regex(RECORD)
    runs = [runtime.generate(prompt, grammar=grammar, max_tokens=80, temperature=1.2,
                             top_p=0.95, seed=11) for _ in range(2)]
    assert runs[0].text == runs[1].text
    assert re.fullmatch(RECORD, runs[0].text), runs[0].text


def test_max_tokens_stops_generation(runtime, prompt):
    result = runtime.generate(prompt, grammar=Grammar.from_regex(RECORD), max_tokens=5)
    assert result.finish_reason == "length"
    assert result.total_tokens <= 5


def test_clear_errors(runtime, prompt):
    with pytest.raises(ModelNotFoundError, match="not found"):
        LlamaCppRuntime("/nonexistent/model.gguf")
    with pytest.raises(ModelNotFoundError, match="unknown model"):
        LlamaCppRuntime("llama-70b")
    with pytest.raises(GenerationError, match="context window"):
        runtime.generate(prompt, max_tokens=5000)
    with pytest.raises(GenerationError, match="max_tokens"):
        runtime.generate(prompt, max_tokens=0)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# The invoice example (~450 output tokens, ~15 s) runs in benchmarks/bench_generate.py and the
# demo; these two keep the suite's model time modest.
@pytest.mark.parametrize("task", ["ticket_triage", "tool_call"])
def test_example_schemas_give_schema_valid_json(runtime, task):
    """The guarantee users rely on: constrained output parses and validates, formats included,
    whenever the compile report lists nothing unenforced."""
    schema = json.loads((EXAMPLES / f"{task}.schema.json").read_text())
    grammar = Grammar.from_json_schema(schema, strict=False)
    assert not grammar.report.unenforced
    prompt = runtime.format_chat(
        schema_messages(schema, (EXAMPLES / f"{task}.prompt.txt").read_text()))
    result = runtime.generate(prompt, grammar=grammar, max_tokens=400)
    assert result.finish_reason in ("eos", "grammar"), result.text
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert list(validator.iter_errors(json.loads(result.text))) == []


def test_gemma3_with_its_262k_vocabulary_and_builtin_chat_template():
    gemma = LlamaCppRuntime("gemma3", n_ctx=512)
    assert gemma.vocab.size == 262144
    prompt = gemma.format_chat([{"role": "system", "content": "Answer in JSON."},
                                {"role": "user", "content": "What is the capital of France?"}])
    assert prompt == ("<start_of_turn>user\nAnswer in JSON.\n\nWhat is the capital of France?"
                      "<end_of_turn>\n<start_of_turn>model\n")
    assert gemma.tokenize_prompt(prompt)[0] == gemma.llm.token_bos()  # BOS added exactly once
    pattern = r'\{"capital": "[A-Z][a-z]{1,12}"\}'
    result = gemma.generate(prompt, grammar=Grammar.from_regex(pattern), max_tokens=24)
    assert re.fullmatch(pattern, result.text), result.text
