"""Injected cache bugs live in engine.faults; the reference forward pass has no branch on them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from conftest import X01

from engine import load_scenario, make_backend
from engine.faults import FAULTS, INJECTIONS, NO_FAULT
from engine.model import Transformer
from engine.session import INJECTIONS as SESSION_INJECTIONS
from engine.trace import LayerCache, Phase

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def test_the_reference_path_never_branches_on_a_bug_name():
    for name in ("model.py", "session.py"):
        source = (ENGINE / name).read_text()
        assert not re.search(r"\b(bug|inject)\s*==", source), name
        assert not any(f'"{bug}"' in source for bug in FAULTS), name


def test_injections_are_the_faults_descriptions_and_the_session_reexports_them():
    assert SESSION_INJECTIONS is INJECTIONS
    assert list(INJECTIONS) == ["chunk-mask", "position-reset", "duplicate-append", "stale-cache", "no-cache-layer1"]
    assert all(INJECTIONS[name] == fault.description for name, fault in FAULTS.items())


def test_each_fault_changes_only_its_own_point():
    xp = np
    causal = np.array([[True, True, True, False], [True, True, True, True]])  # 2 new keys after 2 cached
    caches = [LayerCache(np.zeros((k, 2)), np.zeros((k, 2)), "w") for k in (3, 3)]
    rebuilt = [LayerCache(np.ones((3, 2)), np.ones((3, 2)), "other")] * 2
    for name, fault in [("none", NO_FAULT), *FAULTS.items()]:
        mask = fault.mask(xp, causal, 2, 4)
        assert (mask.tolist() == np.tril(np.ones((2, 4), bool)).tolist()) == (name == "chunk-mask")
        assert (fault.positions(Phase.DECODE, 3, 1) == [0]) == (name == "position-reset")
        assert fault.positions(Phase.PREFILL, 3, 2) == [3, 4]
        assert (fault.feed(Phase.DECODE, [9], [1, 2, 9]) == [1, 2, 9]) == (name == "duplicate-append")
        assert fault.feed(Phase.PREFILL, [1, 2], [1, 2]) == [1, 2]
        assert (fault.starting_caches(1, caches, lambda scale: rebuilt) is rebuilt) == (name == "stale-cache")
        assert fault.starting_caches(2, caches, lambda scale: rebuilt) is caches
        assert (fault.layer_cache(1, caches) is caches[0]) == (name == "no-cache-layer1")
        assert fault.layer_cache(0, caches) is caches[0]


def test_the_forward_pass_keeps_no_per_call_state():
    scenario = load_scenario(X01)
    model = Transformer(scenario.model, scenario.weights, make_backend("numpy"), scenario.fingerprint)
    before = dict(vars(model))
    for _ in model.forward([1, 2, 3], [0, 1, 2], model.empty_caches(), padded_keys=[False, True, False]):
        pass
    assert vars(model) == before
