"""The one entry point that chains the three layers.

``Pipeline.generate`` compiles the schema once (cached), then per attempt: generate under the
grammar (layer 1), parse-repair and validate against the same schema and the caller's rules
(layer 2), and on failure retry with a JSON-pointer error summary, within the policy's budgets.
When the budgets run out it either raises ``BudgetExhaustedError`` or, if the policy allows,
salvages the trusted fields (layer 3) into a result that is marked degraded and not valid.

The model is a ``Runtime`` (constrained by the grammar) or any callable
``fn(prompt: str, max_tokens: int) -> str | GenerationResult`` (a remote endpoint, a test
script; it gets no grammar, so layers 2 and 3 do all the work).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from formcast.errors import (
    BudgetExhaustedError,
    FormcastError,
    GenerationError,
    RepairError,
    RuleError,
    SchemaError,
)
from formcast.grammar.cache import DEFAULT_CACHE, CompileCache, schema_hash
from formcast.observe.quality import PipelineMetrics, default_metrics
from formcast.observe.record import GenerationRecord, OutputRecord, log_record
from formcast.pipeline.prompt import DEFAULT_SYSTEM, schema_messages
from formcast.pipeline.repair import Repair, RepairResult, repair_json
from formcast.pipeline.result import (
    AttemptRecord,
    LayerUsed,
    StructuredResult,
    Violation,
    summarize_violations,
)
from formcast.pipeline.retry import RetryBudget, RetryPolicy
from formcast.pipeline.rules import Rule, check_rules
from formcast.pipeline.salvage import salvage
from formcast.pipeline.validate import Validator
from formcast.runtime.base import GenerationResult, Runtime

Generator = Callable[[str, int], "str | GenerationResult"]
RuleLike = Rule | Callable[[Any], Any]

#: The instruction that carries a retry's error summary (the failed output is not repeated).
FEEDBACK_HEADER = "Your previous answer was rejected for these reasons:"
FEEDBACK_FOOTER = "Write the whole JSON object again with these problems fixed."
_MAX_VALIDATORS = 256


def estimate_tokens(text: str) -> int:
    """Token count for generators that return bare text: ~4 UTF-8 bytes per token."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4)) if text else 0


# ----------------------------------------------------------------------------- layer 2 checks


@dataclass(frozen=True)
class OutputCheck:
    """Everything layer 2 found about one output."""

    text: str
    value: Any
    repair: RepairResult | None
    errors: tuple[Violation, ...]
    format_ok: bool
    semantic_ok: bool

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def parsed(self) -> bool:
        return self.repair is not None

    @property
    def parsed_as_is(self) -> bool:
        return self.repair is not None and not self.repair.repairs

    @property
    def repairs(self) -> tuple[Repair, ...]:
        return self.repair.repairs if self.repair is not None else ()


def check_output(text: str, validator: Validator, rules: Sequence[RuleLike] = (), *,
                 policy: RetryPolicy | None = None, hit_token_limit: bool = False) -> OutputCheck:
    """Parse-repair ``text``, then validate it against the schema and, if that passes, the rules.

    A repaired value is only as good as its validation: lossy repairs and outputs cut off by
    the token limit are errors unless the policy accepts them. Rules see only schema-valid
    values, so they can rely on the schema's shape.
    """
    policy = policy or RetryPolicy()
    try:
        repaired = repair_json(text)
    except RepairError as exc:
        where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
        error = Violation("", f"not valid JSON: {exc.reason}{where}", "parse")
        return OutputCheck(text, None, None, (error,), False, False)

    errors: list[Violation] = []
    if repaired.ended_early and hit_token_limit and not policy.accept_truncated:
        errors.append(Violation("", "the output was cut off by the token limit before it was "
                                "complete; write a shorter answer", "truncation"))
    if not policy.accept_lossy_repairs:
        errors += [Violation(r.pointer or "", r.detail, "repair", r.kind)
                   for r in repaired.lossy_repairs]
    errors += validator.validate(repaired.value)
    format_ok = not errors
    if format_ok and rules:
        errors += check_rules(repaired.value, rules)
    return OutputCheck(text, repaired.value, repaired, tuple(errors), format_ok,
                       format_ok and not errors)


def feedback_message(errors: Sequence[Violation], limit: int = 5) -> str:
    """The retry instruction: which fields are wrong and why, not the whole failed output."""
    return f"{FEEDBACK_HEADER}\n{summarize_violations(errors, limit)}\n{FEEDBACK_FOOTER}"


