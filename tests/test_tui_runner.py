"""The runner's reports are messages to the screen that started the run: none reaches a screen whose
widgets are gone (issue 24: `NoMatches 'StatusBar'` from a progress report, once in two runs)."""

from __future__ import annotations

import asyncio
import threading
import time

from textual.message import Message
from textual.message_pump import MessagePump
from textual.screen import Screen
from test_tui_edits import grid_cell, open_cell, type_value
from tui_helpers import make_app, settle

from tinyllm_tui.debugger.results import Moved
from tinyllm_tui.tui.runner import RunDone, RunProgress
from tinyllm_tui.tui.widgets.statusbar import StatusBar
from tinyllm_tui.tui.widgets.timeline import Timeline


async def test_a_progress_report_while_the_screen_is_being_removed_reaches_no_widget(monkeypatch):
    """Deterministic: the main screen is being removed (its status bar already gone, its timeline still
    unmounting) when the run it started reports progress."""
    release = asyncio.Event()

    async def slow_unmount(self) -> None:  # the screen waits for this child: it stays mounted meanwhile
        await release.wait()

    monkeypatch.setattr(Timeline, "on_unmount", slow_unmount, raising=False)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.main
        status, reported, finish = screen.query_one(StatusBar), threading.Event(), threading.Event()

        def work(progress) -> None:
            while status in screen.children:  # until the status bar has left the screen
                time.sleep(0.001)
            progress(7)
            reported.set()
            finish.wait(10)  # the run is still in flight when its report is handled
            return Moved(0)

        assert screen.in_background("working", work)
        app.switch_screen(Screen())  # the main screen is not installed: it is removed, children first
        while not reported.is_set():
            await asyncio.sleep(0.01)  # (Pilot's pause waits for a screen that is busy being removed)
        await asyncio.sleep(0.1)  # the report's turn comes while the screen still waits for its timeline
        assert screen.is_mounted and status not in screen.children
        release.set()
        finish.set()
        await pilot.pause(0.1)
        assert app.return_code is None  # no exception ended the app


async def test_every_message_a_run_posts_is_data_and_names_its_handler_by_type(monkeypatch):
    """A run's messages carry values, never a function to call (issue 24: the App ran closures, and a report
    reached a screen that was not there): a continue, the diff, the lens, and an edit and its undo asked for by
    the weights browser, whose redraw comes as a message of its own."""
    posted: list[tuple[object, Message]] = []
    post = MessagePump.post_message

    def recording(self, message: Message) -> bool:
        if isinstance(message, (RunDone, RunProgress)):
            posted.append((self, message))
        return post(self, message)

    monkeypatch.setattr(MessagePump, "post_message", recording)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        for key in ("c", "l", "escape", "d", "escape"):
            await pilot.press(key)
            await settle(pilot)
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        browser = app.screen
        await type_value(pilot, "0.5")
        await settle(pilot)
        await pilot.press("u")
        await settle(pilot)
        assert grid_cell(app, 0, 1) == 1.0  # the browser redrew after the undo its message reported
    carried = [(type(m).__name__, name) for _, m in posted for name, value in vars(m).items() if callable(value)]
    assert carried == []
    kinds = {type(message).__name__ for _, message in posted}
    assert {"LongRunDone", "LensRead", "DiffDone", "RunWorded"} <= kinds, kinds
    assert [type(m).__name__ for screen, m in posted if screen is browser] == ["RunWorded"] * 2  # edit, undo
