"""The runner's reports are messages to the screen that started the run: none reaches a screen whose
widgets are gone (issue 24: `NoMatches 'StatusBar'` from a progress report, once in two runs)."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time

import pytest
from textual.app import App
from textual.message import Message
from textual.message_pump import MessagePump
from textual.screen import Screen
from test_tui_edits import grid_cell, open_cell, type_value
from tui_helpers import make_app, settle, status

from engine import load_scenario
from tinyllm_tui.debugger import weights as weights_module
from tinyllm_tui.debugger.results import Moved
from tinyllm_tui.debugger.weights import WeightsBrowser
from tinyllm_tui.tui.runner import RunDone, RunProgress
from tinyllm_tui.tui.widgets.dialogs import PromptScreen
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


def recording_threads(monkeypatch, owner, name: str) -> list[threading.Thread]:
    """The threads `owner.name` runs in from now on (an instance's method or a class's)."""
    threads, method = [], getattr(owner, name)

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread())
        return method(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return threads


async def test_a_goto_by_number_drives_the_history_in_the_runner_and_the_prompt_says_its_refusal(monkeypatch):
    """`g 30` went through History.goto on the UI thread (it can replay from a round start or compute ahead);
    a step past the trace is still refused in the prompt, which stays open to correct it."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        threads = recording_threads(monkeypatch, app.debugger.history, "goto")
        await pilot.press("g", *"30", "enter")
        await settle(pilot)
        assert app.debugger.view.state.step == 30 and not isinstance(app.screen, PromptScreen)
        await pilot.press("g", *"9999", "enter")
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        assert "no step 9999: the trace has steps 0–92" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape")
        assert app.debugger.view.state.step == 30
    assert len(threads) >= 2 and threading.main_thread() not in threads


async def test_the_weights_browser_reads_its_tensor_off_the_ui_thread(monkeypatch):
    """The chosen tensor (a checkpoint's is dequantized on first read) is read in a worker and shown when the
    message it posts back arrives; one overtaken by a later choice is not shown, even when it comes last."""
    frame, release = WeightsBrowser.frame, threading.Event()
    threads: list[tuple[str, threading.Thread]] = []

    def slow_for_wq(self, name, word):
        threads.append((name, threading.current_thread()))
        if name == "blocks.0.attn.wq":
            release.wait(10)
        return frame(self, name, word)

    monkeypatch.setattr(WeightsBrowser, "frame", slow_for_wq)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("w", "tab", "down")  # blocks.0.attn.wq: its read waits
        await pilot.press("down")  # blocks.0.attn.wk, read and shown meanwhile
        while not any(name == "blocks.0.attn.wk" for name, _ in threads):
            await asyncio.sleep(0.01)
        await pilot.pause(0.1)
        grid = app.screen.query_one("#weight-grid")
        assert grid.matrix.name == "blocks.0.attn.wk" and app.screen.selected == "blocks.0.attn.wk"
        release.set()
        await settle(pilot)
        assert grid.matrix.name == "blocks.0.attn.wk"
    assert [name for name, _ in threads][-2:] == ["blocks.0.attn.wq", "blocks.0.attn.wk"]
    assert threading.main_thread() not in {thread for _, thread in threads}


async def test_the_expect_check_reports_by_a_message_not_a_call_from_its_thread(monkeypatch):
    posted: list[tuple[object, Message]] = []
    post = MessagePump.post_message

    def recording(self, message: Message) -> bool:
        posted.append((self, message))
        return post(self, message)

    monkeypatch.setattr(MessagePump, "post_message", recording)
    monkeypatch.setattr(App, "call_from_thread", lambda *_: pytest.fail("a closure run on the UI thread"))
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.debugger.outcomes is not None
    assert [screen for screen, m in posted if type(m).__name__ == "ExpectationsChecked"] == [app.main]


