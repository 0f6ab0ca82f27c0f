"""Cached decode equals a full recompute of the whole prefix, for random small models."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SCENARIOS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_models import scenarios

from engine import Session, load_scenario, to_host
from engine.compare.diff import diff_scenario, first_divergence
from engine.session import INJECTIONS

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


# -- injected bugs ---------------------------------------------------------------------------
def _trace(session: Session) -> list[tuple]:
    """Every operator's output, then after each round every layer's state: its rows by the position they hold."""
    trace, states = [], list(session.steps())
    for state, after in zip(states, [*states[1:], None]):
        trace.append((state.request, state.round, state.name, state.head, to_host(state.values)))
        if after is None or (after.request, after.round) != (state.request, state.round):
            trace.extend((state.request, state.round, layer, *_rows_by_position(cache))
                         for layer, cache in enumerate(state.caches))
    return trace


def _rows_by_position(cache) -> tuple[tuple[int, ...], np.ndarray]:
    """The positions a layer state holds (empty slots left out), and its items side by side, rows in that order."""
    order = sorted((position, row) for row, position in enumerate(cache.row_positions) if position >= 0)
    items = [np.asarray(to_host(item)) for item in cache.dump_items().values()]
    return tuple(p for p, _ in order), np.concatenate([item[[row for _, row in order]] for item in items], axis=1)


def changes_numbers(scenario, bug: str, backend) -> bool:
    """Whether the bug changes any number of the cached run, its operators' or its layer states': found without
    the diff."""
    clean, buggy = _trace(Session(scenario, backend)), _trace(Session(scenario, backend, inject=bug))
    if len(clean) != len(buggy):
        return True
    for (*key_a, a), (*key_b, b) in zip(clean, buggy):
        if key_a != key_b or a.shape != b.shape:
            return True
        same = (a == b) | (np.abs(a - np.where(np.isfinite(b), b, 0)) <= PROPERTY_TOLERANCE * 1e-2)
        if not np.all(same):
            return True
    return False


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), bug=st.sampled_from(sorted(INJECTIONS)))
def test_each_injected_bug_is_flagged_exactly_when_it_changes_numbers(scenario, bug, backend):
    flagged = first_divergence(diff_scenario(scenario, backend, bug)) is not None
    assert flagged == changes_numbers(scenario, bug, backend)


# Where each bug first shows, reasoned from what it breaks (not read off the program):
# the first operator of the first round in which the broken thing is used.
FIRST_SIGHTINGS = [
    ("chunk-mask", "chunked", ("prefill", "blocks.0.attn.hook_attn_scores")),  # the second chunk's mask
    ("position-reset", "decoder2", ("decode", "hook_pos_embed")),  # decode position 3 computed as 0
    ("duplicate-append", "x01", ("decode", "hook_embed")),  # the whole sequence is fed again
    ("stale-cache", "x01", ("decode", "blocks.0.attn.hook_attn_scores")),  # first read of the old K
    ("no-cache-layer1", "decoder2", ("decode", "blocks.1.attn.hook_attn_scores")),  # layer 1 reads layer 0's K
]


@pytest.mark.parametrize("bug, name, expected", FIRST_SIGHTINGS, ids=[f[0] for f in FIRST_SIGHTINGS])
def test_the_diff_is_not_blind_to_any_bug(bug, name, expected, backend):
    """Each bug changes the numbers of a seed scenario, so a diff that saw nothing would fail above."""
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    assert changes_numbers(scenario, bug, backend)
    first = first_divergence(diff_scenario(scenario, backend, bug))
    assert (first.phase, first.name) == expected
    assert first.max_abs > 1e-6


@pytest.mark.parametrize("name", ["x01", "decoder2", "chunked", "eos7"])
def test_every_scenario_cached_equals_full(name, backend):
    diffs = diff_scenario(load_scenario(SCENARIOS / f"{name}.yaml"), backend)
    assert max(d.max_abs for d in diffs) <= 1e-12
