"""The chapter 13.4 figures computed from generation records."""

from __future__ import annotations

import json

from formcast.observe import GenerationRecord, OutputRecord, PipelineMetrics

AS_IS = OutputRecord(parsed_as_is=True, repaired=False, format_as_is=True,
                     format_after_repair=True, semantic_ok=True, tokens=10,
                     clipped_mass_avg=0.1, clipped_steps=10)
SEMANTIC_FAIL = OutputRecord(parsed_as_is=True, repaired=False, format_as_is=True,
                             format_after_repair=True, semantic_ok=False, tokens=10,
                             clipped_mass_avg=0.3, clipped_steps=30)
REPAIRED = OutputRecord(parsed_as_is=False, repaired=True, format_as_is=False,
                        format_after_repair=True, semantic_ok=True)
BROKEN = OutputRecord(parsed_as_is=False, repaired=False, format_as_is=False,
                      format_after_repair=False, semantic_ok=False)


def record(outputs: tuple[OutputRecord, ...], **fields: object) -> GenerationRecord:
    base = dict(schema_hash="abc", model="m", constrained=True, layer_used="constrain",
                valid=True, degraded=False, confidence=1.0, attempts=len(outputs), tokens=20,
                seconds=0.5, schema_compile_ms=2.0, grammar_cache_hit=False,
                mask_p50_us=10.0, mask_p99_us=200.0)
    base.update(fields)
    return GenerationRecord(outputs=outputs, **base)  # type: ignore[arg-type]


def test_rates_are_per_output_and_kept_apart() -> None:
    m = PipelineMetrics()
    m.observe(record((AS_IS,)))
    m.observe(record((SEMANTIC_FAIL, AS_IS), layer_used="retry", grammar_cache_hit=True,
                     schema_compile_ms=0.0))
    m.observe(record((BROKEN, REPAIRED), layer_used="retry", grammar_cache_hit=True,
                     schema_compile_ms=0.0, mask_p99_us=900.0))
    m.observe(record((BROKEN,), layer_used="salvage", valid=False, degraded=True,
                     confidence=0.4, budget_exhausted="attempts", grammar_cache_hit=True,
                     schema_compile_ms=0.0))
    s = m.summary()
    assert s["outputs"] == 6 and s["generations"] == 4
    assert s["format_first_pass"] == 3 / 6
    assert s["post_repair_pass"] == 4 / 6
    assert s["repair_rate"] == 1 / 6
    assert s["semantic_pass_rate"] == 3 / 6
    assert s["degraded"] == 1 and s["valid"] == 3 and s["budget_exhausted"] == 1
    assert s["grammar_cache_hit_rate"] == 3 / 4
    assert s["schema_compile_ms"]["avg"] == 0.5
    assert s["attempts_histogram"] == {"1": 2, "2": 2}
    assert s["layers"] == {"constrain": 1, "retry": 2, "salvage": 1}
    assert s["mask_p99_us"] == 900.0 and s["mask_p50_us"] == 10.0
    assert abs(s["clipped_mass_avg"] - (0.1 + 0.3 + 0.1) / 3) < 1e-12


def test_record_clipped_mass_is_weighted_by_steps() -> None:
    rec = record((AS_IS, SEMANTIC_FAIL))
    assert abs(rec.clipped_mass_avg - (0.1 * 10 + 0.3 * 30) / 40) < 1e-12
    assert record((BROKEN,)).clipped_mass_avg is None


def test_exports_carry_the_named_fields() -> None:
    m = PipelineMetrics()
    m.observe(record((AS_IS,)))
    data = json.loads(m.to_json())
    for name in ("format_first_pass", "repair_rate", "semantic_pass_rate", "clipped_mass_avg",
                 "schema_compile_ms", "grammar_cache_hit_rate", "mask_p50_us", "mask_p99_us",
                 "attempts_histogram", "degraded"):
        assert name in data["summary"]
    text = m.to_prometheus()
    for line in ("formcast_format_first_pass_ratio 1", "formcast_repair_ratio 0",
                 "formcast_semantic_pass_ratio 1", "formcast_outputs_total 1",
                 'formcast_attempts_bucket{le="1"} 1', "formcast_degraded_total 0"):
        assert line in text.splitlines()


def test_record_json_line() -> None:
    data = json.loads(record((REPAIRED,)).to_json())
    assert data["outputs"][0]["repaired"] is True
    assert data["format_first_pass"] is False and data["clipped_mass_avg"] is None
