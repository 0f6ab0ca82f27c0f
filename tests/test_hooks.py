"""Hooks are typed values: one way to write them, one to read them, and a registry each model emits."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from engine import Session, make_backend
from engine.hooks import Hook, HookError
from engine.loading import open_model
from engine.loading.checkpoint import load_checkpoint

FIXTURES = ROOT / "tests" / "fixtures"
CHECKPOINTS = sorted(p for p in FIXTURES.iterdir() if (p / "config.json").exists()) + sorted(FIXTURES.glob("*/*.gguf"))
SCENARIO_FILES = sorted((ROOT / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("text, hook", [
    ("blocks.2.attn.hook_pattern h3", Hook(2, "attn", "hook_pattern", 3)),
    ("blocks.0.attn.q_norm.hook_scale", Hook(0, "attn.q_norm", "hook_scale")),
    ("blocks.11.hook_resid_pre", Hook(11, "", "hook_resid_pre")),
    ("unembed.hook_out", Hook(None, "unembed", "hook_out")),
    ("hook_embed", Hook(None, "", "hook_embed")),
    ("ln_final.hook_scale", Hook(None, "ln_final", "hook_scale")),
])
def test_a_hook_reads_back_what_it_writes(text, hook):
    assert Hook.parse(text) == hook
    assert hook.render() == text


def test_the_parts_of_a_hook_name_are_fields_not_string_surgery():
    hook = Hook.parse("blocks.1.attn.hook_z h0")
    assert (hook.layer, hook.module, hook.name, hook.head) == (1, "attn", "hook_z", 0)
    assert hook.local == "attn.hook_z" and hook.short == "attn.z h0" and hook.site.render() == "blocks.1.attn.hook_z"
    assert Hook.parse("blocks.0.attn.hook_attn_scores").short == "attn.scores"


@pytest.mark.parametrize("local, layer, hook", [
    ("attn.hook_q", 2, Hook(2, "attn", "hook_q")),
    ("hook_resid_pre", 0, Hook(0, "", "hook_resid_pre")),
    ("attn.q_norm.hook_normalized", 5, Hook(5, "attn.q_norm", "hook_normalized")),
    ("unembed.hook_out", None, Hook(None, "unembed", "hook_out")),
])
def test_a_name_within_a_block_reads_back_what_local_writes(local, layer, hook):
    assert Hook.within(layer, local) == hook and hook.local == local


@pytest.mark.parametrize("text", ["", "blocks.0.", "a b c"])
def test_what_is_not_a_hook_name_is_refused(text):
    with pytest.raises(HookError):
        Hook.parse(text)


def emitted(scenario) -> set[tuple[str, int | None]]:
    session = Session(scenario, make_backend("numpy"))
    return {(s.name, s.head) for s in session.steps()}


def listed(scenario, routed: bool = False) -> set[tuple[str, int | None]]:
    """The session's registry's hooks (the model's and choosing a token's); `routed`: those yielded only when a
    token is routed there instead of the others."""
    registry = Session(scenario, make_backend("numpy")).hooks
    return {(site.hook.text, head) for site in registry if site.routed == routed
            for head in (range(site.heads) if site.heads else [None])}


@pytest.mark.parametrize("path", CHECKPOINTS + SCENARIO_FILES, ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_the_registry_lists_exactly_the_hooks_the_forward_pass_yields(path):
    if path.suffix == ".yaml":
        scenario = open_model(path)
    else:
        scenario = load_checkpoint(path, ids=[1, 2, 3], max_new_tokens=2)
    yielded, registry = emitted(scenario), Session(scenario).hooks
    always, routed = listed(scenario), listed(scenario, routed=True)
    assert always | (yielded & routed) == yielded  # an expert's hooks only where a token was routed to it
    assert all(Hook.parse(name).at(head) in registry for name, head in yielded)
