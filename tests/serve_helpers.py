"""A class served by `tinyllm-tui serve`, for tests/test_serve*.py and benchmarks/serve_load.py.

The server runs as its own process on a free loopback port; a learner is a websocket client that speaks
textual-serve's protocol (JSON envelopes up, terminal bytes down) and keeps the screen it is sent in a
terminal emulator (pyte), as a browser's xterm.js would.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

TOKEN = "test-token-3f9a"
COOKIE = {"Cookie": f"tinyllm_token={TOKEN}"}
KEYS = {"enter": "\r", "escape": "\x1b", "ctrl+s": "\x13", "ctrl+u": "\x15"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServedClass:
    """`tinyllm-tui serve FILES --port P --token TOKEN OPTIONS` as a context manager."""

    def __init__(self, *files: Path, options: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "tinyllm_tui", "serve", *map(str, files), "--port", str(self.port),
                        "--token", TOKEN, *options]
        self.process: subprocess.Popen | None = None
        self.output: list[str] = []

    def __enter__(self) -> ServedClass:
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env={**os.environ, "COLUMNS": "200"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"serve ended: {''.join(self.output)}")
            self.output.append(line)
            if line.startswith("Serving"):  # printed as it starts, just before it listens
                while time.monotonic() < deadline:
                    try:
                        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                        return self
                    except OSError:
                        time.sleep(0.05)
        raise RuntimeError(f"serve did not start: {''.join(self.output)}")

    def __exit__(self, *exc) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def sessions(self) -> list[int]:
        """The pids of the server's child processes (each learner's app)."""
        return children(self.process.pid)

    async def settled(self, timeout: float = 15) -> bool:
        """Wait until no learner's process is left."""
        deadline = time.monotonic() + timeout
        while self.sessions() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return not self.sessions()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Learner:
    """One learner's websocket, with the screen it has been sent."""

    def __init__(self, served: ServedClass, width: int = 120, height: int = 40, emulate: bool = True):
        """emulate: keep the screen (pyte takes milliseconds a frame: a load check keeps only the frames)."""
        self.served, self.width, self.height, self.emulate = served, width, height, emulate
        self.http: aiohttp.ClientSession | None = None
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.received: list[bytes] = []  # every frame, in order
        self.messages: list[list] = []  # textual-serve's JSON messages (deliver_file_start, …)
        self._screen = self._stream = None

    async def connect(self, lesson: int = 0, headers: dict | None = None, query: str = "") -> Learner:
        import pyte

        # pyte takes seconds per frame at 1000×400: a window of the top left is enough to see a clamp
        self._screen = pyte.Screen(min(self.width, 300), min(self.height, 120))
        self._stream = pyte.ByteStream(self._screen)
        self.http = aiohttp.ClientSession()
        headers = {"Origin": self.served.url, **COOKIE} if headers is None else headers
        self.socket = await self.http.ws_connect(
            f"{self.served.url}/ws/{lesson}?width={self.width}&height={self.height}{query}", headers=headers,
            max_msg_size=0)
        return self

    async def __aenter__(self) -> Learner:
        return await self.connect()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()
        if self.http is not None:
            await self.http.close()

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self._screen.display)

    async def receive(self, timeout: float) -> bool:
        """One message into the screen; False when the socket closed."""
        message = await asyncio.wait_for(self.socket.receive(), max(timeout, 0))
        if message.type == aiohttp.WSMsgType.BINARY:
            self.received.append(message.data)
            if self.emulate:
                self._stream.feed(message.data)
        elif message.type == aiohttp.WSMsgType.TEXT:
            self.messages.append(json.loads(message.data))
        else:
            return False
        return True

    async def wait_for(self, *texts: str, gone: str | None = None, timeout: float = 60) -> str:
        """The screen once it shows every one of `texts` (and no longer `gone`); raises with the screen when
        it does not in time."""
        def seen() -> bool:
            screen = self.text()
            return all(text in screen for text in texts) and (gone is None or gone not in screen)

        deadline = time.monotonic() + timeout
        while not seen():
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0 or not await self.receive(remaining):
                    break
            except TimeoutError:
                break
        if not seen():
            raise AssertionError(f"the screen never showed {texts} (without {gone!r}):\n{self.text()}")
        return self.text()

    async def ended(self, timeout: float) -> bool:
        """Whether the server closes the socket within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                if not await self.receive(remaining):
                    return True
        except TimeoutError:
            pass
        return False

    async def press(self, *keys: str) -> None:
        for key in keys:
            await self.socket.send_str(json.dumps(["stdin", KEYS.get(key, key)]))

    async def type(self, text: str) -> None:
        await self.socket.send_str(json.dumps(["stdin", text]))

    async def delivered(self, timeout: float = 20) -> bytes:
        """The next file the app offered as a download, fetched as the browser would."""
        deadline = time.monotonic() + timeout
        while not any(m[0] == "deliver_file_start" for m in self.messages):
            try:
                await self.receive(deadline - time.monotonic())
            except TimeoutError:
                raise AssertionError(f"no download was offered; the screen:\n{self.text()}") from None
        index = next(i for i, m in enumerate(self.messages) if m[0] == "deliver_file_start")
        key = self.messages.pop(index)[1]
        fetch = asyncio.create_task(self.http.get(f"{self.served.url}/download/{key}", headers=COOKIE))
        while not fetch.done():  # the app sends the file's chunks through this socket's session
            try:
                await self.receive(0.05)
            except TimeoutError:
                pass
        response = fetch.result()
        assert response.status == 200, response.status
        return await response.read()
