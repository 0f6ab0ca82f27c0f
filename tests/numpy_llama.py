"""A plain NumPy Llama decoder written for the tests from the Hugging Face tensors of a folder, independent
of the engine: [out, in] weights, rotate_half RoPE, grouped-query heads, a preallocated KV cache indexed
by absolute position, greedy decoding. It records every pass through the public `Recorder`, in
TransformerLens's names and meanings (norms: hook_scale, hook_normalized before the affine, hook_out after
it; masked scores as the most negative float64, as TransformerLens writes them).

`faults` switches on one deliberate bug each, to be found by `check --against`:
  "k-cell"        one cell of decode round 3's blocks.1 hook_k is off by 1e-3
  "late-cache"    from decode round 2 on, the new K/V row is written one position late
  "rope-minus-1"  decode rounds rotate with position p − 1
  "kv-head"       query head 3 reads kv head 0 instead of its own group's kv head 1
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from tinyllm_tui import Recorder

MASKED = np.finfo(np.float64).min


class NumpyLlama:
    def __init__(self, folder: Path, faults: tuple[str, ...] = (), max_positions: int = 32):
        self.w = {k: v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
        cfg = json.loads((folder / "config.json").read_text())
        self.heads, self.kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
        self.layers, self.dh, self.eps = cfg["num_hidden_layers"], d // self.heads, cfg["rms_norm_eps"]
        self.theta = cfg["rope_parameters"]["rope_theta"]
        self.faults = faults
        self.cache_k = np.zeros((self.layers, self.kv, max_positions, self.dh))
        self.cache_v = np.zeros_like(self.cache_k)
        self.length = 0  # positions fed so far

    def generate(self, ids: list[int], max_new_tokens: int, rec: Recorder) -> list[int]:
        """Prefill, then decode rounds 1 … max_new_tokens − 1, as the engine's greedy rule runs them."""
        rec.prefill()
        chosen = [self.forward(ids, 0, rec)]
        for round_ in range(1, max_new_tokens):
            rec.decode(round_)
            chosen.append(self.forward([chosen[-1]], round_, rec))
        return chosen

    def forward(self, ids: list[int], round_: int, rec: Recorder) -> int:
        w, t = self.w, len(ids)
        positions = np.arange(self.length, self.length + t)
        x = w["model.embed_tokens.weight"][ids]
        rec.record("hook_embed", x)
        for layer in range(self.layers):
            p, b = f"model.layers.{layer}.", f"blocks.{layer}."
            rec.record(b + "hook_resid_pre", x)
            h = self.rms(x, w[p + "input_layernorm.weight"], b + "ln1", rec)
            attn = self.attention(layer, h, positions, round_, rec)
            rec.record(b + "hook_attn_out", attn)
            mid = x + attn
            rec.record(b + "hook_resid_mid", mid)
            h = self.rms(mid, w[p + "post_attention_layernorm.weight"], b + "ln2", rec)
            gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
            post = gate / (1 + np.exp(-gate)) * up
            mlp = post @ w[p + "mlp.down_proj.weight"].T
            for name, value in (("mlp.hook_pre", gate), ("mlp.hook_pre_linear", up), ("mlp.hook_post", post),
                                ("hook_mlp_out", mlp)):
                rec.record(b + name, value)
            x = mid + mlp
            rec.record(b + "hook_resid_post", x)
        logits = self.rms(x, w["model.norm.weight"], "ln_final", rec) @ w["lm_head.weight"].T
        rec.record("unembed.hook_out", logits)
        self.length += t
        return int(np.argmax(logits[-1]))

    def rms(self, x: np.ndarray, gain: np.ndarray, prefix: str, rec: Recorder) -> np.ndarray:
        scale = np.sqrt((x**2).mean(-1, keepdims=True) + self.eps)
        rec.record(prefix + ".hook_scale", scale)
        rec.record(prefix + ".hook_normalized", x / scale)
        rec.record(prefix + ".hook_out", x / scale * gain)
        return x / scale * gain

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:  # x: [pos, head, dh]
        half = self.dh // 2
        angle = np.outer(positions, self.theta ** (-np.arange(0, self.dh, 2) / self.dh))
        cos, sin = (np.concatenate([f(angle), f(angle)], 1)[:, None] for f in (np.cos, np.sin))
        return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin

    def attention(self, layer: int, h: np.ndarray, positions: np.ndarray, round_: int, rec: Recorder) -> np.ndarray:
        w, p, b, t = self.w, f"model.layers.{layer}.self_attn.", f"blocks.{layer}.attn.", len(positions)
        q, k, v = ((h @ w[f"{p}{n}_proj.weight"].T).reshape(t, -1, self.dh) for n in "qkv")
        if "k-cell" in self.faults and (round_, layer) == (3, 1):
            k[0, 1, 2] += 1e-3
        rotated_at = positions - 1 if "rope-minus-1" in self.faults and round_ > 0 else positions
        rq, rk = self.rope(q, rotated_at), self.rope(k, rotated_at)
        for name, value in (("hook_q", q), ("hook_k", k), ("hook_v", v), ("hook_rot_q", rq), ("hook_rot_k", rk)):
            rec.record(b + name, value)
        rows = positions + 1 if "late-cache" in self.faults and round_ >= 2 else positions
        self.cache_k[layer][:, rows], self.cache_v[layer][:, rows] = rk.transpose(1, 0, 2), v.transpose(1, 0, 2)
        length = self.length + t
        keys, values = self.cache_k[layer][:, :length], self.cache_v[layer][:, :length]  # [kv, S, dh]
        rec.record(b + "cache_k", keys)
        rec.record(b + "cache_v", values)
        group = self.heads // self.kv
        kv_of = [0 if "kv-head" in self.faults and head == 3 else head // group for head in range(self.heads)]
        scores = np.stack([rq[:, head] @ keys[kv_of[head]].T for head in range(self.heads)]) / np.sqrt(self.dh)
        scores = np.where(np.arange(length)[None, None, :] <= positions[None, :, None], scores, MASKED)
        rec.record(b + "hook_attn_scores", scores)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        pattern = e / e.sum(-1, keepdims=True)
        rec.record(b + "hook_pattern", pattern)
        z = np.stack([pattern[head] @ values[kv_of[head]] for head in range(self.heads)], axis=1)  # [pos, head, dh]
        rec.record(b + "hook_z", z)
        return z.reshape(t, -1) @ w[p + "o_proj.weight"].T
