"""`tinyllm-tui serve` over websockets, as a learner's browser (or a script posing as one) talks to it:
access (token, Origin), confinement (save-as, ctrl+s, W, autosave), limits (sessions, size, idle, ending).

One server for the module (at most 2 sessions); the idle timeout has one of its own.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import aiohttp
import pytest
import yaml

pytest.importorskip("textual_serve", reason="serve needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("pyte", reason="the learner's screen needs pyte (the test extra)")

from serve_helpers import COOKIE, TOKEN, Learner, ServedClass  # noqa: E402

X01 = Path(__file__).resolve().parents[1] / "scenarios" / "x01.yaml"
FIRST_SCREEN = "step 0/"


@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("served")
    shutil.copy(X01, folder / "x01.yaml")
    return folder / "x01.yaml"


@pytest.fixture(scope="module")
def server(lesson):
    with ServedClass(lesson, options=("--max-sessions", "2")) as served:
        yield served


@pytest.fixture
async def served(server):
    """The module's server, once the sessions of the tests before have ended."""
    assert await server.settled(), f"sessions left over: {server.sessions()}"
    return server


def app_folder(pid: int) -> Path:
    return Path(os.readlink(f"/proc/{pid}/cwd"))


# -- access ------------------------------------------------------------------------------------------
async def test_the_page_needs_the_token_which_becomes_a_cookie(served):
    async with aiohttp.ClientSession() as http:
        refused = await http.get(served.url + "/")
        assert refused.status == 403 and "token" in await refused.text()
        entry = await http.get(f"{served.url}/?token={TOKEN}", allow_redirects=False)
        assert entry.status == 302 and "token" not in entry.headers["Location"]
        cookie = entry.headers["Set-Cookie"]
        assert f"tinyllm_token={TOKEN}" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        page = await http.get(served.url + "/", headers=COOKIE)
        html = await page.text()
        assert page.status == 200 and "/ws/0" in html
        outside = [url for url in re.findall(r"(?:https?|wss?)://[^\"' )]+", html)
                   if not url.split("//", 1)[1].startswith(served.url.split("//", 1)[1])]
        assert outside == [], outside  # textual-serve's own page loads a font stylesheet from outside
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        listing = await http.get(served.url + "/static/", headers=COOKIE)
        assert listing.status in (403, 404)  # textual-serve lists the folder


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example", **COOKIE},  # another page the learner visits
    COOKIE,  # no Origin at all: a script
    {"Origin": "ORIGIN"},  # the right origin, no token
], ids=["foreign-origin", "no-origin", "no-token"])
async def test_a_websocket_without_the_origin_or_the_token_is_refused(served, headers):
    headers = {name: served.url if value == "ORIGIN" else value for name, value in headers.items()}
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await Learner(served).connect(headers=headers)
    assert refused.value.status == 403
    assert served.sessions() == []  # no process was started for it


