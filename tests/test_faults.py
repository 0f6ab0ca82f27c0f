"""Injected cache bugs live in engine.faults; the reference forward pass has no branch on them."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import ROOT, X01
from typer.testing import CliRunner

from engine import Session, load_scenario, make_backend
from engine.caches import LayerCache, ScaleAxis
from engine.causes import Cause
from engine.faults import FAULTS, INJECTIONS, NO_FAULT
from engine.model import Transformer
from engine.session import INJECTIONS as SESSION_INJECTIONS
from engine.trace import Phase
from tinyllm_tui.cli import app
from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.tui.result_words import describe

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def test_the_reference_path_never_branches_on_a_bug_name():
    for path in [ENGINE / "model.py", ENGINE / "session.py", *(ENGINE / "layers").glob("*.py")]:
        source = path.read_text()
        assert not re.search(r"\b(bug|inject)\s*==", source), path.name
        assert not any(f'"{bug}"' in source for bug in FAULTS), path.name


def test_every_fault_is_described_by_the_catalogues_and_the_engine_words_none():
    """The engine names its faults; what each does is said by the views' catalogues, in English and Chinese."""
    from tinyllm_tui.tui.i18n import EN, ZH

    assert SESSION_INJECTIONS is INJECTIONS
    assert list(INJECTIONS) == ["chunk-mask", "position-reset", "duplicate-append", "stale-cache", "no-cache-layer1",
                                "padding-unmasked", "positions-not-offset", "rope-off-by-one", "gqa-modulo",
                                "transposed-k", "ring-wrong-slot", "block-table-wrong", "scale-per-tensor",
                                "conv-not-shifted", "conv-shifted-twice", "state-not-decayed", "chunk-state-dropped",
                                "shared-kv-own-cache", "per-layer-previous",
                                "rope-key-unrotated", "absorbed-uk-untransposed"]
    assert {key.removeprefix("inject.") for key in EN if key.startswith("inject.")} == set(INJECTIONS)
    assert all(ZH[f"inject.{name}"] != EN[f"inject.{name}"] for name in INJECTIONS)
    assert not any(hasattr(fault, "description") for fault in FAULTS.values())
    result = CliRunner().invoke(app, ["diff", str(X01), "--inject", "chunk-mask"])
    assert "injected bug chunk-mask: a cached chunk is masked with tril(ones(C, P+C))" in result.output


def test_each_fault_changes_only_its_own_point():
    xp = np
    causal = np.array([[True, True, True, False], [True, True, True, True]])  # 2 new keys after 2 cached
    caches = [LayerCache(np.zeros((k, 2)), np.zeros((k, 2)), "w") for k in (3, 3)]
    rebuilt = [LayerCache(np.ones((3, 2)), np.ones((3, 2)), "other")] * 2
    for name, fault in [("none", NO_FAULT), *FAULTS.items()]:
        mask = fault.mask(xp, causal, 2, 4)
        assert (mask.tolist() == np.tril(np.ones((2, 4), bool)).tolist()) == (name == "chunk-mask")
        assert (fault.positions(Phase.DECODE, 3, 1) == [0]) == (name == "position-reset")
        assert (fault.positions(Phase.DECODE, 3, 1) == [4]) == (name == "rope-off-by-one")
        assert fault.positions(Phase.PREFILL, 3, 2) == [3, 4]
        assert (fault.feed(Phase.DECODE, [9], [1, 2, 9]) == [1, 2, 9]) == (name == "duplicate-append")
        assert fault.feed(Phase.PREFILL, [1, 2], [1, 2]) == [1, 2]
        assert (fault.starting_caches(1, caches, lambda scale: rebuilt) is rebuilt) == (name == "stale-cache")
        assert fault.starting_caches(2, caches, lambda scale: rebuilt) is caches
        assert (fault.layer_state(1, caches) is caches[0]) == (name == "no-cache-layer1")
        assert fault.layer_state(0, caches) is caches[0]
        assert (fault.padded([True, False]) is None) == (name == "padding-unmasked")
        assert (fault.position_offset(2) == 0) == (name == "positions-not-offset")
        assert fault.kv_head(3, 2, 2) == 1  # 3 // 2 and 3 % 2 agree: head 2 tells them apart
        assert (fault.kv_head(2, 2, 2) == 0) == (name == "gqa-modulo")
        k = np.arange(12.0).reshape(3, 4)  # three tokens, two heads of width 2
        assert (not np.array_equal(fault.stored_k(xp, k, 2), k)) == (name == "transposed-k")
        assert (fault.ring_slot(5, 1, 4) == 2) == (name == "ring-wrong-slot")  # slots 1..4 round robin: 5 -> 1
        assert fault.ring_slot(3, 1, 4) == 3
        assert (fault.table_entry(7, [4, 5]) == 5) == (name == "block-table-wrong")
        assert (fault.scale_axis(ScaleAxis.PER_HEAD) is ScaleAxis.PER_TENSOR) == (name == "scale-per-tensor")
        state, decay = np.ones((1, 2, 2)), np.full((1, 1, 1), 0.5)
        assert (fault.decayed(xp, state, decay)[0, 0, 0] == 1.0) == (name == "state-not-decayed")
        assert (fault.carried(xp, state, 1)[0, 0, 0] == 0.0) == (name == "chunk-state-dropped")
        assert fault.carried(xp, state, 0) is state
        rotated, unrotated = np.ones((3, 4)), np.zeros((3, 4))
        assert (fault.cached_rope_key(xp, rotated, unrotated) is unrotated) == (name == "rope-key-unrotated")
        w_uk = np.arange(6.0).reshape(2, 3)  # kv_lora_rank 2, d_nope 3
        assert np.array_equal(fault.absorbed_uk(xp, w_uk), w_uk.T) == (name != "absorbed-uk-untransposed")


