"""Opening a scenario: the loading screen's progress (YAML bytes, then tensors), its end on the main screen,
a bad file's one located line, and cancelling with Esc or ctrl+c."""

from __future__ import annotations

import importlib.util
import threading
import time
from functools import partialmethod
from pathlib import Path

import pytest
from conftest import ROOT, X01
from said import said
from tui_helpers import screen_text
from textual.app import App
from textual.widgets import ProgressBar, Static
from typer.testing import CliRunner

import engine.loading.document
import engine.loading.scenario_file
from engine import load_scenario
from tinyllm_tui.debugger.autosave import keep
from engine.loading.checkpoint import load_checkpoint
from engine.loading.edits import parse_set
from engine.progress import READING, WEIGHTS, LoadCancelled, listening, report
from tinyllm_tui import cli
from tinyllm_tui.debugger import Debugger
from tinyllm_tui.debugger.readings import round_routing
from tinyllm_tui.tui.app import DebuggerApp
from tinyllm_tui.tui.loading_screen import Loading, LoadingScreen, Opening
from tinyllm_tui.tui.main_screen import DebuggerScreen
from tinyllm_tui.tui.widgets.dialogs import ChoiceScreen
from tinyllm_tui.tui.widgets.readings import RoutingScreen
from tinyllm_tui.tui.widgets.weights import WeightsScreen

BAD = ROOT / "tests" / "data" / "bad" / "duplicate_key.yaml"
LAYERS = 2
TENSORS = 2 + 16 * LAYERS + 2  # embed, pos_embed; per layer ln1 w b, wq wk wv wo, bq bk bv bo, ln2 w b, w_in b_in,
# w_out b_out; ln_final w b (the head is tied)


