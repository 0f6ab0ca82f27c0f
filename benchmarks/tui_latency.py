"""Start-up and step latency of the TUI, headless (medians of repeated runs), against the goals.

    .venv/bin/python benchmarks/tui_latency.py [--repeats 9] [--gpt2 DIR]

Goals (issues 16 and 24): X01 starts in ≤ 1.5× the time of a bare Textual app; an X01 step adds ≤ 5 ms
over an empty keypress at 160×48 and at 80×24; a GPT-2-small-shaped step with the logits on screen
adds ≤ 30 ms.

The start goal is measured as issue 16 set it and issue 24 gave its baseline (1.49–1.59× when that issue was
filed): both apps built and run in this process, from the scenario's load to the first paint (the imports done
before). Printed beside it, not a goal: the command's start, `tinyllm-tui scenarios/x01.yaml` against `python
benchmarks/bare_app.py`, each a fresh process on a pseudo-terminal of 160×48 read through a terminal emulator
(pyte), timed from the start of the process until its first screen is drawn (the status line `step 0/…`, the bare
app's title): the interpreter, the imports, the load and the first paint, in wall and in CPU seconds (the
command's threads, user and system; on 2 shared cores the wall time mostly measures the wait for a core); and its
floor, the bare app with NumPy imported first, what a Textual app computing with NumPy cannot go under.
A keypress through Pilot costs time of its own (it waits until the process is idle),
so a step is reported as what it adds over a keypress bound to an action that does nothing, both
measured side by side in the same run.

A step's move and its frame are made in the runner's thread; the UI thread only hands the frame to
the widgets. Each line also gives the frame's share: the same steps made on a headless Debugger
(the move plus the frame, no widget), so what remains is the widgets' update and the redraw.
GPT-2-small shape: 12 layers, d 768, vocab 50 257, 32 + 16 tokens, float32 weights in a safetensors
file, made by tools/make_big_model.py.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import runpy
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import pyte
from textual.binding import Binding

from engine import load_scenario, make_backend
from engine.gctuning import tune_for_tracing
from tinyllm_tui.debugger import Debugger
from tinyllm_tui.tui.app import DebuggerApp

ROOT = Path(__file__).resolve().parents[1]
X01 = ROOT / "scenarios" / "x01.yaml"
EMPTY_KEY = "ctrl+underscore"


class TimedApp(DebuggerApp):
    BINDINGS = [*DebuggerApp.BINDINGS, Binding(EMPTY_KEY, "nothing", "nothing", show=False)]

    def action_nothing(self) -> None:
        pass


BARE_APP = ROOT / "benchmarks" / "bare_app.py"
BareApp = runpy.run_path(str(BARE_APP))["BareApp"]
START_SIZE = (160, 48)


async def start_once(make_app) -> float:
    began = time.perf_counter()
    app = make_app()
    async with app.run_test(size=START_SIZE) as pilot:
        await pilot.pause()
        return time.perf_counter() - began


def command_start(argv: list[str], marker: str, timeout: float = 60.0) -> tuple[float, float]:
    """(wall seconds, CPU seconds) from starting `argv` on a pseudo-terminal until `marker` is on its screen. The
    CPU seconds (user + system, every thread of the command) hardly change with the machine's load, the wall ones
    grow with it: on 2 shared cores a start at load 10 waits most of its time for a core."""
    columns, lines = START_SIZE
    screen = pyte.Screen(columns, lines)
    stream = pyte.ByteStream(screen)
    began = time.perf_counter()
    pid, terminal = pty.fork()
    if pid == 0:  # the child: a terminal of the size measured, then the command
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        os.execvpe(argv[0], argv, {**os.environ, "TERM": "xterm-256color"})
    wall = None
    try:
        while wall is None and time.perf_counter() - began < timeout:
            if select.select([terminal], [], [], 0.01)[0]:
                stream.feed(os.read(terminal, 1 << 16))
                if any(marker in line for line in screen.display):
                    wall = time.perf_counter() - began
        if wall is None:
            raise TimeoutError(f"{argv}: no {marker!r} on screen after {timeout} s:\n" + "\n".join(screen.display))
    finally:
        os.kill(pid, signal.SIGKILL)
        usage = os.wait4(pid, 0)[2]
        os.close(terminal)
    return wall, usage.ru_utime + usage.ru_stime


async def per_key(pilot, keys: list[str]) -> tuple[float, float]:
    """(wall seconds, UI-thread CPU seconds) per key. Pilot waits in 20 ms sleeps until the process is idle,
    so wall time comes in steps of that size; the UI thread's CPU time (the event loop runs on this
    thread, the runner's work on another) is the finer measure of what a key costs the UI."""
    began, cpu = time.perf_counter(), time.thread_time()
    for key in keys:
        await pilot.press(key)
    return (time.perf_counter() - began) / len(keys), (time.thread_time() - cpu) / len(keys)


def float32_app(path: Path) -> TimedApp:
    """The GPT-2-shaped model as the issue measures it: float32, as its weights file holds it."""
    return TimedApp(load_scenario(path, dtype="float32"), make_backend("numpy", "float32"), lang="en")