def field_completeness(value: Any, schema: Any) -> float:
    """Share of the schema's required fields (declared fields, where none are required) that
    are present and not null, counted through nested objects and array items."""
    present, expected = _completeness(value, schema, schema, 0)
    return present / expected if expected else (1.0 if value is not None else 0.0)


def _completeness(value: Any, node: Any, root: Any, depth: int) -> tuple[int, int]:
    node = _resolve_ref(node, root)
    if depth > 32 or not isinstance(node, Mapping):
        return 0, 0
    props = node.get("properties")
    if isinstance(props, Mapping):
        wanted = list(node.get("required") or props.keys())
        present = expected = 0
        for name in wanted:
            expected += 1
            child = value.get(name) if isinstance(value, dict) else None
            if child is not None:
                present += 1
            if name in props:
                p, e = _completeness(child, props[name], root, depth + 1)
                present, expected = present + p, expected + e
        return present, expected
    items = node.get("items")
    if isinstance(items, Mapping) and isinstance(value, list):
        present = expected = 0
        for item in value:
            p, e = _completeness(item, items, root, depth + 1)
            present, expected = present + p, expected + e
        return present, expected
    return 0, 0


def _resolve_ref(node: Any, root: Any) -> Any:
    for _ in range(16):
        if not (isinstance(node, Mapping) and isinstance(node.get("$ref"), str)
                and node["$ref"].startswith("#")):
            return node
        target: Any = root
        for part in node["$ref"][1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        node = target
    return node


# ----------------------------------------------------------------------------- compiled schemas


@dataclass(frozen=True)
class CompiledSchema:
    """What one schema compiles to: the grammar (layer 1) and the validator (layer 2)."""

    schema: Any
    schema_hash: str
    validator: Validator
    grammar: Any = None
    compile_ms: float | None = None
    cache_hit: bool | None = None

    @property
    def top_level_keys(self) -> list[str] | None:
        props = self.schema.get("properties") if isinstance(self.schema, Mapping) else None
        return list(props) if isinstance(props, Mapping) else None


def _compiler_version() -> str:
    try:
        from formcast.grammar import json_schema
    except ImportError as exc:  # pragma: no cover - only while the compiler is not installed
        raise FormcastError(f"the JSON Schema compiler is not available ({exc}); pass "
                            "constrain=False to generate without a grammar") from exc

    return str(getattr(json_schema, "COMPILER_VERSION", getattr(json_schema, "__version__", "0")))


# ----------------------------------------------------------------------------- the pipeline


class Pipeline:
    """A model plus everything worth keeping between calls: compiled grammars and validators,
    the default policy and the metrics.

    ``model`` is a ``Runtime``, a callable generator, or a model name for ``LlamaCppRuntime``
    (loaded on first use). ``clock``/``sleep`` are injectable so tests never wait.
    """

    def __init__(self, model: Runtime | Generator | str = "smollm2", *,
                 policy: RetryPolicy | None = None, metrics: PipelineMetrics | None = None,
                 grammar_cache: CompileCache | None = None, strict_integers: bool = False,
                 token_counter: Callable[[str], int] = estimate_tokens,
                 system_prompt: str = DEFAULT_SYSTEM, temperature: float = 0.0,
                 seed: int | None = 0, log: bool = True,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._model = model
        self._runtime: Runtime | None = model if isinstance(model, Runtime) else None
        if not isinstance(model, str | Runtime) and not callable(model):
            raise FormcastError(f"model must be a Runtime, a callable generator or a model name, "
                                f"not {type(model).__name__}")
        self.policy = policy or RetryPolicy()
        self.metrics = metrics if metrics is not None else default_metrics()
        self.grammar_cache = grammar_cache if grammar_cache is not None else DEFAULT_CACHE
        self.strict_integers = strict_integers
        self.token_counter = token_counter
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.seed = seed
        self.log = log
        self.clock = clock
        self.sleep = sleep
        self._validators: dict[str, Validator] = {}

    # -- model

    @property
    def runtime(self) -> Runtime | None:
        """The runtime, loading it on first use when the model was given by name."""
        if self._runtime is None and isinstance(self._model, str):
            from formcast.runtime.llama_cpp import LlamaCppRuntime

            self._runtime = LlamaCppRuntime(self._model)
        return self._runtime

    @property
    def model_name(self) -> str:
        if isinstance(self._model, str):
            return self._model
        if self._runtime is not None:
            name = str(getattr(self._runtime, "name", type(self._runtime).__name__))
            path = getattr(self._runtime, "model_path", None)
            return f"{name}:{os.path.basename(path)}" if isinstance(path, str) else name
        return getattr(self._model, "__name__", type(self._model).__name__)

    # -- compile

    def compile(self, schema: Any, *, grammar: bool = True) -> CompiledSchema:
        """The validator and (when ``grammar``) the grammar for ``schema``, both cached.

        The grammar compiles with ``strict=False``: keywords the grammar cannot enforce are
        listed in its report and enforced by the validator after sampling instead.
        """
        if not isinstance(schema, Mapping | bool):
            raise SchemaError(f"a JSON Schema must be an object or a boolean, not "
                              f"{type(schema).__name__}")
        digest = schema_hash(schema)
        validator = self._validators.get(digest)
        if validator is None:
            validator = Validator(schema, strict_integers=self.strict_integers)
            if len(self._validators) >= _MAX_VALIDATORS:  # drop the oldest, keep memory bounded
                self._validators.pop(next(iter(self._validators)))
            self._validators[digest] = validator
        if not grammar:
            return CompiledSchema(schema, digest, validator)
        from formcast.grammar.ir import Grammar

        key = ("json_schema", digest, _compiler_version(), "strict=False")
        started = self.clock()
        compiled = self.grammar_cache.get(key)
        hit = compiled is not None
        if compiled is None:
            compiled = self.grammar_cache.get_or_compile(  # the compiler's own cache is
                key, lambda: Grammar.from_json_schema(schema, strict=False, cache=None))  # ours
        elapsed_ms = (self.clock() - started) * 1000.0
        return CompiledSchema(schema, digest, validator, compiled, elapsed_ms, hit)

    # -- generate

    def generate(self, prompt: str, *, schema: Any, rules: Iterable[RuleLike] = (),
                 policy: RetryPolicy | None = None, constrain: bool = True,
                 temperature: float | None = None, seed: int | None = None) -> StructuredResult:
        """Generate a value for ``prompt`` that satisfies ``schema`` and ``rules``.

        Returns a valid ``StructuredResult`` (``layer_used`` "constrain", "repair" or "retry"),
        or a degraded one (``layer_used="salvage"``, ``value=None``) when the policy allows
        salvage; otherwise raises ``BudgetExhaustedError`` naming the budget that ran out
        (its ``history`` holds every attempt and ``record`` the metrics record).
        """
        policy = policy or self.policy
        rules = list(rules)
        runtime = self.runtime
        compiled = self.compile(schema, grammar=constrain and runtime is not None)
        run = _Run(self, compiled, rules, policy, prompt,
                   self.temperature if temperature is None else temperature,
                   self.seed if seed is None else seed)
        return run.execute()

    def render_prompt(self, task: str, schema: Any, feedback: str | None = None) -> str:
        """The text sent to the model: the schema-derived chat, plus a retry's error summary."""
        user = task if feedback is None else f"{task.rstrip()}\n\n{feedback}"
        messages = schema_messages(schema, user, system=self.system_prompt)
        runtime = self.runtime
        if runtime is not None:
            return runtime.format_chat(messages)
        return "\n\n".join(m["content"] for m in messages)

    def call_model(self, prompt: str, grammar: Any, max_tokens: int, temperature: float,
                   seed: int | None) -> GenerationResult:
        """One generation, normalised to a ``GenerationResult``."""
        runtime = self.runtime
        if runtime is not None:
            return runtime.generate(prompt, grammar=grammar, max_tokens=max_tokens,
                                    temperature=temperature, seed=seed)
        started = self.clock()
        out = self._model(prompt, max_tokens)  # type: ignore[operator]
        if isinstance(out, GenerationResult):
            return out
        if not isinstance(out, str):
            raise FormcastError(f"the generator returned {type(out).__name__}; "
                                "expected str or GenerationResult")
        tokens = self.token_counter(out)
        return GenerationResult(text=out, finish_reason="length" if tokens >= max_tokens else "stop",
                                tokens_generated=tokens, total_seconds=self.clock() - started)


class _Run:
    """One ``generate`` call: the attempt loop and its bookkeeping."""

    def __init__(self, pipeline: Pipeline, compiled: CompiledSchema, rules: list[RuleLike],
                 policy: RetryPolicy, task: str, temperature: float, seed: int | None) -> None:
        self.p = pipeline
        self.compiled = compiled
        self.rules = rules
        self.policy = policy
        self.task = task
        self.temperature = temperature
        self.seed = seed
        self.budget = RetryBudget(policy, clock=pipeline.clock, sleep=pipeline.sleep)
        self.history: list[AttemptRecord] = []
        self.outputs: list[OutputRecord] = []
        self.last_check: OutputCheck | None = None
        self.last_errors: tuple[Violation, ...] = ()
        self.last_exception: BaseException | None = None
        self.last_generation: GenerationResult | None = None
        self.started = pipeline.clock()

    def execute(self) -> StructuredResult:
        feedback: str | None = None
        while True:
            try:
                max_tokens = self.budget.start_attempt(
                    list(self.last_errors), self.history[-1].text if self.history else None)
            except BudgetExhaustedError as exhausted:
                return self._give_up(exhausted)
            prompt = self.p.render_prompt(self.task, self.compiled.schema, feedback)
            check = self._attempt(prompt, max_tokens)
            if check is not None and check.valid:
                return self._success(check)
            if check is not None:
                feedback = feedback_message(check.errors, self.policy.feedback_errors)

    def _attempt(self, prompt: str, max_tokens: int) -> OutputCheck | None:
        number = self.budget.attempts
        started = self.p.clock()
        try:
            gen = self.p.call_model(prompt, self.compiled.grammar, max_tokens, self.temperature,
                                    self.seed)
        except Exception as exc:  # noqa: BLE001 - network, rate limits, runtime failures: retry
            if not _retryable(exc, from_runtime=self.p.runtime is not None):
                raise
            seconds = self.p.clock() - started
            self.budget.record(0, seconds)
            self.last_exception = exc
            self.last_errors = (Violation("", f"generation failed: {exc}", "generation"),)
            self.history.append(AttemptRecord(number, "", 0, seconds, max_tokens, None,
                                              errors=self.last_errors))
            return None
        seconds = self.p.clock() - started
        self.budget.record(gen.total_tokens, seconds)
        self.last_generation = gen
        check = check_output(gen.text, self.compiled.validator, self.rules, policy=self.policy,
                             hit_token_limit=gen.finish_reason == "length")
        self.last_check = check
        self.last_errors = check.errors
        self.history.append(AttemptRecord(
            number, gen.text, gen.total_tokens, seconds, max_tokens, gen.finish_reason,
            check.repairs, check.errors, check.parsed_as_is, gen.clipped_mass_avg))
        self.outputs.append(_output_record(check, gen, seconds))
        return check

    def _success(self, check: OutputCheck) -> StructuredResult:
        if self.budget.attempts > 1:
            layer: LayerUsed = "retry"
        else:
            layer = "constrain" if check.parsed_as_is else "repair"
        record = self._record(layer, valid=True, degraded=False, confidence=1.0)
        return StructuredResult(check.value, True, layer, self.budget.attempts, (), False, 1.0,
                                record, None, check.repairs, tuple(self.history))

    def _give_up(self, exhausted: BudgetExhaustedError) -> StructuredResult:
        if self.policy.salvage and self.history and self.history[-1].text:
            found = salvage(self.history[-1].text, check=self._salvage_check,
                            violations=self.last_errors,
                            repaired=self.last_check.repair if self.last_check else None,
                            known_keys=self.compiled.top_level_keys)
            if found is not None:
                record = self._record("salvage", valid=False, degraded=True,
                                      confidence=found.confidence, exhausted=exhausted.budget)
                return StructuredResult(None, False, "salvage", self.budget.attempts,
                                        self.last_errors, True, found.confidence, record,
                                        found.value, self.last_check.repairs if self.last_check
                                        else (), tuple(self.history))
        exhausted.history = tuple(self.history)  # type: ignore[attr-defined]
        exhausted.record = self._record(  # type: ignore[attr-defined]
            None, valid=False, degraded=False, confidence=0.0, exhausted=exhausted.budget)
        raise exhausted from self.last_exception

    def _salvage_check(self, partial: Any) -> list[Violation]:
        """Schema errors of a pruned object, plus the rules that can judge a partial object."""
        found = self.compiled.validator.validate(partial)
        for rule in self.rules:
            try:
                found += check_rules(partial, [rule])
            except RuleError:
                continue  # this rule cannot judge a partial object; its fields were pruned before
        return found

    def _record(self, layer: str | None, *, valid: bool, degraded: bool, confidence: float,
                exhausted: str | None = None) -> GenerationRecord:
        gen = self.last_generation
        record = GenerationRecord(
            schema_hash=self.compiled.schema_hash[:16],
            model=self.p.model_name,
            constrained=self.compiled.grammar is not None,
            layer_used=layer, valid=valid, degraded=degraded, confidence=confidence,
            attempts=self.budget.attempts, tokens=self.budget.tokens,
            seconds=self.p.clock() - self.started, budget_exhausted=exhausted,
            schema_compile_ms=self.compiled.compile_ms, grammar_cache_hit=self.compiled.cache_hit,
            mask_p50_us=gen.mask_p50_us if gen else None,
            mask_p99_us=gen.mask_p99_us if gen else None,
            outputs=tuple(self.outputs),
        )
        self.p.metrics.observe(record)
        if self.p.log:
            log_record(record)
        return record


def _retryable(exc: Exception, *, from_runtime: bool) -> bool:
    """A runtime's ``GenerationError``, or anything a plain generator raises (a remote endpoint's
    network and rate-limit errors), costs an attempt; formcast's own other errors propagate."""
    if isinstance(exc, GenerationError):
        return True
    return not from_runtime and not isinstance(exc, FormcastError)


def _output_record(check: OutputCheck, gen: GenerationResult, seconds: float) -> OutputRecord:
    return OutputRecord(
        parsed_as_is=check.parsed_as_is,
        repaired=check.parsed and not check.parsed_as_is,
        format_as_is=check.parsed_as_is and check.format_ok,
        format_after_repair=check.format_ok,
        semantic_ok=check.semantic_ok,
        tokens=gen.total_tokens, seconds=seconds, finish_reason=gen.finish_reason,
        repair_kinds=tuple(r.kind for r in check.repairs),
        error_kinds=tuple(sorted({e.kind for e in check.errors})),
        errors=tuple(str(e) for e in check.errors[:5]),
        clipped_mass_avg=gen.clipped_mass_avg, clipped_steps=len(gen.clipped_mass),
    )


# ----------------------------------------------------------------------------- module entry point

_NAMED_PIPELINES: dict[str, Pipeline] = {}


def generate(prompt: str, *, schema: Any, rules: Iterable[RuleLike] = (),
             policy: RetryPolicy | None = None, model: Runtime | Generator | str = "smollm2",
             **options: Any) -> StructuredResult:
    """Generate a structured value in one call (see ``Pipeline.generate``).

    A model given by name is loaded once and kept for later calls; grammars are cached
    process-wide either way.
    """
    if isinstance(model, str):
        pipeline = _NAMED_PIPELINES.get(model)
        if pipeline is None:
            pipeline = _NAMED_PIPELINES[model] = Pipeline(model)
    else:
        pipeline = Pipeline(model)
    return pipeline.generate(prompt, schema=schema, rules=rules, policy=policy, **options)


# ----------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class EvalSample:
    """One prompt's single, un-retried output in one arm of an evaluation."""

    prompt_index: int
    text: str
    format_as_is: bool
    format_after_repair: bool
    semantic_ok: bool
    repaired: bool
    completeness: float
    tokens: int
    seconds: float
    clipped_mass_avg: float | None
    errors: tuple[str, ...]


@dataclass(frozen=True)
class EvalArm:
    """The chapter 12 rates of one way of generating (constrained or not) over a prompt set."""

    name: str
    samples: tuple[EvalSample, ...]

    def _share(self, attr: str) -> float:
        return sum(bool(getattr(s, attr)) for s in self.samples) / len(self.samples) \
            if self.samples else 0.0

    @property
    def format_first_pass(self) -> float:
        return self._share("format_as_is")

    @property
    def post_repair_pass(self) -> float:
        return self._share("format_after_repair")

    @property
    def semantic_pass(self) -> float:
        return self._share("semantic_ok")

    @property
    def repair_rate(self) -> float:
        return self._share("repaired")

    @property
    def field_completeness(self) -> float:
        return sum(s.completeness for s in self.samples) / len(self.samples) if self.samples \
            else 0.0

    @property
    def clipped_mass_avg(self) -> float | None:
        values = [s.clipped_mass_avg for s in self.samples if s.clipped_mass_avg is not None]
        return sum(values) / len(values) if values else None

    @property
    def tokens_avg(self) -> float:
        return sum(s.tokens for s in self.samples) / len(self.samples) if self.samples else 0.0

    @property
    def seconds_avg(self) -> float:
        return sum(s.seconds for s in self.samples) / len(self.samples) if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": len(self.samples),
            "format_first_pass": self.format_first_pass,
            "post_repair_pass": self.post_repair_pass,
            "semantic_pass": self.semantic_pass,
            "repair_rate": self.repair_rate,
            "field_completeness": self.field_completeness,
            "clipped_mass_avg": self.clipped_mass_avg,
            "tokens_avg": self.tokens_avg,
            "seconds_avg": self.seconds_avg,
            "samples": [
                {"prompt": s.prompt_index, "format_first_pass": s.format_as_is,
                 "post_repair_pass": s.format_after_repair, "semantic_pass": s.semantic_ok,
                 "repaired": s.repaired, "completeness": s.completeness, "tokens": s.tokens,
                 "errors": list(s.errors), "text": s.text}
                for s in self.samples
            ],
        }


@dataclass(frozen=True)
class EvalReport:
    """Constrained and unconstrained generation side by side on the same model and prompts."""

    model: str
    schema_hash: str
    constrained: EvalArm
    unconstrained: EvalArm

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "schema_hash": self.schema_hash,
                "constrained": self.constrained.to_dict(),
                "unconstrained": self.unconstrained.to_dict()}

    def table(self) -> str:
        """A plain-text table of the three rates of chapter 12 plus clipped mass and completeness."""
        c, u = self.constrained, self.unconstrained

        def pct(x: float) -> str:
            return f"{100 * x:6.1f}%"

        def mass(x: float | None) -> str:
            return "    n/a" if x is None else f"{x:7.4f}"

        rows = [
            ("first-pass format", pct(c.format_first_pass), pct(u.format_first_pass)),
            ("post-repair pass", pct(c.post_repair_pass), pct(u.post_repair_pass)),
            ("semantic validity", pct(c.semantic_pass), pct(u.semantic_pass)),
            ("needed repair", pct(c.repair_rate), pct(u.repair_rate)),
            ("field completeness", pct(c.field_completeness), pct(u.field_completeness)),
            ("clipped mass (avg)", mass(c.clipped_mass_avg), mass(u.clipped_mass_avg)),
            ("tokens per output", f"{c.tokens_avg:7.1f}", f"{u.tokens_avg:7.1f}"),
            ("seconds per output", f"{c.seconds_avg:7.2f}", f"{u.seconds_avg:7.2f}"),
        ]
        head = f"{'':20} {'constrained':>12} {'unconstrained':>14}"
        lines = [f"model {self.model}, {len(c.samples)} prompt(s), schema {self.schema_hash[:12]}",
                 head, "-" * len(head)]
        lines += [f"{name:20} {a:>12} {b:>14}" for name, a, b in rows]
        return "\n".join(lines)


