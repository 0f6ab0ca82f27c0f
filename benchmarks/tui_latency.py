"""Start-up and step latency of the TUI on X01, headless (medians of repeated runs).

    python benchmarks/tui_latency.py [--repeats 15]

A keypress through Pilot costs time of its own, so a step is reported as what it
adds over a keypress bound to an action that does nothing, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header

from engine import load_scenario
from tinyllm_tui.app import DebuggerApp

X01 = Path(__file__).resolve().parents[1] / "scenarios" / "x01.yaml"


class TimedApp(DebuggerApp):
    BINDINGS = [*DebuggerApp.BINDINGS, Binding("ctrl+underscore", "nothing", "nothing", show=False)]

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


async def keys(pilot, key: str, count: int) -> float:
    began = time.perf_counter()
    for _ in range(count):
        await pilot.press(key)
    return (time.perf_counter() - began) / count


async def step_costs(steps: int, size: tuple[int, int] = (160, 48)) -> tuple[float, float]:
    app = TimedApp(load_scenario(X01), lang="en")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        empty = await keys(pilot, "ctrl+underscore", steps)
        step = await keys(pilot, "n", steps)
        return step, empty


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    starts, bare = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        starts.append(asyncio.run(start_once(lambda: TimedApp(load_scenario(X01), lang="en"))))
        bare.append(asyncio.run(start_once(BareApp)))
    print(f"start → first screen: median {statistics.median(starts) * 1000:.0f} ms over {len(starts)} runs "
          f"(min {min(starts) * 1000:.0f} ms); a bare Textual app: {statistics.median(bare) * 1000:.0f} ms "
          f"(ratio {statistics.median(starts) / statistics.median(bare):.2f})")
    for size in [(160, 48), (80, 24)]:
        pairs = [asyncio.run(step_costs(40, size)) for _ in range(max(3, args.repeats // 3))]
        step = statistics.median(p[0] for p in pairs)
        empty = statistics.median(p[1] for p in pairs)
        print(f"{size[0]}×{size[1]}: keypress with an empty action {empty * 1000:.1f} ms; step (n) "
              f"{step * 1000:.1f} ms; a step adds {(step - empty) * 1000:.1f} ms (ratio {step / empty:.2f})")


if __name__ == "__main__":
    main()
