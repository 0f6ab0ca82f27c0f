"""Start-up and step latency of the TUI, headless (medians of repeated runs).

    python benchmarks/tui_latency.py [--repeats 9] [--gpt2 DIR]

X01: start → first screen against a bare Textual app, and what a step adds over an
empty keypress at 160×48 and 80×24. GPT-2-small shape (12 layers, d 768, vocab 50 257,
32 + 16 tokens, float32 weights in a safetensors file, made by tools/make_big_model.py):
open from the weights file, and what a step adds with a 32×768 activation, the 32×50 257
logits and layer 11's KV cache on screen. A keypress through Pilot costs time of its own,
so a step is reported as what it adds over a keypress bound to an action that does nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header

from engine import load_scenario, make_backend
from engine.gctuning import tune_for_tracing
from tinyllm_tui.tui.app import DebuggerApp

ROOT = Path(__file__).resolve().parents[1]
X01 = ROOT / "scenarios" / "x01.yaml"
EMPTY_KEY = "ctrl+underscore"


class TimedApp(DebuggerApp):
    BINDINGS = [*DebuggerApp.BINDINGS, Binding(EMPTY_KEY, "nothing", "nothing", show=False)]

    def action_nothing(self) -> None:
        pass


class BareApp(App):
    """The floor: Textual itself with a header, a footer and an empty table."""

    def compose(self):
        yield Header()
        yield DataTable()
        yield Footer()


async def start_once(make_app) -> float:
    began = time.perf_counter()
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        return time.perf_counter() - began


async def per_key(pilot, keys: list[str]) -> float:
    began = time.perf_counter()
    for key in keys:
        await pilot.press(key)
    return (time.perf_counter() - began) / len(keys)


def float32_app(path: Path) -> TimedApp:
    """The GPT-2-shaped model as the issue measures it: float32, as its weights file holds it."""
    return TimedApp(load_scenario(path, dtype="float32"), make_backend("numpy", "float32"), lang="en")


async def step_cost(make_app, size: tuple[int, int], goto: str | None, pairs: int) -> tuple[float, float]:
    """(seconds per step, seconds per empty keypress): n and ← alternate around the step after `goto`."""
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
        return step, empty


def report(label: str, costs: list[tuple[float, float]], goal_ms: float) -> None:
    step = statistics.median(c[0] for c in costs)
    empty = statistics.median(c[1] for c in costs)
    added = (step - empty) * 1000
    print(f"{label}: empty keypress {empty * 1000:.1f} ms; step {step * 1000:.1f} ms; a step adds {added:.1f} ms "
          f"(goal ≤ {goal_ms:g} ms: {'met' if added <= goal_ms else 'NOT met'})")


def x01(repeats: int) -> None:
    starts, bare = [], []
    for _ in range(repeats):  # interleaved, so both see the same machine load
        starts.append(asyncio.run(start_once(lambda: TimedApp(load_scenario(X01), lang="en"))))
        bare.append(asyncio.run(start_once(BareApp)))
    ratio = statistics.median(starts) / statistics.median(bare)
    print(f"X01 start → first screen: median {statistics.median(starts) * 1000:.0f} ms; a bare Textual app "
          f"{statistics.median(bare) * 1000:.0f} ms; ratio {ratio:.2f} (goal ≤ 2: {'met' if ratio <= 2 else 'NOT met'})")
    for size in [(160, 48), (80, 24)]:
        costs = [asyncio.run(step_cost(lambda: TimedApp(load_scenario(X01), lang="en"), size, None, 20))
                 for _ in range(max(3, repeats // 3))]
        report(f"X01 {size[0]}×{size[1]}", costs, 15)


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
    args = parser.parse_args()
    if not args.skip_x01:
        x01(args.repeats)
    if args.gpt2 is not None:
        gpt2(args.gpt2, args.repeats)
    else:
        with tempfile.TemporaryDirectory() as folder:
            gpt2(Path(folder), args.repeats)


if __name__ == "__main__":
    main()
