"""Time how long scenarios take to open (file -> checked Scenario), medians of repeated loads.

    python benchmarks/load_speed.py [--repeat 3] [--skip-gpt2]

Generates, in a temporary folder, the 6.7 MB all-weights YAML of issue 10 (d_model 128,
4 layers, 64-token prompt), the same converted to a safetensors file, and a GPT-2-small-
shaped file-backed scenario; X01 is the shipped one. Prints one line per file, against
issue 10's goals where it sets one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import load_scenario  # noqa: E402
from engine.loading.edits import convert_scenario  # noqa: E402
from tools.make_big_model import main as make_big_model  # noqa: E402


def median_load(path: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        load_scenario(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-gpt2", action="store_true", help="do not write the 500 MB GPT-2-sized file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        make_big_model([str(folder / "inline"), "--inline"])
        inline = folder / "inline" / "model.yaml"
        files = {"x01.yaml": ROOT / "scenarios" / "x01.yaml", "6.7 MB all-weights YAML": inline}
        goals = {"6.7 MB all-weights YAML": 10.0, "the same, converted to safetensors": 1.5}
        converted = folder / "inline" / "converted.yaml"
        convert_scenario(load_scenario(inline), folder / "inline" / "model.safetensors", converted)
        files["the same, converted to safetensors"] = converted
        if not args.skip_gpt2:
            make_big_model([str(folder / "gpt2")])
            files["GPT-2-small shape, safetensors float32"] = folder / "gpt2" / "model.yaml"
        for label, path in files.items():
            source = load_scenario(path).weights_source
            size = path.stat().st_size + (source.file.stat().st_size if source else 0)
            seconds = median_load(path, args.repeat)
            goal = goals.get(label)
            verdict = "" if goal is None else f"; goal ≤ {goal:g} s: {'met' if seconds <= goal else 'NOT met'}"
            print(f"{label:40s} {size / 2**20:9.1f} MiB  open {seconds:7.3f} s (median of {args.repeat}{verdict})")


if __name__ == "__main__":
    main()
