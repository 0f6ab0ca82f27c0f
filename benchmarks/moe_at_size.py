"""Issue 26's at-size MoE figures, each against its goal.

    .venv/bin/python benchmarks/moe_at_size.py [--folder /tmp/moe-at-size] [--only gpt-oss|qwen3moe]

Two GGUFs are written into --folder (about 1.1 GB and 1.5 GB; never committed) unless already there:
gpt-oss-20b's per-layer shape with 2 layers (hidden 2880, 64 query / 8 key-value heads of 64, 32 experts of width
2880, 4 per token, MXFP4 experts with biases, sinks, a 128-token window on layer 0, YaRN) and Qwen3-30B-A3B's with
4 layers (hidden 2048, 32 / 4 heads of 128, q/k norms, 128 experts of width 768, 8 per token, Q4_0 experts). Every
other tensor is F32, the experts random blocks of spread about 1/sqrt(fan-in); the vocabulary is the tiny gpt-oss
fixture's 300 byte-level tokens (the per-layer shape is what is measured, not the embedding).

Figures: the first screen from the shell (benchmarks/checkpoint_speed.py's, median of its runs, float64); the
slowest and the median step of the Debugger through the prefill and the decode rounds (a step computes its own
operator: one that first uses an expert dequantizes that one matrix; the rest of a round is listed in the runner
while no key waits, timed on its own); the peak memory (VmHWM) of a fresh process that opens the file and runs the
prompt and its new tokens in float32 (a few tokens: a long prompt reaches every expert), against the dense float32 size of the weights (every expert dequantized).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.checkpoint_speed import child, first_screen, verdict  # noqa: E402
from engine.loading.gguf_file import GGUFFile  # noqa: E402

TOKENIZER = ROOT / "tests" / "fixtures" / "gguf-gpt-oss" / "model.gguf"  # its tokenizer.* keys
PROMPT = "The cat"  # a few tokens: each takes its own experts
NEW_TOKENS = 2
SHAPES = {
    "gpt-oss": dict(layers=2, d=2880, heads=64, kv=8, dh=64, experts=32, used=4, f=2880, kind="MXFP4"),
    "qwen3moe": dict(layers=4, d=2048, heads=32, kv=4, dh=128, experts=128, used=8, f=768, kind="Q4_0"),
}
PEAK = """
import json, sys, time
from benchmarks.checkpoint_speed import peak_memory
from engine import Session, make_backend
from engine.loading import open_model
scenario = open_model(sys.argv[2], prompt=sys.argv[3], max_new_tokens=int(sys.argv[4]), dtype="float32")
began = time.perf_counter()
session = Session(scenario, make_backend("numpy", "float32"))
for _ in session.steps():
    pass
experts = {name.rsplit(".", 1)[0] for name in scenario.weights.cache.kept() if ".experts." in name}
print(json.dumps({"seconds": time.perf_counter() - began, "peak": peak_memory(), "experts": len(experts)}))
"""


# -- the files ---------------------------------------------------------------------------------------------
def random_blocks(kind: str, shape: tuple[int, ...], fan_in: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 rows of random `kind` blocks whose values spread about 1/sqrt(fan_in)."""
    blocks = shape[-1] // 32
    if kind == "MXFP4":  # an E8M0 exponent (value 2^(e−128) times e2m1 codes up to 12), 16 bytes of codes
        exponent = np.full((*shape[:-1], blocks, 1), round(127 - np.log2(5.8 * np.sqrt(fan_in))), np.uint8)
        data = np.concatenate([exponent, rng.integers(0, 256, (*shape[:-1], blocks, 16), dtype=np.uint8)], axis=-1)
    else:  # Q4_0: a float16 scale d, 16 bytes of codes q, values d·(q − 8)
        scale = np.full((*shape[:-1], blocks, 1), 1 / (4.6 * np.sqrt(fan_in)), np.float16).view(np.uint8)
        data = np.concatenate([scale, rng.integers(0, 256, (*shape[:-1], blocks, 16), dtype=np.uint8)], axis=-1)
    return data.reshape(*shape[:-1], -1)


