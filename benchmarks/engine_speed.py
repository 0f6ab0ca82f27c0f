"""Engine speed and memory: traced vs untraced, cached decode vs full recompute (medians, ratios).

    python benchmarks/engine_speed.py [--repeats 7] [--only small|gpt2]

small: the untraced reference is a plain NumPy pre-LN decoder written here independently; its
logits must equal the engine's, so the comparison is between two correct computations.
gpt2: a GPT-2-small-shaped random model (float32) built in memory: cached decode ms/token
through a Session (traced: an OpState per operator) and through the bare forward pass
(untraced), the untraced time against the memory-bandwidth floor (weight bytes read per
token over the bandwidth np.copyto reaches), and peak memory keeping every state or none.
Everything runs under the garbage-collector setting the program itself uses (engine.gctuning).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

# One BLAS thread: on a shared machine a threaded BLAS waits for descheduled partners (5× slower
# here), and the bandwidth floor below is measured with one thread too.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from engine import Session, make_backend  # noqa: E402
from engine.decoding import choose
from engine.gctuning import tune_for_tracing
from engine.parameters import parameter_shapes
from engine.scenario import Scenario
from engine.spec import DecodeRule, ModelSpec, NormSpec, Request, Vocab

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from make_big_model import random_weights, spec  # noqa: E402  (one GPT-2-shaped random model)

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


def reference_decode(s: Scenario, times: list[float] | None = None) -> list[int]:
    """Untraced greedy decode with a KV cache, in plain NumPy: pre-LN, GELU-tanh, tied head, and
    GPT-2's gains, biases and learned positions when the weights have them. `times` gets the CPU
    time of every choice."""
    w, spec = s.weights, s.model  # Python floats below: a NumPy float64 scalar would turn float32 into float64
    d, heads, dh = spec.d_model, spec.n_heads, spec.d_head
    one, zero = np.ones(d, dtype=w["embed"].dtype), np.zeros(d, dtype=w["embed"].dtype)

    def ln(x, prefix):
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return x * w.get(f"{prefix}.w", one) + w.get(f"{prefix}.b", zero)

    def linear(x, name, bias):
        return x @ w[name] + w[bias] if bias in w else x @ w[name]

    gelu = lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    caches = [(np.zeros((0, d), w["embed"].dtype),) * 2 for _ in range(spec.n_layers)]
    tokens, out = list(s.requests[0].tokens), []
    for _ in range(s.requests[0].max_new_tokens):
        new = tokens if not out else tokens[-1:]
        past = caches[0][0].shape[0]
        x = w["embed"][new] + (w["pos_embed"][past : past + len(new)] if "pos_embed" in w else 0)
        for layer in range(spec.n_layers):
            b = f"blocks.{layer}"
            h = ln(x, f"{b}.ln1")
            q, k, v = (linear(h, f"{b}.attn.w{n}", f"{b}.attn.b{n}") for n in "qkv")
            keys, values = (np.concatenate([c, n]) for c, n in zip(caches[layer], (k, v)))
            caches[layer] = (keys, values)
            mask = np.arange(keys.shape[0])[None, :] <= (past + np.arange(len(new)))[:, None]
            z = []
            for head in range(heads):
                part = slice(head * dh, (head + 1) * dh)
                scores = np.where(mask, q[:, part] @ keys[:, part].T / math.sqrt(dh), -np.inf)
                p = np.exp(scores - scores.max(-1, keepdims=True))
                z.append((p / p.sum(-1, keepdims=True)) @ values[:, part])
            x = x + linear(np.concatenate(z, axis=1), f"{b}.attn.wo", f"{b}.attn.bo")
            x = x + linear(gelu(linear(ln(x, f"{b}.ln2"), f"{b}.mlp.w_in", f"{b}.mlp.b_in")),
                           f"{b}.mlp.w_out", f"{b}.mlp.b_out")
        token = int(np.argmax(ln(x, "ln_final")[-1] @ w["embed"].T))
        out.append(token)
        tokens.append(token)
        if times is not None:
            times.append(time.process_time())
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


def small(repeats: int) -> None:
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


GPT2_VOCAB, GPT2_PROMPT, GPT2_NEW = 50257, 32, 16


def gpt2_scenario() -> Scenario:
    model = spec(768, 12, 12, max_positions=1024)
    prompt = tuple(int(t) for t in np.random.default_rng(1).integers(0, GPT2_VOCAB, GPT2_PROMPT))
    return Scenario("<gpt2>", "gpt2-small shape", Vocab(tuple(map(str, range(GPT2_VOCAB)))), model,
                    random_weights(model, GPT2_VOCAB, "float32"), (Request(prompt, GPT2_NEW),),
                    DecodeRule(max_new_tokens=GPT2_NEW))


def decode_ms_per_token(choice_times: list[float]) -> float:
    """Between consecutive choices lies one cached decode round: feed one token, choose the next.
    Times are CPU time of this process (one BLAS thread), so other work on a shared machine
    does not count."""
    return 1000 * (choice_times[-1] - choice_times[0]) / (len(choice_times) - 1)


def traced_decode(session: Session) -> tuple[float, list[int]]:
    """Every operator recorded and kept, as the debugger's history keeps them."""
    history, times = [], []
    for state in session.steps():
        history.append(state)
        if state.kind == "choice":
            times.append(time.process_time())
    return decode_ms_per_token(times), list(session.results[0].generated)


