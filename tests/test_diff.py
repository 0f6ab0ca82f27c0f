"""The full-vs-cached diff: X01 agrees, and a diff between different computations is not blind."""

from __future__ import annotations

import dataclasses

from conftest import X01

from engine import Session, load_scenario
from engine.diff import TOLERANCE, diff_runs, diff_scenario, first_divergence


def test_x01_cached_round_equals_full_recompute(backend):
    diffs = diff_scenario(load_scenario(X01), backend)
    decode = [d for d in diffs if d.phase == "decode"]
    assert {d.round for d in decode} == {1}
    assert len(decode) == 25  # every operator of the one cached round of 我爱学习 → 爱
    assert max(d.max_abs for d in diffs) <= TOLERANCE


def test_diff_names_the_first_operator_that_reads_a_changed_weight():
    scenario = load_scenario(X01)
    weights = dict(scenario.weights)
    weights["blocks.0.attn.wv"] = weights["blocks.0.attn.wv"] * 1.001
    other = dataclasses.replace(scenario, weights=weights)
    diffs = diff_runs(Session(other).steps(), Session(scenario, mode="full").steps())
    first = first_divergence(diffs)
    assert (first.request, first.round, first.name) == (0, 0, "blocks.0.attn.hook_v")
    assert first.max_abs > 1e-4
