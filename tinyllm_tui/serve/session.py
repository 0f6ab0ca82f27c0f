"""One learner's session: the debugger's process in a fresh folder, with its limits.

textual-serve's AppService runs the app through a shell, in the server's folder, with the server's whole
environment, at whatever size the browser asks, and waits for ever on a process that ignores "quit". Here
the process is started without a shell, in a temporary folder holding a copy of the lesson (its working
directory, HOME and autosave folder), with an environment of only what it needs and a data-size limit;
its terminal size is clamped; "quit" is followed by a kill after the grace period, and the folder removed.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from textual_serve.app_service import AppService

from tinyllm_tui.serve.lessons import Lesson, Limits
from tinyllm_tui.tui.served import ENVIRONMENT

# Kept from the server's environment: the locale chooses the language; OpenBLAS needs these two on some
# processors; PYTHONPATH where the server itself runs from a source tree.
KEPT = ("LANG", "LC_ALL", "LANGUAGE", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONPATH")
RUNTIME = 512 * 2**20  # the interpreter, NumPy, Textual and their threads, over the app's own memory budget


class LearnerSession(AppService):
    def __init__(self, lesson: Lesson, limits: Limits, **service):
        super().__init__(f"tinyllm-tui {lesson.name}", **service)
        self.lesson, self.limits = lesson, limits
        self.folder = Path(tempfile.mkdtemp(prefix="tinyllm-serve-"))
        self.last_active = time.monotonic()  # the browser's last key, click or resize, or the first frame
        self.shown = False
        self.stopped = False

    def clamp(self, width, height) -> tuple[int, int]:
        """The terminal size the app gets: what the browser asked for, within the limits."""
        def within(value, most: int) -> int:
            try:
                return min(max(int(value), 10), most)
            except (TypeError, ValueError):
                return most

        return within(width, self.limits.columns), within(height, self.limits.rows)

    def environment(self, width: int, height: int) -> dict[str, str]:
        environment = {name: os.environ[name] for name in KEPT if name in os.environ}
        folder = str(self.folder)
        environment.update({
            ENVIRONMENT: "1", "HOME": folder, "TMPDIR": folder, "PATH": "/usr/bin:/bin",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",  # a class shares the server's cores
            "TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver", "TEXTUAL_FPS": "60",
            "TEXTUAL_COLOR_SYSTEM": "truecolor", "TERM_PROGRAM": "textual",
            "TERM_PROGRAM_VERSION": version("textual-serve"), "COLUMNS": str(width), "ROWS": str(height)})
        return environment

    def argv(self) -> list[str]:
        name = self.lesson.copy_into(self.folder)
        return [sys.executable, "-m", "tinyllm_tui", "open", name, "--max-memory", str(self.limits.max_memory)]

    def _limit_memory(self) -> None:  # in the child, before it runs Python
        limit = self.limits.max_memory + RUNTIME
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    async def _open_app_process(self, width: int = 80, height: int = 24):
        width, height = self.clamp(width, height)
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self.environment(width, height), cwd=self.folder,
            start_new_session=True, preexec_fn=self._limit_memory)
        self._stdin = process.stdin
        return process

    async def on_data(self, payload: bytes) -> None:
        if not self.shown:  # the idle time counts from the app's first output, however long it took to start
            self.shown, self.last_active = True, time.monotonic()
        await super().on_data(payload)

    async def send_bytes(self, data: bytes) -> bool:
        self.last_active = time.monotonic()
        return await super().send_bytes(data)

    async def set_terminal_size(self, width: int, height: int) -> None:
        self.last_active = time.monotonic()
        width, height = self.clamp(width, height)
        await super().set_terminal_size(width, height)

    def idle_for(self) -> float:
        return time.monotonic() - self.last_active

    async def ended(self) -> None:
        """Wait until the app's process has ended (by itself: the learner quit, or it crashed)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Ask the app to quit; kill it after the grace period; remove the folder. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        if self._process is not None:
            await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
            await self.send_meta({"type": "quit"})
            try:
                await asyncio.wait_for(self._process.wait(), self.limits.grace)
            except TimeoutError:
                os.killpg(self._process.pid, signal.SIGKILL)  # its own session: whatever it started goes too
                await self._process.wait()
            await self._task  # its output is read to the end
        shutil.rmtree(self.folder, ignore_errors=True)
