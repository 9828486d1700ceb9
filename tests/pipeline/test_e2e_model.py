"""End to end on the real SmolLM2-135M model: layer 1 alone yields a parseable, schema-valid
invoice; layer 2 catches the ``total == sum(items)`` rule the grammar cannot express and retries
with the error summary, reusing the same compiled grammar."""

from __future__ import annotations

import json

import pytest

from formcast.errors import BudgetExhaustedError, ModelNotFoundError
from formcast.observe import PipelineMetrics
from formcast.pipeline import rules
from formcast.pipeline.pipeline import FEEDBACK_HEADER, Pipeline
from formcast.pipeline.retry import RetryPolicy
from formcast.pipeline.validate import Validator
from formcast.runtime.base import GenerationResult

pytestmark = pytest.mark.model
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

INVOICE = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "minItems": 1, "maxItems": 4, "items": {
            "type": "object",
            "properties": {"item": {"type": "string", "maxLength": 30},
                           "amount": {"type": "number", "minimum": 0}},
            "required": ["item", "amount"], "additionalProperties": False}},
        "total": {"type": "number", "minimum": 0},
    },
    "required": ["items", "total"],
    "additionalProperties": False,
}
# The printed total includes tax, so copying it (what a small model does) breaks the rule.
RECEIPT = """Extract the billed items with their amounts, and the total due, from this receipt:

Paper ..... 86.00
Toner ..... 129.80
Lamp ...... 39.00
TOTAL DUE . 303.21"""
TOTAL_IS_SUM = rules.equals_sum("/total", "/items/*/amount", tolerance=0.005)


@pytest.fixture(scope="module")
def runtime():  # noqa: ANN201 - LlamaCppRuntime, imported lazily
    from formcast.runtime.llama_cpp import LlamaCppRuntime

    try:
        return LlamaCppRuntime("smollm2")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


class Recording:
    """Passes calls through to the real runtime and keeps the prompts and grammars it got."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner = inner
        self.name = inner.name
        self.prompts: list[str] = []
        self.grammars: list[object] = []

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        return self.inner.format_chat(messages)

    def generate(self, prompt: str, **options: object) -> GenerationResult:
        self.prompts.append(prompt)
        self.grammars.append(options.get("grammar"))
        return self.inner.generate(prompt, **options)


def test_layer_one_alone_gives_a_parseable_schema_valid_object(runtime) -> None:  # noqa: ANN001
    pipeline = Pipeline(runtime, metrics=PipelineMetrics(), log=False)
    compiled = pipeline.compile(INVOICE)
    out = runtime.generate(pipeline.render_prompt(RECEIPT, INVOICE), grammar=compiled.grammar,
                           max_tokens=200)
    assert out.finish_reason != "length", out.text
    value = json.loads(out.text)  # strict parse: no repair needed
    assert Validator(INVOICE).validate(value) == []
    assert out.clipped_mass  # the mask really acted on the model's distribution


def test_layer_two_catches_the_rule_violation_and_retries(runtime) -> None:  # noqa: ANN001
    recording = Recording(runtime)
    metrics = PipelineMetrics()
    pipeline = Pipeline(recording, metrics=metrics, log=False,
                        policy=RetryPolicy(max_attempts=2, max_tokens=200))
    try:
        result = pipeline.generate(RECEIPT, schema=INVOICE, rules=[TOTAL_IS_SUM])
        history = result.history
    except BudgetExhaustedError as exc:  # the 135M model may well copy the total again
        result = None
        history = exc.history
        assert exc.budget == "attempts" and exc.attempts == 2

    first = history[0]
    assert first.parsed_as_is, first.text  # layer 1 made it parseable as is
    assert [e.kind for e in first.errors] == ["semantic"]  # only the rule failed
    assert first.errors[0].pointer == "/total"
    assert len(recording.prompts) == 2
    assert FEEDBACK_HEADER in recording.prompts[1]
    assert f"- {first.errors[0]}" in recording.prompts[1]  # the pointer-addressed summary
    assert first.text not in recording.prompts[1]  # not the whole failed output
    assert recording.grammars[0] is not None and recording.grammars[0] is recording.grammars[1]
    if result is not None:
        assert result.valid and result.layer_used == "retry"
        assert TOTAL_IS_SUM.check(result.value) == []
    summary = metrics.summary()
    assert summary["outputs"] == 2 and summary["format_first_pass"] == 1.0
    assert summary["semantic_pass_rate"] == (0.5 if result is not None else 0.0)
    assert summary["clipped_mass_avg"] is not None
