"""`tinyllm-tui run` against the bare operator stream it prints, in the same process (medians).

    .venv/bin/python benchmarks/run_speed.py [--repeats 3] [--model PATH] [--new-tokens 6]

Goal (issue 24): `run` of SmolLM2 with 6 new tokens takes ≤ 1.2× the time of the bare operator stream (a
Session's steps drained: no history, no frames). The checkpoint is loaded once, outside every timing; `run`
is timed from the Debugger's construction to its last printed line (to /dev/null), as the command does it
after loading, in three forms: every operator's table (the default), `--jsonl` (every operator's record),
and `--break unembed.hook_out` (the stream read whole, the breakpoints judged at every operator, one table printed):
the last is what the Debugger's pass itself costs over the bare stream. Last, the bare stream with every table
printed as `run` prints it: `run`'s tables over that are what the Debugger adds to the same output (the printing
alone is most of the gap between `run` and the bare stream: no pass can bring `run` nearer than it).

Each figure is given in wall and in CPU seconds (every thread of the process). On 2 shared cores the wall time
mostly measures the wait for a core, and BLAS's threads wait the longest (at load 10 a bare stream of 0.5 CPU
seconds takes several wall seconds), so the wall ratio shrinks as the load grows; the CPU ratio is steadier.
With OPENBLAS_NUM_THREADS=1 the CPU seconds hold no BLAS thread spinning while it waits for the other.
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
from tinyllm_tui.presentation.printed import state_text

SMOLLM2 = Path.home() / ".cache" / "tinyllm-tui" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is"
GOAL = 1.2


def bare(scenario, backend, printed: bool = False) -> tuple[float, float]:
    """A Session's steps drained; `printed`: each operator's table printed as `run` prints it (to /dev/null)."""
    start, cpu = time.perf_counter(), time.process_time()
    with open(os.devnull, "w") as sink:
        for state in Session(scenario, backend).steps():
            if printed:
                print(state_text(state, scenario.vocab, False), file=sink, end="\n\n")
    return time.perf_counter() - start, time.process_time() - cpu


GOAL_FORM = "tables"  # the command as typed; --jsonl writes every number of every operator, as much text as it asks
FORMS = {"tables": ((), False), "--jsonl": ((), True), "--break unembed.hook_out": (("unembed.hook_out",), False)}


def run(scenario, backend, form: str) -> tuple[float, float]:
    """The `run` command after loading: the Debugger, its trace, what it prints."""
    breakpoints, jsonl = FORMS[form]
    options = cli.Options(breakpoints=list(breakpoints) or None)
    start, cpu = time.perf_counter(), time.process_time()
    debugger = cli.Debugger(scenario, backend, breakpoints=breakpoints)
    trace = debugger.trace()
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        cli._print_run(debugger, trace, cli._printed(trace, bool(breakpoints)), False, jsonl, False, options)
    return time.perf_counter() - start, time.process_time() - cpu


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
    times = {"bare": [], "bare printed": [], **{form: [] for form in FORMS}}
    for _ in range(args.repeats):  # alternated: each sees the same machine load
        times["bare"].append(bare(scenario, backend))
        times["bare printed"].append(bare(scenario, backend, printed=True))
        for form in FORMS:
            times[form].append(run(scenario, backend, form))
    stream, stream_cpu = (statistics.median(t[i] for t in times["bare"]) for i in (0, 1))
    print(f"{args.model.name}, {args.new_tokens} new tokens, medians of {args.repeats} (load average "
          f"{os.getloadavg()[0]:.1f}): bare stream {stream:.2f} s, CPU {stream_cpu:.2f} s")
    for form in FORMS:
        wall, cpu = (statistics.median(t[i] for t in times[form]) for i in (0, 1))
        ratio = wall / stream
        verdict = f"goal ≤ {GOAL}×: {'met' if ratio <= GOAL else 'NOT met'}" if form == GOAL_FORM else "no goal"
        print(f"  run {form}: {wall:.2f} s, {ratio:.2f}× the bare stream ({verdict}); CPU {cpu:.2f} s, "
              f"{cpu / stream_cpu:.2f}×")
    printed, printed_cpu = (statistics.median(t[i] for t in times["bare printed"]) for i in (0, 1))
    tables, tables_cpu = (statistics.median(t[i] for t in times[GOAL_FORM]) for i in (0, 1))
    print(f"  the bare stream with every table printed as run prints it: {printed:.2f} s ({printed / stream:.2f}× "
          f"the bare stream: the printing alone); run {GOAL_FORM} is {tables / printed:.2f}× it "
          f"(the Debugger's cost over the same output; CPU {tables_cpu / printed_cpu:.2f}×)")


if __name__ == "__main__":
    main()