def test_the_forward_pass_keeps_no_per_call_state():
    scenario = load_scenario(X01)
    model = Transformer(scenario.model, scenario.weights, make_backend("numpy"), scenario.fingerprint)
    before = dict(vars(model))
    for _ in model.forward([1, 2, 3], [0, 1, 2], model.empty_caches(), padded_keys=[False, True, False]):
        pass
    assert vars(model) == before



def learned_positions_model(folder: Path, max_positions: int) -> Path:
    tool = ROOT / "tools" / "make_big_model.py"
    subprocess.run([sys.executable, str(tool), str(folder), "--d-model", "16", "--layers", "2", "--vocab", "50",
                    "--max-positions", str(max_positions), "--prompt", "8", "--new", "4"], check=True, capture_output=True)
    return folder / "model.yaml"


def test_a_bug_that_would_feed_past_a_learned_position_table_says_so_and_is_not_offered(tmp_path):
    roomy = load_scenario(learned_positions_model(tmp_path / "roomy", 64))
    fed = [p for s in Session(roomy, inject="duplicate-append").steps() if s.name == "hook_pos_embed" for p in s.positions]
    needed = max(fed) + 1  # what the bug really feeds, with room to spare
    fault = FAULTS["duplicate-append"]
    assert fault.cannot_run(dataclasses.replace(roomy, model=dataclasses.replace(roomy.model, max_positions=needed))) is None
    tight = learned_positions_model(tmp_path / "tight", needed - 1)
    scenario = load_scenario(tight)
    assert fault.cannot_run(scenario) == Cause("fault.past_positions", {"position": needed - 1, "positions": needed - 1})
    assert all(FAULTS[name].cannot_run(scenario) is None  # the others run or miss a batch / cache layout
               for name in INJECTIONS if name in ("chunk-mask", "position-reset", "stale-cache", "no-cache-layer1",
                                                  "rope-off-by-one", "transposed-k"))
    debugger = Debugger(scenario)
    offered = [debugger.cycle_injection() and debugger.inject for _ in INJECTIONS]
    assert "duplicate-append" not in offered and "position-reset" in offered
    result = CliRunner().invoke(app, ["diff", str(tight), "--inject", "duplicate-append"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert f"bug 'duplicate-append' cannot run on {tight}: it would feed position {needed - 1}" in result.stderr


def test_a_bug_that_cannot_show_on_x01_is_refused_and_not_offered():
    scenario = load_scenario(X01)  # no position term, one layer
    debugger = Debugger(scenario)
    results = [debugger.cycle_injection()]
    while results[-1].name is not None:  # one whole cycle, back to no bug
        results.append(debugger.cycle_injection())
    offered = {result.name for result in results}
    assert offered == {None, "chunk-mask", "duplicate-append", "stale-cache", "transposed-k"}
    skipped = [name for result in results for name, _ in result.skipped]
    assert sorted(skipped) == sorted(set(INJECTIONS) - offered)  # each said once a cycle, none offered
    said = " ".join(describe(result, "en") for result in results)
    assert "position-reset: the model has no position term, so wrong positions change nothing" in said
    assert "position-reset：模型没有位置项，错误的位置不会改变任何数" in " ".join(describe(r, "zh") for r in results)
    result = CliRunner().invoke(app, ["diff", str(X01), "--inject", "position-reset"])
    assert result.exit_code == 2 and result.stderr == (
        f"tinyllm-tui: error: Invalid value for --inject: bug 'position-reset' cannot run on {X01}: "
        "the model has no position term, so wrong positions change nothing\n")
    opened = CliRunner().invoke(app, [str(X01), "--lang", "zh", "--inject", "position-reset"])  # the debugger's own
    assert opened.exit_code == 2 and opened.stderr == (  # language, before it opens
        f"tinyllm-tui: error: --inject 的值无效：错误 'position-reset' 无法在 {X01} 上运行：模型没有位置项，错误的位置不会改变任何数\n")


def test_the_readme_lists_every_injectable_bug_in_the_clis_order():
    """A new user's report: the README's `--inject` list lacked shared-kv-own-cache and per-layer-previous, which
    the CLI takes. Read from the registry, the list cannot drift again."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"`--inject ([a-z0-9|\n-]+)`", readme)
    assert listed is not None
    assert listed.group(1).replace("\n", "").split("|") == list(INJECTIONS)