async def step_cost(make_app, size: tuple[int, int], goto: str | None, pairs: int) -> tuple:
    """((wall, UI CPU) per step, (wall, UI CPU) per empty keypress, seconds per headless move and frame):
    n and ← alternate around the step after `goto`."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if goto is not None:
            app.debugger.search(goto)
            app.main.show()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("n", "left")  # the step's round is computed: what is timed is showing it
        empty = await per_key(pilot, [EMPTY_KEY] * 2 * pairs)
        step = await per_key(pilot, ["n", "left"] * pairs)
        return step, empty, frame_cost(app.debugger, pairs)


def frame_cost(debugger: Debugger, pairs: int) -> float:
    """Seconds per move on the Debugger alone: the move and the frame it publishes, no widget."""
    began = time.perf_counter()
    for _ in range(pairs):
        debugger.step()
        debugger.back()
    return (time.perf_counter() - began) / (2 * pairs)


def report(label: str, costs: list[tuple], goal_ms: float) -> None:
    wall, wall_empty = (statistics.median(c[i][0] for c in costs) * 1000 for i in (0, 1))
    cpu, cpu_empty = (statistics.median(c[i][1] for c in costs) * 1000 for i in (0, 1))
    frame = statistics.median(c[2] for c in costs) * 1000
    added = cpu - cpu_empty
    print(f"{label}: a step adds {added:.1f} ms of UI-thread time over an empty keypress "
          f"(goal ≤ {goal_ms:g} ms: {'met' if added <= goal_ms else 'NOT met'}) [UI thread: step {cpu:.1f} ms, "
          f"empty key {cpu_empty:.1f} ms; wall until idle: step {wall:.1f} ms, empty key {wall_empty:.1f} ms, "
          f"in 20 ms sleeps]; the move and its frame, off the UI thread: {frame:.1f} ms [load average {os.getloadavg()[0]:.1f}]")


def start_ratio(label: str, ours, bare, repeats: int, goal: bool) -> None:
    """Median start of ours against the bare app's, runs interleaved so that both see the same load. `ours` and
    `bare` give seconds, or (wall, CPU) seconds: the CPU ratio is printed beside the wall one."""
    starts, floor = [], []
    for _ in range(repeats):
        starts.append(_pair(ours()))
        floor.append(_pair(bare()))
    wall, wall_bare = (statistics.median(t[0] for t in times) for times in (starts, floor))
    cpu = ""
    if starts[0][1] is not None:
        ours_cpu, bare_cpu = (statistics.median(t[1] for t in times) for times in (starts, floor))
        cpu = f"; CPU {ours_cpu * 1000:.0f} ms against {bare_cpu * 1000:.0f} ms, ratio {ours_cpu / bare_cpu:.2f}"
    ratio = wall / wall_bare
    print(f"{label}: median {wall * 1000:.0f} ms; a bare Textual app {wall_bare * 1000:.0f} ms; ratio {ratio:.2f}"
          f"{(' (goal ≤ 1.5: ' + ('met' if ratio <= 1.5 else 'NOT met') + ')') if goal else ''}{cpu}"
          f" [load average {os.getloadavg()[0]:.1f}]")


def _pair(measured) -> tuple[float, float | None]:
    return tuple(measured) if isinstance(measured, tuple) else (measured, None)


def bare_start() -> tuple[float, float]:
    return command_start([sys.executable, str(BARE_APP)], BareApp.__name__)


def x01(repeats: int) -> None:
    print(f"load average {os.getloadavg()[0]:.1f} (2 shared cores: ratios are of runs interleaved in this process)")
    command = str(Path(sys.executable).with_name("tinyllm-tui"))
    start_ratio("X01 start after the imports (in this process: load, build, first paint; issue 24's measure)",
                lambda: asyncio.run(start_once(lambda: TimedApp(load_scenario(X01), lang="en"))),
                lambda: asyncio.run(start_once(BareApp)), repeats, goal=True)
    start_ratio("  the command, `tinyllm-tui scenarios/x01.yaml` → first screen, imports included",
                lambda: command_start([command, str(X01)], "step 0/"), bare_start, repeats, goal=False)
    floor = [sys.executable, "-c", f"import numpy, runpy; runpy.run_path({str(BARE_APP)!r}, run_name='__main__')"]
    start_ratio("  the command's floor: the same bare app with NumPy imported first",
                lambda: command_start(floor, BareApp.__name__), bare_start, repeats, goal=False)
    for size in [(160, 48), (80, 24)]:
        costs = [asyncio.run(step_cost(lambda: TimedApp(load_scenario(X01), lang="en"), size, None, 20))
                 for _ in range(max(3, repeats // 3))]
        report(f"X01 {size[0]}×{size[1]}", costs, 5)


def gpt2(folder: Path, repeats: int) -> None:
    path = folder / "model.yaml"
    if not path.exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_big_model.py"), str(folder)], check=True)
    opens = [asyncio.run(start_once(lambda: float32_app(path))) for _ in range(3)]
    print(f"GPT-2-small shape, open from the weights file to the first screen: median {statistics.median(opens):.2f} s "
          f"(goal ≤ 2 s: {'met' if statistics.median(opens) <= 2 else 'NOT met'})")
    views = [("32×768 activation (blocks.0.attn.hook_q)", "blocks.0.ln1.hook_normalized"),
             ("32×50 257 logits (unembed.hook_out)", "ln_final.hook_normalized"),
             ("layer 11's KV cache beside the matrix", "blocks.11.attn.hook_v")]
    for label, before in views:
        costs = [asyncio.run(step_cost(lambda: float32_app(path), (160, 48), before, 10))
                 for _ in range(max(2, repeats // 3))]
        report(f"GPT-2 160×48, {label}", costs, 30)


def main() -> None:
    tune_for_tracing()  # as tinyllm-tui's own entry point does
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--gpt2", type=Path, help="folder for the generated GPT-2-shaped model (default: a temporary one)")
    parser.add_argument("--skip-x01", action="store_true")
    parser.add_argument("--skip-gpt2", action="store_true")
    args = parser.parse_args()
    if not args.skip_x01:
        x01(args.repeats)
    if args.skip_gpt2:
        return
    if args.gpt2 is not None:
        gpt2(args.gpt2, args.repeats)
    else:
        with tempfile.TemporaryDirectory() as folder:
            gpt2(Path(folder), args.repeats)


if __name__ == "__main__":
    main()
