"""No key sequence or terminal size crashes the debugger, even while a long continue runs."""

from __future__ import annotations

import pytest
from tui_helpers import long_scenario, screen_text, settle, state, status

from tinyllm_tui.tui.app import DebuggerApp
from engine.breakpoints import short_name
from tinyllm_tui.tui.main_screen import DebuggerScreen
from tinyllm_tui.tui.widgets.dialogs import BreakpointsScreen, HelpScreen, PromptScreen
from tinyllm_tui.tui.widgets.diffview import DiffScreen
from tinyllm_tui.tui.widgets.weights import WeightsScreen

from test_tui_pilot import EVERY_KEY, busy_process, start_a_long_continue  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("busy_process")  # Pilot waits 20 ms a key, not until idle: hundreds of keys here

SIZES = [(160, 48), (120, 30), (80, 24), (60, 16), (40, 12), (80, 24), (160, 48)]
# how to open each screen from the main one, and what it is
SCREENS = {
    "main": ([], DebuggerScreen),
    "weights": (["w"], WeightsScreen),
    "help": (["question_mark"], HelpScreen),
    "breakpoints": (["L"], BreakpointsScreen),
    "go to": (["g"], PromptScreen),
    "diff": (["d"], DiffScreen),
}
# keys of the other screens (the main screen's are EVERY_KEY)
SCREEN_KEYS = ["up", "down", "left", "right", "pageup", "pagedown", "home", "end", "tab", "e", "enter", "u", "ctrl+r",
               "0", "1", "asterisk", "R", "d", "C", "x", "ctrl+s", "S", "question_mark"]


async def back_to_main(pilot) -> None:
    for _ in range(10):
        if isinstance(pilot.app.screen, DebuggerScreen):
            return
        await pilot.press("escape")
    raise AssertionError(f"stuck on {pilot.app.screen}")


async def open_screen(pilot, name: str) -> None:
    keys, kind = SCREENS[name]
    await pilot.app.workers.wait_for_complete()  # a search typed into the go-to prompt may still run
    await pilot.press(*keys)
    for _ in range(50):  # the diff is computed in a worker first
        if isinstance(pilot.app.screen, kind):
            return
        await pilot.pause(0.05)
    raise AssertionError(f"{name} did not open: {pilot.app.screen}")


def small_app() -> DebuggerApp:
    """A model that is quick to diff: every screen opens fast."""
    return DebuggerApp(long_scenario(prompt=8, new=4), lang="en")


@pytest.mark.parametrize("name", list(SCREENS))
async def test_every_screen_survives_resizing_down_to_40x12_and_back(name):
    app = small_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("n", "n")
        await open_screen(pilot, name)
        for size in SIZES:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert isinstance(app.screen, SCREENS[name][1])
        await back_to_main(pilot)
        await pilot.resize_terminal(40, 12)
        await pilot.pause()
        assert short_name(state(app)) in screen_text(app)  # the current operator's name is still on screen
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


@pytest.mark.parametrize("name", [n for n in SCREENS if n != "main"])
async def test_every_key_on_every_screen(name):
    """The other screens' keys (and the main screen's) pressed on each: no crash, Esc gets back."""
    app = small_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(pilot, name)
        for key in [*SCREEN_KEYS, *EVERY_KEY]:
            await pilot.press(key)
            if isinstance(app.screen, DebuggerScreen):  # a key closed the screen: open it again
                await open_screen(pilot, name)
        await back_to_main(pilot)
        assert short_name(state(app)) in status(app)


async def test_every_screen_resized_and_keyed_while_a_long_continue_runs():
    """Open every screen, press its keys and resize, all during one continue; then Esc stops it, q quits."""
    app = DebuggerApp(long_scenario(d_model=64, layers=4, new=2000), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await start_a_long_continue(pilot)
        for name in ["weights", "help", "breakpoints", "go to"]:  # the weights browser and go to are refused
            await pilot.press(*SCREENS[name][0])
            for key in SCREEN_KEYS[:8]:
                await pilot.press(key)
            for size in SIZES:
                await pilot.resize_terminal(*size)
            await back_to_main(pilot)
            assert app.debugger.busy
        await pilot.press("escape")
        await settle(pilot)
        assert not app.debugger.busy and "cancelled at step" in status(app)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running and not any(w.is_running for w in app.workers)