def untraced_decode(session: Session) -> tuple[float, list[int]]:
    """The same forward pass and decode rule, driven bare: no OpState, no labels."""
    model, rule, request = session.model, session.scenario.decode, session.scenario.requests[0]
    caches, fed, new, chosen, times = model.empty_caches(), 0, list(request.tokens), [], []
    rng = np.random.default_rng([rule.seed, 0])
    while len(chosen) < request.max_new_tokens:
        logits = drain(model.forward(new, list(range(fed, fed + len(new))), caches))
        chosen.append(drain(choose(model.xp, logits, rule, rng)))
        times.append(time.process_time())
        fed, new = fed + len(new), chosen[-1:]
    return decode_ms_per_token(times), chosen


def drain(stream):
    while True:
        try:
            next(stream)
        except StopIteration as done:
            return done.value


def cpu_time(function) -> float:
    began = time.process_time()
    function()
    return time.process_time() - began


def copy_bandwidth(nbytes: int = 2**28, repeats: int = 5) -> float:
    """Bytes per second np.copyto moves (each byte read once and written once: 2 × nbytes)."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    return 2 * nbytes / statistics.median(cpu_time(lambda: np.copyto(dst, src)) for _ in range(repeats))


def products_alone_ms(weights: dict) -> float:
    """One decode row through every weight matrix and the tied head, nothing else: the least any
    NumPy decoder storing weights [in, out] (as the engine and checkpoints do) can take per token."""
    matrices = [w for name, w in weights.items() if w.ndim == 2 and name not in ("embed", "pos_embed")]
    rows = {n: np.ones((1, n), dtype=weights["embed"].dtype) for n in {w.shape[0] for w in matrices}}

    def products():
        for w in matrices:
            rows[w.shape[0]] @ w
        np.vecdot(weights["embed"], rows[weights["embed"].shape[1]])

    return 1000 * statistics.median(cpu_time(products) for _ in range(5))


def plain_decode(s: Scenario) -> tuple[float, list[int]]:
    times = []
    tokens = reference_decode(s, times)
    return decode_ms_per_token(times), tokens


def peak_after_setup_mib(s: Scenario, backend, keep: bool) -> float:
    session = Session(s, backend)  # the weights are converted before measuring
    tracemalloc.start()
    kept = list(session.steps()) if keep else sum(1 for _ in session.steps())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del kept
    return peak / 2**20


def gpt2(repeats: int) -> None:
    s, backend = gpt2_scenario(), make_backend("numpy", "float32")
    session = Session(s, backend)
    runs = [(traced_decode(session), untraced_decode(session), plain_decode(s)) for _ in range(repeats)]  # interleaved
    assert all(t[1] == u[1] == p[1] for t, u, p in runs), "traced, untraced and plain decoders disagree"
    traced_ms, untraced_ms, plain_ms = (statistics.median(run[i][0] for run in runs) for i in range(3))
    weights = session.model.weights
    per_token = sum(w.nbytes for name, w in weights.items() if name != "pos_embed")  # one position row is read
    floor_ms = 1000 * per_token / copy_bandwidth()
    products_ms = products_alone_ms(weights)
    total = sum(w.nbytes for w in weights.values()) / 2**20
    print(f"gpt2-small shape: 12 layers, d 768, 12 heads, ffn 3072, vocab {GPT2_VOCAB}, float32; "
          f"prompt {GPT2_PROMPT}, {GPT2_NEW} new tokens; weights {total:.0f} MiB")
    print(f"cached decode: traced {traced_ms:.1f} ms/token, untraced {untraced_ms:.1f} ms/token "
          f"(traced/untraced {traced_ms / untraced_ms:.3f}×; goal ≤ 1.05×)")
    print(f"bandwidth floor {floor_ms:.1f} ms/token ({per_token / 2**20:.0f} MiB per token over np.copyto); "
          f"untraced/floor {untraced_ms / floor_ms:.2f}× (goal ≤ 1.1×)")
    print(f"for comparison: a plain NumPy decoder (this file) {plain_ms:.1f} ms/token ({plain_ms / floor_ms:.2f}× the "
          f"floor; untraced engine/plain {untraced_ms / plain_ms:.2f}×); the weight matrix-vector products alone "
          f"{products_ms:.1f} ms ({products_ms / floor_ms:.2f}× the floor)")
    kept, streamed = peak_after_setup_mib(s, backend, True), peak_after_setup_mib(s, backend, False)
    print(f"peak memory beyond the weights ({total:.0f} MiB): keeping every OpState {kept:.0f} MiB; "
          f"streaming (cache + activations) {streamed:.0f} MiB")


def main() -> None:
    tune_for_tracing()
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)  # the traced/untraced ratio moves by ±2% at 3
    parser.add_argument("--only", choices=("small", "gpt2"))
    args = parser.parse_args()
    if args.only != "gpt2":
        small(args.repeats)
    if args.only != "small":
        gpt2(args.repeats)


if __name__ == "__main__":
    main()
