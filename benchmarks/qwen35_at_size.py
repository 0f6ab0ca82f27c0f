"""Issue 25's at-size figures for a Qwen3.5-0.8B-shaped GGUF (tools/make_qwen35_gguf.py), each against its goal.

    .venv/bin/python benchmarks/qwen35_at_size.py [/tmp/qwen35-0.8b.gguf]

Timed as benchmarks/checkpoint_speed.py times the 0.5B file (a fresh process per run, medians, VmHWM peaks): the
first screen, a step with the 248 320-wide logits on screen, and `run` of a 5-token prompt + 4 new tokens in
float32 beside a baseline of gguf-py's dequantization of every tensor plus a plain NumPy Qwen3.5 forward of the
same passes, written here (token by token through each Gated DeltaNet layer, the value heads in the file's tiled
order: value head j reads key head j mod k_heads), whose greedy ids are printed beside the engine's.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.checkpoint_speed import (ENV, NEW_TOKENS, PROMPT, RUNS, first_screen, peak_memory,  # noqa: E402
                                         run_against_baseline, step_seconds, verdict)

BASELINE = """
import json, sys, time
launched = float(sys.argv[1])
from benchmarks.qwen35_at_size import plain_run
result = plain_run(sys.argv[2], [int(i) for i in sys.argv[3].split(",")], int(sys.argv[4]))
print(json.dumps(result | {"seconds": time.time() - launched}))
"""


def plain_run(path: str, ids: list[int], new_tokens: int) -> dict:
    """Dequantize every tensor (float32), then greedy decoding; seconds of both."""
    from gguf.quants import dequantize

    from engine.loading.gguf_file import GGUFFile

    file = GGUFFile(Path(path))
    began = time.perf_counter()
    weights = {name: dequantize(file.tensor_bytes(info), info.kind).reshape(info.shape)
               for name, info in file.tensors.items()}
    dequantized = time.perf_counter() - began
    chosen = Qwen35(weights, file.meta).greedy(ids, new_tokens)
    return {"dequantize": dequantized, "forward": time.perf_counter() - began - dequantized, "ids": chosen,
            "peak": peak_memory()}


def silu(x):
    return x / (1 + np.exp(-x))


class Qwen35:
    """Float32 throughout, as the engine's float32 run; the file's gains are 1 + w, A is −exp(A_log)."""

    def __init__(self, w: dict[str, np.ndarray], meta: dict):
        get = lambda key: meta[f"qwen35.{key}"]  # noqa: E731
        self.w, self.layers, self.eps = w, get("block_count"), get("attention.layer_norm_rms_epsilon")
        self.heads, self.kv, self.dh = get("attention.head_count"), get("attention.head_count_kv"), get("attention.key_length")
        self.rot, self.theta = get("rope.dimension_count"), get("rope.freq_base")
        self.kh, self.vh, self.dk = get("ssm.group_count"), get("ssm.time_step_rank"), get("ssm.state_size")
        self.dv, self.recurrent = get("ssm.inner_size") // self.vh, [bool(r) for r in get("attention.recurrent_layers")]
        channels, kernel = w["blk.0.ssm_conv1d.weight"].shape
        self.window = [np.zeros((kernel - 1, channels), np.float32) for _ in range(self.layers)]
        self.state = [np.zeros((self.vh, self.dk, self.dv), np.float32) for _ in range(self.layers)]
        self.keys, self.values, self.start = [None] * self.layers, [None] * self.layers, 0

    def rms(self, x, gain):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(self.eps)) * gain

    def greedy(self, ids: list[int], new_tokens: int) -> list[int]:
        chosen, feed = [], list(ids)
        for _ in range(new_tokens):
            x = self.w["token_embd.weight"][feed]
            for i in range(self.layers):
                b = f"blk.{i}."
                h = self.rms(x, self.w[b + "attn_norm.weight"])
                x = x + (self.deltanet(i, h) if self.recurrent[i] else self.attention(i, h))
                h = self.rms(x, self.w[b + "post_attention_norm.weight"])
                gate, up = h @ self.w[b + "ffn_gate.weight"].T, h @ self.w[b + "ffn_up.weight"].T
                x = x + (silu(gate) * up) @ self.w[b + "ffn_down.weight"].T
            logits = self.w["token_embd.weight"] @ self.rms(x[-1], self.w["output_norm.weight"])
            assert logits.dtype == np.float32
            chosen.append(int(np.argmax(logits)))
            self.start, feed = self.start + len(feed), chosen[-1:]
        return chosen

    def deltanet(self, i: int, h: np.ndarray) -> np.ndarray:
        w, b, t = self.w, f"blk.{i}.", len(h)
        qkv, z = h @ w[b + "attn_qkv.weight"].T, h @ w[b + "attn_gate.weight"].T
        beta = 1 / (1 + np.exp(-(h @ w[b + "ssm_beta.weight"].T)))
        g = w[b + "ssm_a"] * np.logaddexp(np.float32(0), h @ w[b + "ssm_alpha.weight"].T + w[b + "ssm_dt.bias"])
        taps = w[b + "ssm_conv1d.weight"]  # [channels, K]
        full = np.concatenate([self.window[i], qkv])
        self.window[i] = full[-(taps.shape[1] - 1):]
        conv = silu(sum(full[j:j + t] * taps[:, j] for j in range(taps.shape[1])))
        keys = self.kh * self.dk
        q, k = (conv[:, part].reshape(t, self.kh, self.dk) for part in (slice(0, keys), slice(keys, 2 * keys)))
        q, k = (a / np.sqrt((a * a).sum(-1, keepdims=True) + np.float32(1e-6)) for a in (q, k))
        serve = np.arange(self.vh) % self.kh  # the file's tiled order
        q, k, v = q[:, serve] / np.float32(math.sqrt(self.dk)), k[:, serve], conv[:, 2 * keys:].reshape(t, self.vh, self.dv)
        reads = []
        for step in range(t):
            s = self.state[i] * np.exp(g[step])[:, None, None]
            delta = beta[step][:, None] * (v[step] - np.einsum("hkv,hk->hv", s, k[step]))
            self.state[i] = s + k[step][:, :, None] * delta[:, None, :]
            reads.append(np.einsum("hkv,hk->hv", self.state[i], q[step]))
        o = self.rms(np.stack(reads), w[b + "ssm_norm.weight"]) * silu(z.reshape(t, self.vh, self.dv))
        return o.reshape(t, -1) @ w[b + "ssm_out.weight"].T

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        r = self.rot
        inv = (1.0 / self.theta ** (np.arange(0, r, 2) / r)).astype(np.float32)
        angle = np.concatenate([positions[:, None].astype(np.float32) * inv] * 2, axis=-1)[:, None, :]
        part = x[..., :r]
        turned = np.concatenate([-part[..., r // 2:], part[..., :r // 2]], axis=-1)
        return np.concatenate([part * np.cos(angle) + turned * np.sin(angle), x[..., r:]], axis=-1)

    def attention(self, i: int, h: np.ndarray) -> np.ndarray:
        w, b, t, dh = self.w, f"blk.{i}.", len(h), self.dh
        both = (h @ w[b + "attn_q.weight"].T).reshape(t, self.heads, 2 * dh)
        q, gate = both[..., :dh], both[..., dh:]
        k = (h @ w[b + "attn_k.weight"].T).reshape(t, self.kv, dh)
        v = (h @ w[b + "attn_v.weight"].T).reshape(t, self.kv, dh)
        positions = np.arange(self.start, self.start + t)
        q = self.rope(self.rms(q, w[b + "attn_q_norm.weight"]), positions)
        k = self.rope(self.rms(k, w[b + "attn_k_norm.weight"]), positions)
        self.keys[i] = k if self.keys[i] is None else np.concatenate([self.keys[i], k])
        self.values[i] = v if self.values[i] is None else np.concatenate([self.values[i], v])
        kk, vv = (np.repeat(a, self.heads // self.kv, axis=1) for a in (self.keys[i], self.values[i]))
        scores = np.einsum("thd,shd->hts", q, kk) / np.float32(math.sqrt(dh))
        scores[:, np.arange(kk.shape[0])[None, :] > positions[:, None]] = -np.inf
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        mixed = np.einsum("hts,shd->thd", scores / scores.sum(-1, keepdims=True), vv)
        return (mixed / (1 + np.exp(-gate))).reshape(t, -1) @ w[b + "attn_output.weight"].T


def main(path: Path) -> None:
    from engine.loading import open_model
    from engine.loading.budget import format_size, weight_bytes

    if not path.exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_qwen35_gguf.py"), str(path)], check=True, env=ENV)
    first_screen("Qwen3.5-0.8B shape, Q4_K-style GGUF, float64", path, 3.0)
    scenario = open_model(path, prompt=PROMPT, max_new_tokens=NEW_TOKENS, dtype="float32")
    step = step_seconds(path)
    print(f"  a step with the 248 320-wide logits on screen: {step:.3f} s {verdict(step, 0.3)}")
    ours, base = run_against_baseline(path, scenario.requests[0].tokens, BASELINE)
    print(f"  greedy ids: ours {ours['tail']!r}; plain NumPy {base['ids']}")
    weights = weight_bytes(scenario.model, len(scenario.vocab), "float32")
    share = ours["peak"] / weights
    print(f"  peak memory of run (the highest of its {RUNS}) {format_size(ours['peak'])}, float32 weights "
          f"{format_size(weights)}: {share:.2f}× {verdict(share, 1.5, '×')} (the plain baseline peaks at "
          f"{format_size(base['peak'])})")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qwen35-0.8b.gguf"))
