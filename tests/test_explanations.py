"""Every operator of every architecture the fixtures hold is explained in English and Chinese: the views look its
texts up by tinyllm_tui.debugger.frame.hook_key (the stack's catalogue, then its kind's EXPLANATIONS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.loading import open_model
from engine.session import Session
from tinyllm_tui.debugger.frame import hook_key
from tinyllm_tui.tui.explanations import texts_of

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
CHECKPOINTS = sorted(p for p in FIXTURES.iterdir() if (p / "config.json").exists()) + sorted(FIXTURES.glob("*/*.gguf"))
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def unexplained(scenario) -> dict[str, str]:
    """The explanation key -> the first operator filed under it, of each key with no four texts in en and zh."""
    found = {}
    for state in Session(scenario).steps():
        texts = texts_of(hook_key(state)) or {}
        if not (set(texts) == {"en", "zh"} and len(texts["en"]) == len(texts["zh"]) == 4):
            found.setdefault(hook_key(state), state.name)
    return found


def opened(path: Path):
    """A scenario file as it is; a checkpoint fed three tokens and decoding two (a prefill and a cached round)."""
    return open_model(path) if path in SCENARIOS else open_model(path, ids=[1, 2, 3], max_new_tokens=2)


@pytest.mark.parametrize("path", CHECKPOINTS + SCENARIOS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_operator_of_every_fixture_and_scenario_is_explained_in_english_and_chinese(path):
    assert unexplained(opened(path)) == {}


def test_the_fixtures_hold_every_mixer_and_ffn_kind():
    """The walk above reaches every registered kind (a kind no fixture holds would go unchecked)."""
    from engine import layers

    held = {(block.mixer, block.ffn) for path in CHECKPOINTS + SCENARIOS for block in opened(path).model.blocks}
    assert {mixer for mixer, _ in held} == set(layers.MIXERS) and {ffn for _, ffn in held} == set(layers.FFNS)

