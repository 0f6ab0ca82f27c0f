"""`tinyllm-tui serve` in a real headless Chromium, driven over the DevTools protocol as a learner would use it.

What the page shows is read twice: the screenshot's pixels (the matrix's heat colours) and the text of the
terminal, rebuilt by a terminal emulator (pyte) from the very websocket frames the browser received.
The screenshots and the page text at X01 step 11 are kept in tests/artifacts/ (ignored by git).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("textual_serve", reason="serve needs the serve extra: pip install -e '.[serve]'")
pyte = pytest.importorskip("pyte", reason="reading the page's text needs pyte (the test extra)")
Image = pytest.importorskip("PIL.Image", reason="reading the screenshot needs Pillow (the test extra)")
aiohttp = pytest.importorskip("aiohttp")

from serve_helpers import TOKEN, ServedClass  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1280,800"]
SPECIAL = {"enter": ("Enter", 13, "\r")}

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here: apt-get install chromium "
                                "fonts-wqy-zenhei (.ci/run does, as root, when the registry answers)")


class Chromium:
    """A headless Chromium with one page, over the DevTools protocol; keeps the websocket frames the page gets."""

    def __init__(self):
        self.profile = Path(tempfile.mkdtemp(prefix="tinyllm-chromium-"))
        self.process = self.http = self.devtools = None
        self.frames: list[bytes] = []
        self.size = (80, 24)  # the terminal size the page asked for
        self._ids = 0

    async def __aenter__(self) -> Chromium:
        self.process = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and "\n" in port_file.read_text()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("Chromium did not start")
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        self.http = aiohttp.ClientSession()
        targets = await (await self.http.get(f"http://127.0.0.1:{port}/json/list")).json()
        page = next(target for target in targets if target["type"] == "page")
        self.devtools = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.call("Network.enable")
        await self.call("Page.enable")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    async def call(self, method: str, **params):
        self._ids += 1
        me = self._ids
        await self.devtools.send_json({"id": me, "method": method, "params": params})
        while True:
            message = json.loads((await self.devtools.receive(timeout=30)).data)
            if message.get("id") == me:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict) -> None:
        event, params = message.get("method"), message.get("params", {})
        if event == "Network.webSocketCreated":
            query = parse_qs(urlsplit(params["url"]).query)
            self.size = (int(query["width"][0]), int(query["height"][0]))
        elif event == "Network.webSocketFrameReceived" and params["response"]["opcode"] == 2:
            self.frames.append(base64.b64decode(params["response"]["payloadData"]))

    def text(self) -> str:
        """The terminal as the page's xterm.js draws it: the frames it received, through an emulator."""
        screen = pyte.Screen(*self.size)
        stream = pyte.ByteStream(screen)
        for frame in self.frames:
            stream.feed(frame)
        return "\n".join(line.rstrip() for line in screen.display)

    async def wait_for(self, *texts: str, gone: str | None = None, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while not all(text in (screen := self.text()) for text in texts) or (gone is not None and gone in screen):
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {texts} (without {gone!r}):\n{screen}")
            await asyncio.sleep(0.2)
            await self.call("Runtime.evaluate", expression="0")  # the events that came meanwhile
        return screen

    async def press(self, *keys: str) -> None:
        for key in keys:
            name, code, text = SPECIAL[key] if key in SPECIAL else (key, ord(key.upper()), key)
            await self.call("Input.dispatchKeyEvent", type="keyDown", key=name, text=text, windowsVirtualKeyCode=code)
            await self.call("Input.dispatchKeyEvent", type="keyUp", key=name, windowsVirtualKeyCode=code)

    async def screenshot(self, path: Path) -> Image.Image:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode((await self.call("Page.captureScreenshot", format="png"))["data"]))
        return Image.open(path).convert("RGB")


def heat_pixels(image: Image.Image) -> tuple[int, int]:
    """How many pixels are clearly red (positive cells) and clearly blue (negative cells)."""
    red = blue = 0
    for count, (r, g, b) in image.getcolors(maxcolors=1 << 24):
        if r > 90 and r - max(g, b) > 50:
            red += count
        elif b > 90 and b - r > 50 and b - g > 30:
            blue += count
    return red, blue


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    shutil.copy(ROOT / "scenarios" / "x01.yaml", folder / "x01.yaml")
    with ServedClass(folder / "x01.yaml") as served:
        yield served


async def test_a_learner_steps_x01_in_chromium(served):
    async with Chromium() as browser:
        await browser.call("Page.navigate", url=f"{served.url}/?token={TOKEN}")
        first = await browser.wait_for("step 0/", "我", "学习", "n Step")
        assert "token" not in (await browser.call("Runtime.evaluate", expression="location.href"))["result"]["value"]
        await browser.call("Runtime.evaluate", expression="document.querySelector('.xterm-helper-textarea').focus()")
        await asyncio.sleep(0.5)  # the page fades the terminal in
        image = await browser.screenshot(ARTIFACTS / "serve-x01-step0.png")
        red, blue = heat_pixels(image)
        assert red > 500 and blue > 500, (red, blue)  # the embedding's positive and negative cells, not a blank page
        assert len(image.getcolors(maxcolors=1 << 24)) > 50

        await browser.press("n")
        await browser.wait_for("step 1/")
        await browser.press("?")
        await browser.wait_for("Keys", "Breakpoint list")  # the help screen
        await browser.press("q")  # the help closes (a second q would quit)
        await browser.wait_for("step 1/", gone="Breakpoint list")

        await browser.press("g")
        await browser.wait_for("Go to a step number")
        await browser.press(*"11", "enter")
        text = await browser.wait_for("step 11/", "attn.pattern h1")
        await asyncio.sleep(0.5)
        await browser.screenshot(ARTIFACTS / "serve-x01-step11.png")
        (ARTIFACTS / "serve-x01-step11.txt").write_text(text + "\n", encoding="utf-8")
        assert "step 0/" in first
