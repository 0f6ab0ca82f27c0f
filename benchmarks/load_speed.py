"""Time how long scenarios and checkpoints take to open, against the issues' goals.

    python benchmarks/load_speed.py [--repeat 3] [--skip-gpt2] [--only yaml|checkpoints]
                                    [--qwen /tmp/qwen-0.5b.gguf]

yaml (issue 10; medians of repeated loads, file -> checked Scenario): the 6.7 MB all-weights
YAML (d_model 128, 4 layers, 64-token prompt), the same converted to a safetensors file, and a
GPT-2-small-shaped file-backed scenario, generated in a temporary folder; X01 is the shipped one.

checkpoints (issue 17; benchmarks/checkpoint_speed.py): SmolLM2-135M's GGUF and a GPT-2-small
Hugging Face folder from the shell to the first screen; the Qwen2.5-0.5B-shaped Q4_K_M-style GGUF
of tools/make_qwen_gguf.py: first screen, a step with the logits on screen, `run` against
gguf-py's dequantization plus a plain NumPy forward, and peak memory.
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
    parser.add_argument("--skip-gpt2", action="store_true", help="do not write the 500 MB GPT-2-sized files")
    parser.add_argument("--only", choices=("yaml", "checkpoints"))
    parser.add_argument("--qwen", type=Path, default=Path("/tmp/qwen-0.5b.gguf"),
                        help="the 0.5B GGUF (written by tools/make_qwen_gguf.py if missing)")
    args = parser.parse_args()
    if args.only != "checkpoints":
        yaml_files(args)
    if args.only != "yaml":
        from benchmarks.checkpoint_speed import checkpoints

        checkpoints(args.qwen, skip_gpt2=args.skip_gpt2)


def yaml_files(args: argparse.Namespace) -> None:
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
