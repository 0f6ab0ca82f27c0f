"""A class's load on `tinyllm-tui serve`: N learners open X01 at once over websockets and step it together.

    .venv/bin/python benchmarks/serve_load.py [--learners 20] [--steps 10]

Prints the time to every learner's first screen, the keypress-to-frame latency (from sending `n` to the
first frame that comes back; median and p95), first of each learner stepping in turn while the others
are open, then of all of them stepping at once as fast as frames come back; each session's memory
(RSS, and its private part from smaps_rollup), and whether every process was gone after the tabs closed.
Traffic stays on loopback; the server is started and stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from serve_helpers import Learner, ServedClass  # noqa: E402


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, private) of one process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0])
    return fields["Rss"], fields["Private_Clean"] + fields["Private_Dirty"]


class Reading:
    """A learner whose socket is read all the time (an unread socket misses the server's heartbeat); the
    status line's `step N/` is found in the frames' bytes, without emulating a terminal."""

    def __init__(self, learner: Learner):
        self.learner, self.frames, self.changed = learner, 0, asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while await self.learner.receive(3600):
            self.frames += 1
            self.changed.set()

    async def until(self, done) -> None:
        while not done():
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 120)

    async def steps(self, count: int, first: int = 0) -> list[float]:
        """Press `n` `count` times from step `first`, each once the screen shows the step before; the time
        from each key to the first frame after it."""
        times = []
        for step in range(first + 1, first + count + 1):
            await self.until(lambda: self.shows(step - 1))
            before, sent = self.frames, time.perf_counter()
            await self.learner.press("n")
            await self.until(lambda: self.frames > before)
            times.append(time.perf_counter() - sent)
        await self.until(lambda: self.shows(first + count))
        return times

    def shows(self, step: int) -> bool:
        return any(f"step {step}/".encode() in frame for frame in self.learner.received[-50:])


def latency_line(what: str, latencies: list[float]) -> str:
    latencies = sorted(latencies)
    return (f"keypress to frame, {what} ({len(latencies)} steps): median {statistics.median(latencies) * 1e3:.1f} ms, "
            f"p95 {latencies[int(0.95 * (len(latencies) - 1))] * 1e3:.1f} ms, max {latencies[-1] * 1e3:.1f} ms")


async def main(learners: int, steps: int) -> None:
    folder = Path(tempfile.mkdtemp())
    shutil.copy(ROOT / "scenarios" / "x01.yaml", folder / "x01.yaml")
    with ServedClass(folder / "x01.yaml", options=("--max-sessions", str(learners))) as served:
        started = time.perf_counter()
        class_ = [Reading(await Learner(served, emulate=False).connect()) for _ in range(learners)]
        await asyncio.gather(*(reading.until(lambda r=reading: r.shows(0)) for reading in class_))
        opened = time.perf_counter() - started
        pids = served.sessions()
        memory = [memory_kib(pid) for pid in pids]
        alone = [t for reading in class_ for t in await reading.steps(1)]  # one at a time, the others open
        together = [t for times in await asyncio.gather(*(reading.steps(steps, first=1) for reading in class_))
                    for t in times]
        for reading in class_:
            await reading.learner.close()
            await asyncio.gather(reading.task, return_exceptions=True)
        gone = await served.settled(timeout=60)
    shutil.rmtree(folder)
    rss, private = zip(*memory)
    print(f"{learners} learners, {len(pids)} app processes; every first screen after {opened:.1f} s")
    print(latency_line(f"one learner at a time, {learners} sessions open", alone))
    print(latency_line(f"all {learners} stepping at once, {steps} steps each", together))
    print(f"per session: RSS median {statistics.median(rss) / 1024:.0f} MiB (max {max(rss) / 1024:.0f}), "
          f"private median {statistics.median(private) / 1024:.0f} MiB; the class {sum(rss) / 1024:.0f} MiB RSS")
    print(f"after closing every tab: {'no app process left' if gone else 'PROCESSES LEFT: ' + str(pids)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.learners, arguments.steps))
