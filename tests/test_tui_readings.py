"""The TUI's interventions, logit lens and attention at a glance, driven by keys (Pilot)."""

from __future__ import annotations

import numpy as np
from textual.widgets import Input
from tui_helpers import make_app, matrix_text, screen_text, settle, state, status

from engine import load_scenario

from engine import to_host
from tinyllm_tui.tui.widgets.dialogs import PromptScreen
from tinyllm_tui.tui.widgets.readings import GlanceScreen, LensScreen


async def test_ablating_a_head_shows_in_the_status_and_the_lens_and_glance_open():
    """p ablates a head (the status line says so and the choice before → after), l opens the lens,
    A every head of the layer, Enter on one opens its pattern."""
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("g", *"28", "enter")  # request 0's prefill, just before its choice
        await pilot.press("p")  # patch / ablate: the prompt starts with the current operator
        assert isinstance(app.screen, PromptScreen)
        assert app.screen.query_one(Input).value == "sample.hook_filtered[:,:]="
        await pilot.press("ctrl+u", *"blocks.0.attn head 9", "enter")  # X01 has heads 0–1: refused in the prompt
        assert "heads 0–1" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("ctrl+u", *"blocks.0.attn head 1", "enter")
        await settle(pilot)
        assert "✂ 1 intervention: blocks.0.attn.hook_z head 1=0" in status(app)
        assert " · chose '" in status(app) and " → '" in status(app)  # the round's choice before → after
        assert state(app).step == 28
        await pilot.press("l")  # the logit lens of this round
        await settle(pilot)
        assert isinstance(app.screen, LensScreen)
        text = screen_text(app)
        assert "0 pre" in text and "0 post" in text and "direct logit attribution" in text  # X01: one layer
        assert "L0.H1          +0.000000" in text  # the ablated head adds nothing to the chosen logit
        await pilot.press("escape")
        await pilot.press("g", *"7", "enter")  # layer 0's attention, in the prefill
        await pilot.press("A")  # every head of layer 0
        assert isinstance(app.screen, GlanceScreen)
        assert "▸h0" in screen_text(app) and "h1" in screen_text(app)
        await pilot.press("right", "enter")  # head 1: opened as the current matrix
        await settle(pilot)
        assert state(app).name == "blocks.0.attn.hook_pattern" and state(app).head == 1
        await pilot.press("g", *"attn.z h1", "enter")  # the ablated head's output: zero, each cell marked changed
        await settle(pilot)
        assert state(app).name == "blocks.0.attn.hook_z" and np.all(to_host(state(app).values) == 0)
        assert all("•" in row for row in matrix_text(app)[-3:])
        await pilot.press("u")  # undo the intervention: the last change
        await settle(pilot)
        assert "✂" not in status(app) and "undid the change of intervention blocks.0.attn.hook_z" in status(app)
        assert app.debugger.scenario.interventions == ()


async def test_w_saves_the_interventions_into_the_scenario_file(x01_copy):
    """p then W: the scenario file lists the intervention under interventions:."""
    app = make_app(x01_copy)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("p", "ctrl+u", *"blocks.0.hook_resid_mid[1,:]*=0.5", "enter")  # scale position 1's residual
        await settle(pilot)
        await pilot.press("W")
        assert f"saved to {x01_copy}" in status(app)
    assert [i.text for i in load_scenario(x01_copy).interventions] == ["blocks.0.hook_resid_mid[1,:]*=0.5"]


async def test_the_lens_wraps_a_sentence_wider_than_its_window_by_display_cells():
    """At 100 columns the attribution's line (its token 爱 two cells wide) wraps: its last words stay on screen."""
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("g", *"29", "enter")  # request 0's prefill choice: the attribution is there
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        assert isinstance(app.screen, LensScreen)
        assert "norm bias 0.000000" in screen_text(app)  # the line wrapped inside the window
