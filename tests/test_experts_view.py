"""The experts at a glance (the routing screen's `a`: every sparse layer's tokens per expert and least margin) and
the operator list of a mixture of experts, which lists only the experts a pass ran (tests/fixtures/qwen3_moe)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.debugger import Debugger
from tinyllm_tui.debugger.readings import Routing
from tinyllm_tui.presentation.routing import experts_glance_lines

FOLDER = Path(__file__).parent / "fixtures" / "qwen3_moe"
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]


def routing(layer: int, chosen: list[list[int]], margins: list[float], experts: int = 10) -> Routing:
    rows = len(chosen)
    return Routing(layer, tuple(range(rows)), tuple(f"{t} · 我爱学习很多很多" if t == 1 else f"{t} · t{t}" for t in range(rows)),
                   np.array(chosen), np.full((rows, 2), 0.5), np.array(margins), experts)


def test_the_glance_counts_each_layers_tokens_per_expert_and_names_its_least_margin():
    routings = [routing(0, [[0, 1], [0, 2], [9, 0]], [0.2, 0.01, 0.3]),
                routing(3, [[4, 5], [5, 6], [6, 4]], [0.5, 4e-4, 0.1])]
    lines = experts_glance_lines(routings, width=100, height=10)
    assert lines[0] == "2 sparse layers · experts 0–9 of 10 · tokens per expert of the pass's 3"
    assert lines[1].split() == ["layer", *(f"e{e}" for e in range(10)), "least", "margin"]
    assert lines[2].split() == ["0", "3", "1", "1", "·", "·", "·", "·", "·", "·", "1", "1.0e-02", "1", "·", "我爱学…"]
    assert lines[3].split() == ["3", "·", "·", "·", "·", "2", "2", "2", "·", "·", "·", "4.0e-04⚠", "1", "·", "我爱学…"]
    narrow = experts_glance_lines(routings, width=50, height=3, first_row=1, first_expert=8)  # clamped: the last experts
    assert len(narrow) == 3 and all(len(line) <= 50 for line in narrow)
    assert narrow[1].split()[:3] == ["layer", "e7", "e8"] and narrow[2].split()[0] == "3"


def test_the_operator_list_holds_only_the_experts_each_pass_ran():
    debugger = Debugger(load_checkpoint(FOLDER, ids=IDS, max_new_tokens=2))
    for round_, topk in enumerate([REF["topk"], REF["step_topk"][1][:, None, :]]):
        ran = {(line.layer, int(line.short.split(".")[2])) for line in debugger.frame.operators
               if line.short.startswith("mlp.experts.")}
        assert ran == {(int(layer), int(e)) for i, layer in enumerate(REF["moe_layers"]) for e in np.unique(topk[i])}
        debugger.goto_step(debugger.frame.operators[-1].step + 1)  # the next round's first operator


async def test_a_in_the_routing_screen_shows_every_sparse_layer_and_a_again_one_layer():
    from tui_helpers import screen_text, settle

    from tinyllm_tui.tui.app import DebuggerApp

    scenario = load_checkpoint(FOLDER, ids=IDS, max_new_tokens=1)
    app = DebuggerApp(scenario, lang="en", breakpoints=["layer=1 & expert=3"])
    async with app.run_test(size=(110, 30)) as pilot:
        await pilot.press("c")
        await settle(pilot)
        await pilot.press("E")
        await pilot.press("a")
        text = screen_text(app)
        assert "3 sparse layers · experts 0–7 of 8 · tokens per expert of the pass's 20" in text
        counts = np.bincount(REF["topk"][1].ravel(), minlength=8)  # layer 1, from transformers' choices
        row = next(line.strip("│ ") for line in text.splitlines() if line.strip("│ ").startswith("1 "))
        assert row.split()[1:9] == [str(c) if c else "·" for c in counts]
        await pilot.press("a")
        assert "layer 1 · positions 0–" in screen_text(app)
