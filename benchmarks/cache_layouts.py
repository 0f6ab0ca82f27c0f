"""KV-cache layouts side by side: what each stores and what a traced decode step costs.

    python benchmarks/cache_layouts.py [--prompt 64] [--new 64]

A random Llama-shaped model (d 64, 4 layers, 8 heads over 2 kv heads, float64): one request through
prefill and `--new` cached decode rounds in each layout. Printed per layout: the bytes the caches
hold at the end (all layers, K and V; a paged pool counted whole; quantized: codes and scales), the
median wall time of a decode round, and the largest |Δ| of its logits against a contiguous cache with
the same window (for a quantized cache: engine.compare.exact's report, up to a round whose choice differs).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from engine import Session  # noqa: E402
from engine.caches import CacheSpec, Layout, PagedCache, Quantize  # noqa: E402
from engine.compare.exact import against_exact  # noqa: E402
from engine.parameters import parameter_shapes  # noqa: E402
from engine.scenario import Scenario  # noqa: E402
from engine.spec import DecodeRule, ModelSpec, NormSpec, Positions, Request, Vocab  # noqa: E402

LAYOUTS = {
    "contiguous": CacheSpec(),
    "ring w16": CacheSpec(Layout.RING, window=16),
    "paged ×16": CacheSpec(Layout.PAGED, block_size=16),
    "int8 per head": CacheSpec(quantize=Quantize.INT8),
    "float8 e4m3": CacheSpec(quantize=Quantize.FLOAT8_E4M3),
}


def scenario(prompt: int, new: int) -> Scenario:
    model = ModelSpec(d_model=64, n_layers=4, n_heads=8, d_head=8, d_ff=128, norm=NormSpec(kind="rmsnorm", affine=True),
                      final_norm=True, positions=Positions.ROPE, kv_heads=2, tied_unembed=False)
    rng = np.random.default_rng(0)
    vocab = 256
    weights = {name: rng.normal(0.0, 1.0 / np.sqrt(shape[0]), shape) if len(shape) == 2 else np.ones(shape)
               for name, shape in parameter_shapes(model, vocab).items()}
    tokens = tuple(int(t) for t in rng.integers(0, vocab, prompt))
    return Scenario("<bench>", "bench", Vocab(tuple(f"t{i}" for i in range(vocab))), model, weights,
                    (Request(tokens, new),), DecodeRule(max_new_tokens=new, stop_at_eos=False))


def stored_bytes(caches) -> int:
    total = 0
    for cache in caches:
        if isinstance(cache, PagedCache):
            total += sum(int(k.nbytes) + int(v.nbytes) for k, v in zip(cache.pool.k, cache.pool.v))
        else:
            total += cache.nbytes
    return total


def trace(scenario: Scenario) -> tuple[int, float, dict[int, np.ndarray]]:
    """The caches' bytes at the end, the median decode round in seconds, and each round's last logits row."""
    rounds, logits, last, start = [], {}, None, None
    for state in Session(scenario).steps():
        if state.round and state.name == "hook_embed":
            start = time.perf_counter()
        if state.name == "unembed.hook_out":
            logits[state.round] = np.asarray(state.values)[-1]
        if state.name == "sample.hook_choice" and start is not None:
            rounds.append(time.perf_counter() - start)
        last = state
    return stored_bytes(last.caches), statistics.median(rounds), logits


def run(base: Scenario, cache: CacheSpec) -> tuple[int, float, float]:
    laid_out = dataclasses.replace(base, cache=cache, model=dataclasses.replace(base.model, sliding_window=cache.window))
    size, median, logits = trace(laid_out)
    if cache.quantize is not Quantize.NONE:
        return size, median, max(row.logits_error for row in against_exact(laid_out))
    exact = trace(dataclasses.replace(laid_out, cache=CacheSpec()))[2]
    return size, median, max(float(np.max(np.abs(logits[r] - exact[r]))) for r in logits)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=64)
    args = parser.parse_args()
    base = scenario(args.prompt, args.new)
    run(base, CacheSpec())  # warm up
    print(f"prompt {args.prompt}, {args.new} decode rounds; d 64, 4 layers, 8 heads / 2 kv heads, float64")
    print(f"{'layout':<16}{'cache bytes':>12}{'ms / round':>12}{'max |Δ logits|':>16}")
    for name, cache in LAYOUTS.items():
        size, median, gap = run(base, cache)
        print(f"{name:<16}{size:>12,}{median * 1e3:>12.2f}{gap:>16.3e}")


if __name__ == "__main__":
    main()
