"""`tinyllm-tui run` against the bare operator stream it prints, in the same process (medians).

    .venv/bin/python benchmarks/run_speed.py [--repeats 3] [--model PATH] [--new-tokens 6]

Goal (issue 24): `run` of SmolLM2 with 6 new tokens takes ≤ 1.2× the time of the bare operator stream (a
Session's steps drained: no history, no frames). The checkpoint is loaded once, outside both timings; `run`
is timed from the Debugger's construction to its last printed line (to /dev/null), as the command does it
after loading.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path

from engine import Session, make_backend
from engine.gctuning import tune_for_tracing
from tinyllm_tui import cli
from tinyllm_tui.debugger.opening import ModelOptions, load

SMOLLM2 = Path.home() / ".cache" / "tinyllm-tui" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is"
GOAL = 1.2


def bare(scenario, backend) -> float:
    start = time.perf_counter()
    for _ in Session(scenario, backend).steps():
        pass
    return time.perf_counter() - start


def run(scenario, backend) -> float:
    """The `run` command after loading: the Debugger, its trace, every operator printed."""
    options = cli.Options()
    start = time.perf_counter()
    debugger = cli.Debugger(scenario, backend)
    trace = debugger.trace()
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        cli._print_run(debugger, trace, cli._printed(trace, False), False, False, False, options)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", type=Path, default=SMOLLM2)
    parser.add_argument("--new-tokens", type=int, default=6)
    args = parser.parse_args()
    tune_for_tracing()  # as the command does
    scenario = load(args.model, ModelOptions(prompt=[PROMPT], max_new_tokens=args.new_tokens))
    backend = make_backend()
    bare(scenario, backend)  # the weights are read (lazily) once, before either is timed
    times = {"bare": [], "run": []}
    for _ in range(args.repeats):  # alternated: both see the same machine load
        times["bare"].append(bare(scenario, backend))
        times["run"].append(run(scenario, backend))
    stream, printed = statistics.median(times["bare"]), statistics.median(times["run"])
    ratio = printed / stream
    print(f"{args.model.name}, {args.new_tokens} new tokens, median of {args.repeats}: bare stream {stream:.2f} s, "
          f"run {printed:.2f} s: {ratio:.2f}× (goal ≤ {GOAL}×: {'met' if ratio <= GOAL else 'NOT met'})")


if __name__ == "__main__":
    main()