def write_gguf(path: Path, arch: str) -> None:
    s, rng = SHAPES[arch], np.random.default_rng(0)
    d, a, kv, f, e = s["d"], s["heads"] * s["dh"], s["kv"] * s["dh"], s["f"], s["experts"]
    writer = gguf.GGUFWriter(path, arch=arch)
    for field in gguf.GGUFReader(TOKENIZER).fields.values():
        if field.name.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), field.types[0], sub)
    add = {"block_count": s["layers"], "context_length": 131072, "embedding_length": d,
           "feed_forward_length": f, "attention.head_count": s["heads"], "attention.head_count_kv": s["kv"],
           "attention.key_length": s["dh"], "attention.value_length": s["dh"], "expert_count": e,
           "expert_used_count": s["used"], "expert_feed_forward_length": f}
    for key, value in add.items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5 if arch == "gpt-oss" else 1e-6)
    writer.add_float32(f"{arch}.rope.freq_base", 150000.0 if arch == "gpt-oss" else 1e6)
    if arch == "gpt-oss":
        writer.add_uint32("gpt-oss.attention.sliding_window", 128)
        writer.add_string("gpt-oss.rope.scaling.type", "yarn")
        writer.add_float32("gpt-oss.rope.scaling.factor", 32.0)
        writer.add_uint32("gpt-oss.rope.scaling.original_context_length", 4096)
    vocab = len(GGUFFile(TOKENIZER).meta["tokenizer.ggml.tokens"])

    def dense(name: str, shape: tuple[int, ...], fan_in: int = 1) -> None:
        values = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(fan_in))
        writer.add_tensor(name, values if len(shape) > 1 or fan_in > 1 else np.float32(1) + np.float32(0.1) * values)

    dense("token_embd.weight", (vocab, d), d)
    dense("output.weight", (vocab, d), d)
    dense("output_norm.weight", (d,))
    for i in range(s["layers"]):
        b = f"blk.{i}."
        dense(b + "attn_norm.weight", (d,))
        dense(b + ("post_attention_norm.weight" if arch == "gpt-oss" else "ffn_norm.weight"), (d,))
        for name, rows, cols in (("attn_q", a, d), ("attn_k", kv, d), ("attn_v", kv, d), ("attn_output", d, a)):
            dense(f"{b}{name}.weight", (rows, cols), cols)
            if arch == "gpt-oss":
                dense(f"{b}{name}.bias", (rows,), 100)
        dense(b + "ffn_gate_inp.weight", (e, d), d)
        if arch == "gpt-oss":
            dense(b + "attn_sinks.weight", (s["heads"],), 1)
            dense(b + "ffn_gate_inp.bias", (e,), 100)
        else:
            dense(b + "attn_q_norm.weight", (s["dh"],))
            dense(b + "attn_k_norm.weight", (s["dh"],))
        qtype = gguf.GGMLQuantizationType[s["kind"]]
        for name, rows, cols in (("ffn_gate_exps", f, d), ("ffn_up_exps", f, d), ("ffn_down_exps", d, f)):
            writer.add_tensor(f"{b}{name}.weight", random_blocks(s["kind"], (e, rows, cols), cols, rng),
                              raw_dtype=qtype)
            if arch == "gpt-oss":
                dense(f"{b}{name}.bias", (e, rows), 100)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# -- the figures ---------------------------------------------------------------------------------------------
def steps(path: Path, listing: bool) -> tuple[float, list[float], list[float], list[float]]:
    """The Debugger as the TUI drives it, in float32: its quick start, then `complete_round` (the rest of the
    prefill computed for the operator list, in the runner, after the first screen), then each step to the end. A
    step computes its own operator only (a checkpoint's round is listed as computed); with `listing`, the rest of
    each decode round entered is then listed (`complete_round`, in the runner while no key waits), as when the
    keys wait for it; without, never, as when a key is held (every step computes, and the first that uses an
    expert dequantizes it). Returns the seconds of the prefill's listing, of the steps within a round, of the
    steps into a decode round, of the decode rounds' listings."""
    from engine import make_backend
    from engine.loading import open_model
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.debugger.results import EndOfTrace

    scenario = open_model(path, prompt=PROMPT, max_new_tokens=NEW_TOKENS, dtype="float32")
    debugger = Debugger(scenario, make_backend("numpy", "float32"), quick_start=True)
    debugger.subscribe()
    prefill = timed(debugger.complete_round)
    within, entering, listed = [], [], []
    while True:
        was = debugger.history.current.round
        began = time.perf_counter()
        done = isinstance(debugger.step(), EndOfTrace)
        (within if debugger.history.current.round == was else entering).append(time.perf_counter() - began)
        if listing and debugger.round_pending:
            listed.append(timed(debugger.complete_round))
        if done:
            return prefill, within, entering, listed


def timed(work) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def measure(arch: str, folder: Path) -> None:
    from engine.loading import open_model
    from engine.loading.budget import format_size, weight_bytes

    path = folder / f"{arch}-at-size.gguf"
    if not path.exists():
        began = time.perf_counter()
        write_gguf(path, arch)
        print(f"(wrote {path}, {format_size(path.stat().st_size)}, in {time.perf_counter() - began:.0f} s)")
    s = SHAPES[arch]
    label = (f"{arch}: {s['layers']} layers of hidden {s['d']}, {s['experts']} experts of {s['f']} "
             f"({s['used']} per token, {s['kind']})")
    first_screen(label, path, 3.0)
    prefill, within, entering, _ = steps(path, listing=False)
    worst = max(within + entering)
    print(f"  float32: the prefill round listed after the first screen (`complete_round`, in the runner) {prefill:.1f} s;"
          f" a key held (every step computes its operator): {len(within) + len(entering)} steps, the slowest "
          f"{worst:.3f} s {verdict(worst, 0.3)}, the median {statistics.median(within) * 1000:.1f} ms; the "
          f"{len(entering)} into a decode round: {', '.join(f'{t * 1000:.1f}' for t in entering)} ms")
    _, _, entering, listed = steps(path, listing=True)
    print(f"  keys waiting for each decode round's listing (`complete_round`, in the runner after the step into it;"
          f" a key pressed stops it): the steps into a round {', '.join(f'{t * 1000:.1f}' for t in entering)} ms, "
          f"the listings {', '.join(f'{t:.2f}' for t in listed)} s")
    run = json.loads(child(PEAK, str(path), PROMPT, str(NEW_TOKENS)))
    scenario = open_model(path, prompt=PROMPT, max_new_tokens=NEW_TOKENS, dtype="float32")
    dense = weight_bytes(scenario.model, len(scenario.vocab), "float32")
    share = run["peak"] / dense
    total = s["experts"] * s["layers"]
    print(f"  peak memory of opening and running {len(scenario.requests[0].tokens)} tokens + {NEW_TOKENS} new in "
          f"float32 ({run['seconds']:.1f} s): {format_size(run['peak'])}, {share:.2f}× the dense float32 weights "
          f"({format_size(dense)}) {verdict(share, 1.0, '×')}; {run['experts']} of the {total} experts dequantized")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", type=Path, default=Path("/tmp/moe-at-size"))
    parser.add_argument("--only", choices=list(SHAPES))
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    for arch in [args.only] if args.only else SHAPES:
        measure(arch, args.folder)


if __name__ == "__main__":
    main()
