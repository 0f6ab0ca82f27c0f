"""Engine speed and memory: traced vs untraced, cached decode vs full recompute (medians, ratios).

    python benchmarks/engine_speed.py [--repeats 3]

The untraced reference is a plain NumPy pre-LN decoder written here independently; its
logits must equal the engine's, so the comparison is between two correct computations.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from engine import Session
from engine.parameters import parameter_shapes
from engine.scenario import Scenario
from engine.spec import DecodeRule, ModelSpec, NormSpec, Request, Vocab

D, LAYERS, HEADS, FF, VOCAB, PROMPT, NEW = 256, 4, 8, 1024, 2000, 64, 32


def scenario() -> Scenario:
    model = ModelSpec(d_model=D, n_layers=LAYERS, n_heads=HEADS, d_head=D // HEADS, d_ff=FF,
                      norm=NormSpec("layernorm", "pre", 1e-5, False), final_norm=True, ffn="gelu_tanh",
                      tied_unembed=True)
    rng = np.random.default_rng(0)
    weights = {n: rng.normal(0, 1 / np.sqrt(s[0]), s) for n, s in parameter_shapes(model, VOCAB).items()}
    prompt = tuple(int(t) for t in rng.integers(0, VOCAB, PROMPT))
    return Scenario("<bench>", "bench", Vocab(tuple(map(str, range(VOCAB)))), model, weights,
                    (Request(prompt, NEW),), DecodeRule(max_new_tokens=NEW))


def reference_decode(s: Scenario) -> list[int]:
    """Untraced greedy decode with a KV cache, in plain NumPy."""
    w, dh = s.weights, D // HEADS
    ln = lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    gelu = lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    caches = [(np.zeros((0, D)), np.zeros((0, D))) for _ in range(LAYERS)]
    tokens, out = list(s.requests[0].tokens), []
    for _ in range(NEW):
        new = tokens if not out else tokens[-1:]
        past = caches[0][0].shape[0]
        x = w["embed"][new]
        for layer in range(LAYERS):
            b = f"blocks.{layer}"
            h = ln(x)
            q, k, v = (h @ w[f"{b}.attn.w{n}"] for n in "qkv")
            keys, values = (np.concatenate([c, n]) for c, n in zip(caches[layer], (k, v)))
            caches[layer] = (keys, values)
            mask = np.arange(keys.shape[0])[None, :] <= (past + np.arange(len(new)))[:, None]
            z = []
            for head in range(HEADS):
                part = slice(head * dh, (head + 1) * dh)
                scores = np.where(mask, q[:, part] @ keys[:, part].T / np.sqrt(dh), -np.inf)
                p = np.exp(scores - scores.max(-1, keepdims=True))
                z.append((p / p.sum(-1, keepdims=True)) @ values[:, part])
            x = x + np.concatenate(z, axis=1) @ w[f"{b}.attn.wo"]
            x = x + gelu(ln(x) @ w[f"{b}.mlp.w_in"]) @ w[f"{b}.mlp.w_out"]
        token = int(np.argmax(ln(x)[-1] @ w["embed"].T))
        out.append(token)
        tokens.append(token)
    return out


def timed(function, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def run_session(s: Scenario, mode: str, keep: bool):
    session = Session(s, mode=mode)
    states = [state for state in session.steps()] if keep else sum(1 for _ in session.steps())
    return session.results[0].generated, states


def peak_mib(function) -> float:
    tracemalloc.start()
    function()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    s = scenario()
    reference_time, reference_tokens = timed(lambda: reference_decode(s), repeats)
    traced_time, (traced_tokens, _) = timed(lambda: run_session(s, "cached", keep=False), repeats)
    full_time, (full_tokens, _) = timed(lambda: run_session(s, "full", keep=False), repeats)
    assert list(traced_tokens) == reference_tokens == list(full_tokens), "the three decoders disagree"
    kept = peak_mib(lambda: run_session(s, "cached", keep=True))
    streamed = peak_mib(lambda: run_session(s, "cached", keep=False))
    weight_mib = sum(a.nbytes for a in s.weights.values()) / 2**20
    print(f"model: d={D}, {LAYERS} layers, {HEADS} heads, ffn {FF}, vocab {VOCAB}; prompt {PROMPT}, {NEW} new tokens; "
          f"weights {weight_mib:.1f} MiB (float64)")
    print(f"untraced NumPy reference: {reference_time:.3f} s; engine, cached and traced: {traced_time:.3f} s "
          f"(traced/untraced {traced_time / reference_time:.2f}×)")
    print(f"engine, full recompute every round: {full_time:.3f} s (full/cached {full_time / traced_time:.2f}×)")
    print(f"peak memory keeping every OpState: {kept:.1f} MiB; streaming them: {streamed:.1f} MiB "
          f"(ratio {kept / streamed:.2f}×)")


if __name__ == "__main__":
    main()
