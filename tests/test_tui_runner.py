"""The runner's reports are messages to the screen that started the run: none reaches a screen whose
widgets are gone (issue 24: `NoMatches 'StatusBar'` from a progress report, once in two runs)."""

from __future__ import annotations

import asyncio
import threading
import time

from textual.screen import Screen
from tui_helpers import make_app

from tinyllm_tui.debugger.results import Moved
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