def evaluate(model: Runtime | str | Pipeline, schema: Any, prompts: Sequence[str], *,
             rules: Iterable[RuleLike] = (), max_tokens: int = 512,
             progress: Callable[[str, int, int], None] | None = None) -> EvalReport:
    """Run every prompt once constrained and once unconstrained on the same model (no retries,
    so the rates measure the layers, not the retry loop) and compare them."""
    pipeline = model if isinstance(model, Pipeline) else Pipeline(model, log=False)
    if pipeline.runtime is None:
        raise FormcastError("evaluation compares constrained and unconstrained decoding, so it "
                            "needs a Runtime (a callable generator cannot take a grammar)")
    if not prompts:
        raise FormcastError("no prompts to evaluate")
    rules = list(rules)
    compiled = pipeline.compile(schema, grammar=True)
    policy = RetryPolicy(max_attempts=1, token_budget=None, max_tokens=max_tokens)
    arms = {}
    for name, grammar in (("constrained", compiled.grammar), ("unconstrained", None)):
        samples = []
        for i, task in enumerate(prompts):
            if progress is not None:
                progress(name, i, len(prompts))
            text_prompt = pipeline.render_prompt(task, schema)
            started = pipeline.clock()
            gen = pipeline.call_model(text_prompt, grammar, max_tokens, pipeline.temperature,
                                      pipeline.seed)
            seconds = pipeline.clock() - started
            check = check_output(gen.text, compiled.validator, rules, policy=policy,
                                 hit_token_limit=gen.finish_reason == "length")
            samples.append(EvalSample(
                i, gen.text, check.parsed_as_is and check.format_ok, check.format_ok,
                check.semantic_ok, check.parsed and not check.parsed_as_is,
                field_completeness(check.value, schema) if check.parsed else 0.0,
                gen.total_tokens, seconds, gen.clipped_mass_avg,
                tuple(str(e) for e in check.errors[:5])))
        arms[name] = EvalArm(name, tuple(samples))
    return EvalReport(pipeline.model_name, compiled.schema_hash, arms["constrained"],
                      arms["unconstrained"])