@pytest.fixture(scope="module")
def inline_model(tmp_path_factory) -> Path:
    """An all-weights YAML of GPT-2's layout, written by tools/make_big_model.py: ~0.8 MB, ~50 reads of 16 KiB."""
    spec = importlib.util.spec_from_file_location("make_big_model", ROOT / "tools" / "make_big_model.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    folder = tmp_path_factory.mktemp("inline")
    tool.main([str(folder), "--inline", "--d-model", "64", "--layers", str(LAYERS), "--vocab", "500",
               "--max-positions", "64", "--prompt", "16", "--new", "2"])
    return folder / "model.yaml"


def loading(path: Path) -> Loading:
    return Loading(str(path), lambda: Opening(load_scenario(path)))


def app_on(load: Loading) -> DebuggerApp:
    app = DebuggerApp(load, lang="en")
    app.animation_level = "none"
    return app


async def until(pilot, condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.02)


def shown(app, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def test_the_engine_reports_every_byte_then_every_tensor(inline_model):
    reports = []
    with listening(lambda *r: reports.append(r)):
        load_scenario(inline_model)
    reading = [(done, total) for stage, done, total in reports if stage == READING]
    assert {total for _, total in reading} == {inline_model.stat().st_size}
    assert [done for done, _ in reading] == sorted(done for done, _ in reading) and reading[-1][0] == reading[-1][1]
    steps = [b - a for (a, _), (b, _) in zip([(0, 0), *reading], reading)]
    assert len(reading) > 50 and max(steps) <= 4 * 16384  # PyYAML's C reader takes 16 KiB (of characters) a read
    assert [r for r in reports if r[0] == WEIGHTS] == [(WEIGHTS, i, TENSORS) for i in range(1, TENSORS + 1)]


def test_a_listener_that_raises_cancelled_stops_a_parse_and_a_checkpoint(inline_model):
    """LoadCancelled is no Exception: the checkpoint reader's catch-all does not make it a bad file."""

    def stop(stage, done, total):
        if stage == WEIGHTS or done > 4 * 16384:
            raise LoadCancelled

    llama = ROOT / "tests" / "fixtures" / "llama"
    for load in (lambda: load_scenario(inline_model), lambda: load_checkpoint(llama, ids=[1])):
        with listening(stop), pytest.raises(LoadCancelled):
            load()


async def test_the_bar_follows_the_yaml_then_the_tensors_then_step_0(inline_model, monkeypatch):
    """Held half-way through the YAML and at tensor 5, the screen shows those numbers; then the main screen."""
    held = {READING: threading.Event(), WEIGHTS: threading.Event()}
    resume = threading.Event()

    def holding(stage, done, total):
        report(stage, done, total)  # the screen's listener
        if not held[stage].is_set() and (done >= total // 2 if stage == READING else done == 5):
            held[stage].set()
            resume.wait(5)
            resume.clear()

    monkeypatch.setattr(engine.loading.document, "report", holding)
    monkeypatch.setattr(engine.loading.scenario_file, "report", holding)
    size = inline_model.stat().st_size
    app = app_on(loading(inline_model))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, held[READING].is_set)
        assert isinstance(app.screen, LoadingScreen) and str(inline_model) in shown(app, "#loading-file")
        bar = app.screen.query_one(ProgressBar)
        await until(pilot, lambda: bar.progress >= size // 2)
        assert bar.total == size and bar.progress < size
        assert shown(app, "#loading-stage").startswith("reading the YAML: ")
        assert "Esc or ctrl+c cancels" in shown(app, "#loading-hint")
        resume.set()
        await until(pilot, held[WEIGHTS].is_set)
        await until(pilot, lambda: bar.progress == 5)
        assert bar.total == TENSORS and shown(app, "#loading-stage") == f"converting the weights: tensor 5 of {TENSORS}"
        resume.set()
        await until(pilot, lambda: isinstance(app.screen, DebuggerScreen), timeout=30)
        await pilot.pause()  # let the main screen finish mounting
        assert not any(isinstance(s, LoadingScreen) for s in app.screen_stack)  # replaced, not covered
        state = app.debugger.view.state
        assert (state.step, state.name) == (0, "hook_embed")
        assert app.title == "random 2×64 · vocab 500"


async def test_the_restore_question_comes_after_loading(tmp_path):
    """An earlier session's unsaved edit is offered over the main screen, as when the app opens at once."""
    scenario = load_scenario(X01)
    keep(X01, scenario.fingerprint, [parse_set("blocks.0.attn.wk[0,1]=0.5", scenario.weights)])
    app = app_on(loading(X01))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        assert isinstance(app.screen_stack[-2], DebuggerScreen)
        await pilot.press("r")  # restore
        await until(pilot, lambda: app.debugger.unsaved() == 1)
        assert app.debugger.weights["blocks.0.attn.wk"][0, 1] == 0.5


async def test_a_bad_file_ends_the_app_with_its_located_error():
    app = app_on(loading(BAD))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.load_error is not None)
    assert said(app.load_error) == f"{BAD}:25: model.causal: this key appears twice"


def open_headless(monkeypatch, auto_pilot=None) -> None:
    monkeypatch.setattr(DebuggerApp, "run", partialmethod(App.run, headless=True, auto_pilot=auto_pilot))


def test_open_says_a_bad_file_in_the_same_one_line_as_run(monkeypatch):
    open_headless(monkeypatch)
    opened, ran = CliRunner().invoke(cli.app, [str(BAD)]), CliRunner().invoke(cli.app, ["run", str(BAD)])
    assert (opened.exit_code, ran.exit_code) == (2, 2)
    assert opened.stderr == ran.stderr == f"tinyllm-tui: error: {BAD}:25: model.causal: this key appears twice\n"


def test_open_refuses_a_model_over_the_memory_budget_in_one_line(monkeypatch):
    open_headless(monkeypatch)
    result = CliRunner().invoke(cli.app, [str(X01), "--max-memory", "1K"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"tinyllm-tui: error: {X01}:13: model: the weights alone need about ")
    assert "--max-memory" in result.stderr


class Gate:
    """A load that reports once, then waits until the test has pressed its key, then reports again."""

    def __init__(self):
        self.started, self.pressed = threading.Event(), threading.Event()

    def load(self, *args, **kwargs):
        report(READING, 1, 2)
        self.started.set()
        self.pressed.wait(5)
        report(READING, 2, 2)  # Cancelled here, if the key cancelled
        raise AssertionError("the load was not cancelled")


@pytest.mark.parametrize("key", ["escape", "ctrl+c"])
async def test_esc_or_ctrl_c_cancels_the_load(key):
    gate = Gate()
    app = app_on(Loading("big.yaml", gate.load))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, gate.started.is_set)
        await pilot.press(key)
        assert shown(app, "#loading-hint") == "cancelling…"
        gate.pressed.set()
        await until(pilot, lambda: app.load_error is not None)
    assert isinstance(app.load_error, LoadCancelled)


def test_a_cancelled_open_quits_with_one_line_and_status_130(monkeypatch):
    gate = Gate()

    async def press_escape(pilot):
        await until(pilot, gate.started.is_set)
        await pilot.press("escape")
        gate.pressed.set()

    monkeypatch.setattr(cli, "load", gate.load)
    monkeypatch.setattr(cli, "_on_a_terminal", lambda: True)  # else the file is loaded before the app starts
    open_headless(monkeypatch, press_escape)
    result = CliRunner().invoke(cli.app, [str(X01)])
    assert (result.exit_code, result.stderr) == (130, "tinyllm-tui: loading cancelled\n")


async def test_the_loading_screen_speaks_chinese_with_lang_zh():
    gate = Gate()
    app = DebuggerApp(Loading("big.yaml", gate.load), lang="zh")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, gate.started.is_set)
        assert shown(app, "#loading-file") == "正在加载 big.yaml"
        assert shown(app, "#loading-hint") == "Esc 或 ctrl+c 取消"
        await pilot.press("escape")
        assert shown(app, "#loading-hint") == "正在取消…"
        gate.pressed.set()
        await until(pilot, lambda: app.load_error is not None)


@pytest.fixture
def held_listing(monkeypatch) -> threading.Event:
    """A checkpoint's first round is listed only once the test sets the event."""
    listing = threading.Event()
    complete_round = Debugger.complete_round
    monkeypatch.setattr(Debugger, "complete_round",
                        lambda self, stop=lambda: False: listing.wait(10) and complete_round(self, stop))
    return listing


async def opened_while_listing(pilot, app) -> None:
    await until(pilot, lambda: isinstance(app.screen, DebuggerScreen) and app.debugger.outcomes is not None
                and app.screen.runner.running, timeout=30)
    assert "computing round 0 (a key pressed now goes first)" in shown(app, "#status")


async def test_the_status_line_says_round_0_is_computed_until_it_is(held_listing):
    llama = ROOT / "tests" / "fixtures" / "llama"
    app = app_on(Loading(str(llama), lambda: Opening(load_checkpoint(llama, ids=[1, 2, 3]))))
    async with app.run_test(size=(160, 48)) as pilot:
        await opened_while_listing(pilot, app)
        held_listing.set()
        await until(pilot, lambda: not app.debugger.round_pending, timeout=30)
        await until(pilot, lambda: "start · n/→ step · c continue" in shown(app, "#status"))


async def test_w_pressed_while_the_first_round_is_listed_opens_the_weights_once_it_is(held_listing):
    """The weights key waits for the listing (it is not refused as if the user had started a run); a step
    pressed after it was meant for the main screen, which the browser now covers: it is dropped."""
    llama = ROOT / "tests" / "fixtures" / "llama"
    app = app_on(Loading(str(llama), lambda: Opening(load_checkpoint(llama, ids=[1, 2, 3]))))
    async with app.run_test(size=(160, 48)) as pilot:
        await opened_while_listing(pilot, app)
        await pilot.press("w", "n")
        assert isinstance(app.screen, DebuggerScreen) and "busy" not in shown(app, "#status")
        held_listing.set()
        await until(pilot, lambda: isinstance(app.screen, WeightsScreen), timeout=30)
        await pilot.pause(0.1)
        assert app.debugger.frame.step == 0 and not app.debugger.round_pending


async def test_a_screen_key_whose_turn_comes_under_a_prompt_is_dropped(held_listing):
    """w waits for round 0; g then opens its prompt at once: w must not open the weights over the prompt
    (Esc would close the browser and leave the prompt, which then took the keys meant for the main screen)."""
    from tinyllm_tui.tui.widgets.dialogs import PromptScreen

    llama = ROOT / "tests" / "fixtures" / "llama"
    app = app_on(Loading(str(llama), lambda: Opening(load_checkpoint(llama, ids=[1, 2, 3]))))
    async with app.run_test(size=(160, 48)) as pilot:
        await opened_while_listing(pilot, app)
        await pilot.press("w", "g")
        held_listing.set()
        await until(pilot, lambda: not app.debugger.round_pending, timeout=30)
        await pilot.pause(0.1)
        assert isinstance(app.screen, PromptScreen)
        assert not any(isinstance(screen, WeightsScreen) for screen in app.screen_stack)
        await pilot.press("escape")
        assert isinstance(app.screen, DebuggerScreen)


async def test_a_go_to_sent_while_the_first_round_is_listed_closes_its_prompt_and_goes_there_after(held_listing):
    llama = ROOT / "tests" / "fixtures" / "llama"
    app = app_on(Loading(str(llama), lambda: Opening(load_checkpoint(llama, ids=[1, 2, 3]))))
    async with app.run_test(size=(160, 48)) as pilot:
        await opened_while_listing(pilot, app)
        await pilot.press("g", *"unembed", "enter")
        assert isinstance(app.screen, DebuggerScreen) and "busy" not in shown(app, "#status")
        await pilot.press("g", *"nowhere", "enter")  # refused by name once its turn comes, on the status line
        held_listing.set()
        await until(pilot, lambda: app.debugger.frame.matrix.name == "unembed.hook_out", timeout=30)
        await until(pilot, lambda: "nowhere" in shown(app, "#status"), timeout=30)


async def test_a_checkpoint_shows_step_0_then_lists_the_rest_of_round_0_with_a_key_pressed_meanwhile():
    """Step 0 of a checkpoint shows before its round 0 is computed; the runner lists the rest of the round, and
    a step pressed as the screen opens waits its turn (it is neither lost nor refused)."""
    llama = ROOT / "tests" / "fixtures" / "llama"
    app = app_on(Loading(str(llama), lambda: Opening(load_checkpoint(llama, ids=[1, 2, 3]))))
    async with app.run_test(size=(160, 48)) as pilot:
        # the expect: check publishes once, taking the generator a moment (a key then is refused): not this test's
        await until(pilot, lambda: isinstance(app.screen, DebuggerScreen) and app.debugger.outcomes is not None,
                    timeout=30)
        await pilot.press("n")
        await until(pilot, lambda: not app.debugger.round_pending and app.debugger.frame.step == 1, timeout=30)
        steps = [line.step for line in app.debugger.frame.operators]
        assert steps == list(range(len(steps))) and app.debugger.view.round_states[-1].kind.name == "CHOICE"


def moe_at_decode_round_1():
    """An eager Debugger on the qwen3_moe fixture, the step its decode round 1 starts at, and the app opening it."""
    moe = ROOT / "tests" / "fixtures" / "qwen3_moe"

    def opened():
        return load_checkpoint(moe, ids=[1, 2, 3], max_new_tokens=2)

    eager = Debugger(opened())
    entered = next(s.step for s in eager.history.states_from(0) if s.round == 1)
    return eager, entered, app_on(Loading(str(moe), lambda: Opening(opened())))


async def round_0_listed(pilot, app) -> None:
    await until(pilot, lambda: isinstance(app.screen, DebuggerScreen) and not app.debugger.round_pending
                and not app.screen.runner.running, timeout=30)


async def test_a_step_pressed_while_a_decode_round_is_listed_goes_first_and_the_listing_goes_on_after(monkeypatch):
    """Entering a checkpoint's decode round lists its operators in the runner; a key pressed meanwhile stops the
    listing after the operator in flight (it does not wait for the whole round), then the listing goes on."""
    events: list[tuple[str, int, bool]] = []
    listing, stepping = Debugger.complete_round, Debugger.step

    def complete_round(self, stop=lambda: False):
        if self.view.state.round == 1:  # hold round 1's listing until a key waits
            deadline = time.monotonic() + 10
            while not stop() and time.monotonic() < deadline:
                time.sleep(0.01)
        result = listing(self, stop)
        events.append(("listed", self.frame.step, self.round_pending))
        return result

    def step(self):
        result = stepping(self)
        events.append(("step", self.frame.step, self.round_pending))
        return result

    monkeypatch.setattr(Debugger, "complete_round", complete_round)
    monkeypatch.setattr(Debugger, "step", step)
    eager, entered, app = moe_at_decode_round_1()
    async with app.run_test(size=(160, 48)) as pilot:
        await round_0_listed(pilot, app)
        await pilot.press("g", *str(entered), "enter")
        await until(pilot, lambda: app.debugger.frame.step == entered and app.screen.runner.running, timeout=30)
        await pilot.press("n", "E")  # the routing view shows the whole round: it waits for the listing
        await until(pilot, lambda: isinstance(app.screen, RoutingScreen) and "margin" in screen_text(app), timeout=30)
        assert app.debugger.frame.step == entered + 1 and not app.debugger.round_pending
        routed = app.screen._routings
    eager.goto_step(entered)
    assert len(routed) == len(round_routing(eager.view.round_states, 0)) == 3  # its 3 MoE layers of 4
    assert events[-3:] == [("listed", entered, True), ("step", entered + 1, True), ("listed", entered + 1, False)]
    assert app.debugger.frame.operators == eager.frame.operators


async def test_play_paused_in_a_decode_round_still_to_be_listed_lists_it():
    eager, entered, app = moe_at_decode_round_1()
    async with app.run_test(size=(160, 48)) as pilot:
        await round_0_listed(pilot, app)
        await pilot.press("g", *str(entered - 1), "enter")
        await until(pilot, lambda: app.debugger.frame.step == entered - 1 and not app.screen.runner.running)
        await pilot.press("space")
        await until(pilot, lambda: app.debugger.frame.step >= entered, timeout=30)
        await pilot.press("space")
        await until(pilot, lambda: app.screen.player is None and not app.debugger.round_pending, timeout=30)
        assert app.debugger.view.round_states[-1].kind.name == "CHOICE"