# -- one confined session ----------------------------------------------------------------------------
async def test_a_learner_gets_a_clamped_terminal_in_a_folder_of_its_own_and_is_killed_if_it_ignores_quit(
        served, lesson):
    learner = await Learner(served, width=1000, height=400).connect()
    await learner.wait_for(FIRST_SCREEN, "我", "学习", "n Step")
    lines = learner.text().splitlines()
    footer = next(n for n, line in enumerate(lines) if line.startswith(" n Step"))
    assert footer == 79 and max(map(len, lines)) <= 240  # the footer is drawn on row 80, not 400
    [pid] = served.sessions()
    folder = app_folder(pid)
    assert folder.name.startswith("tinyllm-serve-") and (folder / "x01.yaml").read_bytes() == lesson.read_bytes()
    environment = dict(item.split("=", 1) for item in
                       Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
    assert environment["HOME"] == str(folder) and "TINYLLM_AUTOSAVE_DIR" not in environment
    assert "/sh" not in Path(f"/proc/{pid}/cmdline").read_text().split("\0")[0]  # no shell between
    limits = Path(f"/proc/{pid}/limits").read_text()
    assert re.search(r"Max data size\s+1610612736", limits)  # --max-memory 1G plus the interpreter's 512M
    os.kill(pid, signal.SIGSTOP)  # it can no longer answer "quit"
    await learner.close()  # the tab closes
    await asyncio.sleep(1)
    assert pid in served.sessions()  # still in its grace period
    assert await served.settled(timeout=10), "closing the tab left its process running"
    assert not folder.exists()


async def test_saves_stay_in_the_session_folder_and_are_offered_as_downloads(served, lesson):
    original = lesson.read_bytes()
    outside = [Path("/tmp/x.yaml"), Path(tempfile.gettempdir()) / "x.yaml", Path.home() / "x.yaml",
               lesson.parent / "x.yaml"]
    before = {path: path.read_bytes() if path.exists() else None for path in outside}
    async with Learner(served) as learner:
        await learner.wait_for(FIRST_SCREEN)
        await learner.press("w")
        await learner.wait_for("embed")
        await learner.press("0")
        await learner.wait_for("edited embed")
        await learner.press("ctrl+s")
        question = await learner.wait_for("into x01.yaml?")
        folder = app_folder(served.sessions()[0])
        assert str(lesson.parent) not in question and str(folder) not in question  # no server path on screen
        await learner.press("y")
        saved = yaml.safe_load(await learner.delivered())
        assert saved["weights"]["embed"] == [[0.0] * 4] * 6  # the download holds the edit
        assert lesson.read_bytes() == original

        await learner.press("escape")
        await learner.wait_for("n Step")
        await learner.press("p")
        await learner.wait_for("[:,:]=")
        await learner.type("0")  # the line starts with the operator's `hook_embed[:,:]=`: what is typed follows it
        await learner.press("enter")
        await learner.wait_for("intervention")
        await learner.press("W")
        [saved_intervention] = yaml.safe_load(await learner.delivered())["interventions"]
        assert re.fullmatch(r"hook_embed(\[:,:\])?=0", saved_intervention)
        assert lesson.read_bytes() == original

        await learner.press("w")
        await learner.wait_for("embed")
        await learner.press("e")  # another edit, to save as: the cell under the cursor
        await learner.wait_for("▊")
        await learner.type("0.5")
        await learner.press("enter")
        await learner.wait_for("edited embed", gone="▊")
        await learner.press("S")
        for name in ("/tmp/x.yaml", "../x.yaml", "~/x.yaml"):
            await learner.wait_for("a file name")
            await learner.type(name)
            await learner.press("enter")
            await learner.wait_for(f"cannot write '{name}'")
            await learner.press("ctrl+u")  # the line emptied
            await learner.wait_for("a file name", gone=f"▊  {name}")
        await learner.type("mine.yaml")
        await learner.press("enter")
        saved_as = yaml.safe_load(await learner.delivered())
        assert (folder / "mine.yaml").exists()
        await learner.press("escape")
        await learner.wait_for("saved to mine.yaml")
    assert saved_as["weights"]["embed"] != saved["weights"]["embed"]
    assert {path: path.read_bytes() if path.exists() else None for path in outside} == before
    assert lesson.read_bytes() == original


# -- limits ------------------------------------------------------------------------------------------
async def test_learners_do_not_share_edits_and_the_class_is_full_past_max_sessions(served):
    first = await Learner(served).connect()
    await first.wait_for(FIRST_SCREEN)
    await first.press("w")
    await first.wait_for("embed")
    await first.press("0")
    await first.wait_for("edited embed")
    [pid] = served.sessions()
    autosaved = app_folder(pid) / ".x01.yaml.unsaved-edits.json"
    for _ in range(100):  # written as the edit is published, beside the screen's update
        if autosaved.exists():
            break
        await asyncio.sleep(0.1)
    assert autosaved.exists(), "the first learner's edit was not autosaved"
    async with Learner(served) as second:
        await second.wait_for(FIRST_SCREEN)
        await second.ended(1.0)  # what the app draws in its first second: a restore question would be there
        assert "unsaved weight edits" not in second.text()
        assert len({app_folder(pid) for pid in served.sessions()}) == 2

        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await Learner(served).connect()
        assert refused.value.status == 503
        async with aiohttp.ClientSession() as http:
            page = await http.get(served.url + "/", headers=COOKIE)
            assert page.status == 503 and "The class is full" in await page.text()
        assert len(served.sessions()) == 2
        await first.close()
        while len(served.sessions()) > 1:
            await asyncio.sleep(0.05)
        async with Learner(served) as third:  # a place is free again
            await third.wait_for(FIRST_SCREEN)


async def test_a_start_page_lists_several_files_and_an_idle_learner_is_sent_away(lesson, tmp_path):
    shutil.copy(X01.with_name("eos7.yaml"), tmp_path / "eos7.yaml")
    with ServedClass(lesson, tmp_path / "eos7.yaml", options=("--idle-timeout", "4s")) as served:
        async with aiohttp.ClientSession() as http:
            start = await (await http.get(served.url + "/", headers=COOKIE)).text()
        assert re.findall(r'<a href="(lesson/\d)">([^<]+)</a>', start) == [("lesson/0", "x01.yaml"),
                                                                          ("lesson/1", "eos7.yaml")]
        learner = await Learner(served).connect(lesson=1)
        await learner.wait_for(FIRST_SCREEN, "request 0 (of 1)")  # eos7 has one request, x01 two
        await learner.press("n")
        await learner.wait_for("step 1/")
        assert not await learner.ended(2)  # a key keeps the session
        assert await learner.ended(5), "the idle session was not ended"
        await learner.close()
        assert await served.settled()


def test_a_lesson_naming_a_file_outside_its_folder_is_refused_in_the_catalogues_words(tmp_path):
    from engine import ScenarioError, load_scenario
    from engine.loading.edits import convert_scenario
    from said import said
    from tinyllm_tui.serve.lessons import lesson as lesson_on

    (tmp_path / "sub").mkdir()
    file = convert_scenario(load_scenario(X01), tmp_path / "w.safetensors", tmp_path / "sub" / "x.yaml")
    with pytest.raises(ScenarioError) as caught:
        lesson_on(file)
    assert said(caught.value) == (f"{file}: weights.file: serve copies the files a scenario names into each learner's "
                                  "folder: name '../w.safetensors' relative to the scenario, beside it or below")
    assert said(caught.value, "zh") == (f"{file}: weights.file: serve 会把场景指定的文件复制到每个学习者的文件夹中："
                                        "请用相对于场景的路径指定 '../w.safetensors'，放在它旁边或下面")
