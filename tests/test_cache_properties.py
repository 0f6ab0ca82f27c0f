"""Cached decode equals a full recompute of the whole prefix, for random small models."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from random_models import scenarios

from engine.diff import diff_scenario

PROPERTY_TOLERANCE = 1e-10


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_cached_rounds_equal_full_recompute(scenario, backend):
    diffs = diff_scenario(scenario, backend)
    assert diffs, "the diff compared nothing"
    decode_rounds = {d.round for d in diffs if d.phase == "decode"}
    worst = max(diffs, key=lambda d: d.max_abs)
    assert worst.max_abs <= PROPERTY_TOLERANCE, worst
    expected_rounds = max(r.max_new_tokens for r in scenario.requests) - 1
    assert decode_rounds <= set(range(1, expected_rounds + 1))