def posted_saves(monkeypatch) -> list[tuple[object, bool]]:
    """(receiver, whether it was written) of every SaveOver posted from now on."""
    posted: list[tuple[object, bool]] = []
    post = MessagePump.post_message

    def posting(self, message):
        if type(message).__name__ == "SaveOver":
            posted.append((self, message.written))
        return post(self, message)

    monkeypatch.setattr(MessagePump, "post_message", posting)
    return posted


async def test_a_save_writes_in_the_runner_and_keys_wait_as_during_any_long_run(x01_copy, monkeypatch):
    """ctrl+s wrote the file on the UI thread (a big weights file, a GGUF model's conversion: seconds with every
    key frozen). The writer now runs in the runner: held there, the UI still answers; an edit asked meanwhile
    is refused (and counted), ctrl+c neither cancels nor quits. Once written, the app tells each screen by a
    message (it once called their methods): the browser redraws (no number differs from the file now) and the
    main screen says where it went."""
    writing, release, threads = threading.Event(), threading.Event(), []
    write = weights_module.save

    def held_write(*args):
        threads.append(threading.current_thread())
        writing.set()
        release.wait(10)
        return write(*args)

    monkeypatch.setattr(weights_module, "save", held_write)
    posted = posted_saves(monkeypatch)
    app = make_app(x01_copy)
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await settle(pilot)
        browser = app.screen
        await pilot.press("ctrl+s", "y")
        while not writing.is_set():
            await asyncio.sleep(0.01)
        await pilot.press("0", "ctrl+c")  # zero Wk: refused; ctrl+c: waits for the write
        await pilot.pause(0.1)
        assert app.is_running and app.debugger.unsaved() == 1
        assert load_scenario(x01_copy).weights["blocks.0.attn.wk"][0, 1] == 1.0  # not written yet
        assert f"saving to {x01_copy}: quit once it is written" in status(app)
        release.set()
        await settle(pilot)
        assert app.is_running and app.debugger.unsaved() == 0
        assert load_scenario(x01_copy).weights["blocks.0.attn.wk"][0, 1] == 0.5
        assert app.debugger.weights["blocks.0.attn.wk"].any()  # the zeroing was refused, not queued
        words = str(browser.query_one("#weight-status").render())
        assert f"saved to {x01_copy}" in words and "0 cells differ from the file" in words
        await pilot.press("escape")
        assert f"saved to {x01_copy} · 1 key refused" in status(app)
    assert len(threads) == 1 and threads[0] is not threading.main_thread()
    saved = [screen for screen, written in posted if written]
    assert browser in saved and app.main in saved


async def test_a_failed_write_says_why_in_the_prompt_and_keeps_the_edits_unsaved(tmp_path, monkeypatch):
    """Save as into a folder that is gone by the time the runner writes (a read-only folder fails the same way;
    the tests run as root, for whom none is read-only): the prompt stays open with the one-line error, the main
    screen says it too, the edit stays unsaved, and saving it elsewhere then keeps it."""
    folder, write = tmp_path / "out", weights_module.save
    folder.mkdir()

    def into_a_gone_folder(*args):
        shutil.rmtree(folder, ignore_errors=True)
        return write(*args)

    monkeypatch.setattr(weights_module, "save", into_a_gone_folder)
    posted = posted_saves(monkeypatch)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await pilot.press("escape", "S", *str(folder / "copy.yaml"), "enter")
        await settle(pilot)
        prompt = app.screen
        assert isinstance(prompt, PromptScreen)
        error = f"not saved: No such file or directory ({folder / 'copy.yaml'})"
        assert error in str(prompt.query_one("#prompt-error").render()) and error in status(app)
        assert app.debugger.unsaved() == 1 and app.debugger.weights["blocks.0.attn.wk"][0, 1] == 0.5
        monkeypatch.setattr(weights_module, "save", write)
        await pilot.press("home", "shift+end", "backspace", *str(tmp_path / "copy.yaml"), "enter")
        await settle(pilot)
        assert not isinstance(app.screen, PromptScreen) and app.debugger.unsaved() == 0
    assert load_scenario(tmp_path / "copy.yaml").weights["blocks.0.attn.wk"][0, 1] == 0.5
    assert (app.main, False) in posted  # told it was not written
