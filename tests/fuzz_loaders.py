"""A seeded, structure-aware mutation fuzzer of the checkpoint loaders, through the command line.

    .venv/bin/python tests/fuzz_loaders.py --mutants 2000 --seed 1

Each mutant (tests/loader_mutations.py) is one of the small valid fixtures with one to three edits made
where the format has structure: a GGUF file's metadata, tensor table and layout, a safetensors header,
a Hugging Face folder's config.json, tokenizer.json or shard index. Every
mutant is opened by `tinyllm-tui run MUTANT --ids … | --prompt …` in a worker process held to
RLIMIT_AS 1.5 GiB and a time limit per mutant. It must end with exit 0 (with at most one-line
warnings) or exit 2 with exactly one printable `tinyllm-tui: error:` line. A traceback, an internal
error, a hang, a worker that dies, a MemoryError or RecursionError, or a message over several lines
or with unprintable characters is a failure, printed with the mutant's seed, index and edits.
The test suite runs a short run (tests/test_fuzz.py); the full run is by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loader_mutations import Mutant, mutant  # noqa: E402

MEMORY_LIMIT = 3 << 29  # 1.5 GiB of address space per worker
TIME_LIMIT = 60.0  # seconds a mutant may take (the fixtures run in well under one)


class Worker:
    """A process that runs the command line on one mutant after another, under the memory limit."""

    def __init__(self):
        env = os.environ | {"RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                            "MALLOC_ARENA_MAX": "2"}
        self.process = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, text=True)

    def run(self, args: list[str]) -> dict | None:
        """The outcome, or None when the mutant ran past the time limit or the worker died."""
        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], TIME_LIMIT)
        line = self.process.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def worker() -> None:
    """Reads argument lists (JSON lines) on stdin; for each, runs the CLI and writes its exit status and stderr."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(os.devnull, "w")
    from tinyllm_tui.cli import app

    saved, original = os.dup(2), sys.stderr
    for line in sys.stdin:
        with tempfile.TemporaryFile() as captured:
            os.dup2(captured.fileno(), 2)  # Rust writes to the file descriptor itself
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
            code, crash, started = None, None, time.perf_counter()
            try:
                app(json.loads(line), prog_name="tinyllm-tui")
            except SystemExit as exit:
                code = exit.code
            except BaseException as error:  # noqa: BLE001 (whatever escapes is what the fuzzer looks for)
                crash = f"{type(error).__name__}: {error}"[:2000]
            sys.stderr.flush()
            os.dup2(saved, 2)
            sys.stderr = original
            captured.seek(0)
            stderr = captured.read().decode("utf-8", errors="backslashreplace")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        protocol.write(json.dumps({"code": code, "stderr": stderr, "crash": crash, "peak": peak,
                                   "seconds": time.perf_counter() - started}) + "\n")
        protocol.flush()


def verdict(outcome: dict | None) -> str:
    """"accepted", "refused", or what is wrong."""
    if outcome is None:
        return "hang or worker killed"
    if outcome["crash"]:
        return f"escaped: {outcome['crash'][:300]}"
    lines = outcome["stderr"].splitlines()
    errors = [line for line in lines if line.startswith("tinyllm-tui: error: ")]
    others = [line for line in lines if not line.startswith(("tinyllm-tui: error: ", "tinyllm-tui: warning: "))]
    if others or not all(line.isprintable() for line in lines):
        return "a message over several lines or unprintable"
    if any(word in outcome["stderr"] for word in ("Traceback", "MemoryError", "RecursionError", "internal error")):
        return "an internal error"
    if outcome["code"] == 0 and not errors:
        return "accepted"
    if outcome["code"] == 2 and len(errors) == 1:
        return "refused"
    return f"exit {outcome['code']} with {len(errors)} error lines"


def run(count: int, seed: int, first: int = 0, report=print) -> list[tuple[Mutant, str, dict | None]]:
    """Runs mutants first..first+count-1 of `seed`; returns the failures (mutant, verdict, outcome)."""
    failures, verdicts, kinds, peak = [], Counter(), Counter(), 0
    started = time.perf_counter()
    work = Worker()
    with tempfile.TemporaryDirectory(prefix="fuzz-loaders-") as scratch:
        for index in range(first, first + count):
            case = mutant(seed, index)
            folder = Path(scratch) / str(index)
            folder.mkdir()
            target = case.build(folder)
            outcome = work.run(["run", str(target), *case.options])
            said = verdict(outcome)
            kinds.update(edit.split(":")[0] for edit in case.edits[1:])
            verdicts[said if said in ("accepted", "refused") else "failed"] += 1
            peak = max(peak, outcome["peak"] if outcome else 0)
            if said not in ("accepted", "refused"):
                failures.append((case, said, outcome))
                report(f"FAIL #{index} {case.family} {case.edits} {case.options[:2]}: {said}\n    "
                       f"{(outcome or {}).get('stderr', '')[:500]!r}")
            if outcome is None or said not in ("accepted", "refused"):
                work.close()
                work = Worker()
            shutil.rmtree(folder)
    work.close()
    report(f"{count} mutants (seed {seed}) in {time.perf_counter() - started:.0f} s: {dict(verdicts)}; "
           f"worker peak RSS {peak >> 20} MiB; edits by kind {dict(sorted(kinds.items()))}")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first", type=int, default=0, help="index of the first mutant (to rerun one)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    sys.exit(1 if run(args.mutants, args.seed, args.first) else 0)


if __name__ == "__main__":
    main()
