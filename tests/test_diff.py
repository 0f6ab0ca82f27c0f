"""The full-vs-cached diff: X01 agrees, and a diff between different computations is not blind."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
from conftest import ROOT, X01

from engine import Session, load_scenario, make_backend
from engine.compare.diff import TOLERANCE, diff_runs, diff_scenario, first_divergence
from engine.faults import FAULTS, INJECTIONS
from engine.scenario import Scenario
from engine.spec import DecodeRule, Request, Vocab
from engine.trace import Phase
from tinyllm_tui.presentation.summaries import diff_summary

sys.path.insert(0, str(ROOT / "tools"))
from make_big_model import random_weights, spec  # noqa: E402


def test_x01_cached_round_equals_full_recompute(backend):
    diffs = diff_scenario(load_scenario(X01), backend)
    decode = [d for d in diffs if d.phase is Phase.DECODE]
    assert {d.round for d in decode} == {1}
    # every operator of the one cached round of 我爱学习 → 爱, then the one layer's state (its K/V cache) at its end
    assert len(decode) == 31 + 2 and [d.name for d in decode[-2:]] == ["blocks.0.attn.cache_k", "blocks.0.attn.cache_v"]
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


def float32_model():
    """A random GPT-2-layout model in float32: wide enough that a decode row (one matrix-vector
    product) and the full recompute (a matrix product) sum in different orders."""
    model = spec(256, 2, 4, max_positions=256)
    prompt = tuple(int(t) for t in np.random.default_rng(2).integers(0, 500, 24))
    return Scenario("<f32>", "f32", Vocab(tuple(f"t{i}" for i in range(500))), model,
                    random_weights(model, 500, "float32"), (Request(prompt, 4),), DecodeRule(max_new_tokens=4))


@pytest.mark.parametrize("inject", [None, *(n for n in INJECTIONS if not FAULTS[n].cannot_run(float32_model()))])
def test_a_float32_diff_forgives_its_round_off_but_not_a_cache_bug(inject):
    backend = make_backend("numpy", "float32")
    diffs = diff_scenario(float32_model(), backend, inject)
    if inject is None:
        assert max(d.max_abs for d in diffs) > 1e-7  # summation order alone, far past float64's 1e-12
        assert first_divergence(diffs) is None
        assert diff_summary(diffs, None) == "✓ cached equals full recompute: every operator within 0.000536871"
    else:
        assert first_divergence(diffs).max_abs > 1e-2
