"""A plain NumPy Qwen3.5 text decoder written for the tests from the Hugging Face tensors of a folder, independent
of the engine: [out, in] weights, (1 + w) RMSNorms, every Gated DeltaNet layer run one token at a time (the
recurrent form only, prefill included), a conv cache of K columns as transformers keeps it, gated attention with
partial rotate_half RoPE over a preallocated KV cache, greedy decoding. It records every pass through the public
`Recorder`: the residual stream, the conv and δ of each linear-attention layer, the logits, and after the pass
each linear-attention layer's `recurrent_state` [v_head, d_k, d_v] and `conv_state` [channels, K].

`faults` switches on one deliberate bug each, to be found by `check --against`:
  "conv-not-shifted"  decode round 2 reads its conv window right but keeps it unshifted (the new input is lost)
`zero_read` (layer, value head) zeroes that head's read in every pass; `zero_state` (layer, value head) zeroes that
head's state after the prefill: what the engine's interventions do, written here as plainly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from tinyllm_tui import Recorder


def silu(x):
    return x / (1 + np.exp(-x))


class NumpyQwen35:
    def __init__(self, folder: Path, faults: tuple[str, ...] = (), max_positions: int = 64,
                 zero_read: tuple[int, int] | None = None, zero_state: tuple[int, int] | None = None):
        self.zero_read, self.zero_state = zero_read, zero_state
        self.w = {k.removeprefix("model."): v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
        self.cfg = cfg = json.loads((folder / "config.json").read_text())
        self.faults, self.eps, self.types = faults, cfg["rms_norm_eps"], cfg["layer_types"]
        self.heads, self.kv, self.dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.rot = int(self.dh * cfg["rope_parameters"]["partial_rotary_factor"])
        self.hk, self.hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        self.dk, self.dv, self.kernel = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
        channels = 2 * self.hk * self.dk + self.hv * self.dv
        self.conv = {i: np.zeros((channels, self.kernel)) for i, t in enumerate(self.types) if t == "linear_attention"}
        self.state = {i: np.zeros((self.hv, self.dk, self.dv)) for i in self.conv}
        self.cache = {i: np.zeros((2, self.kv, max_positions, self.dh)) for i, t in enumerate(self.types)
                      if t == "full_attention"}
        self.length = 0

    def generate(self, ids: list[int], max_new_tokens: int, rec: Recorder) -> list[int]:
        rec.prefill()
        chosen = [self.forward(ids, 0, rec)]
        for round_ in range(1, max_new_tokens):
            rec.decode(round_)
            chosen.append(self.forward([chosen[-1]], round_, rec))
        return chosen

    def norm(self, x, gain):
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + self.eps) * (1 + gain)

    def forward(self, ids: list[int], round_: int, rec: Recorder) -> int:
        w, x = self.w, self.w["embed_tokens.weight"][ids]
        rec.record("hook_embed", x)
        for layer, kind in enumerate(self.types):
            p = f"layers.{layer}."
            h = self.norm(x, w[p + "input_layernorm.weight"])
            mixer = self.deltanet(layer, h, round_, rec) if kind == "linear_attention" else self.attention(layer, h)
            x = x + mixer
            h = self.norm(x, w[p + "post_attention_layernorm.weight"])
            x = x + (silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)) \
                @ w[p + "mlp.down_proj.weight"].T
            rec.record(f"blocks.{layer}.hook_resid_post", x)
        logits = self.norm(x, w["norm.weight"]) @ w["embed_tokens.weight"].T
        rec.record("unembed.hook_out", logits)
        for layer in self.conv:
            rec.record(f"blocks.{layer}.linear_attn.recurrent_state", self.state[layer])
            rec.record(f"blocks.{layer}.linear_attn.conv_state", self.conv[layer])
        self.length += len(ids)
        return int(np.argmax(logits[-1]))

    def deltanet(self, layer: int, h: np.ndarray, round_: int, rec: Recorder) -> np.ndarray:
        w, p, b = self.w, f"layers.{layer}.linear_attn.", f"blocks.{layer}.linear_attn."
        qkv, z = h @ w[p + "in_proj_qkv.weight"].T, h @ w[p + "in_proj_z.weight"].T
        beta = 1 / (1 + np.exp(-(h @ w[p + "in_proj_b.weight"].T)))
        g = -np.exp(w[p + "A_log"]) * np.log1p(np.exp(h @ w[p + "in_proj_a.weight"].T + w[p + "dt_bias"]))
        taps = w[p + "conv1d.weight"][:, 0, :]  # [channels, K]
        convs, deltas, reads = [], [], []
        for t in range(len(h)):
            window = np.concatenate([self.conv[layer][:, 1:], qkv[t][:, None]], axis=1)  # the last K inputs
            convs.append(silu((window * taps).sum(1)))
            if not ("conv-not-shifted" in self.faults and round_ == 2):
                self.conv[layer] = window
            keys = self.hk * self.dk
            q, k = (c.reshape(self.hk, self.dk) for c in (convs[-1][:keys], convs[-1][keys:2 * keys]))
            q, k = (a / np.sqrt((a * a).sum(-1, keepdims=True) + 1e-6) for a in (q, k))
            serve = np.arange(self.hv) // (self.hv // self.hk)
            q, k, v = q[serve] / np.sqrt(self.dk), k[serve], convs[-1][2 * keys:].reshape(self.hv, self.dv)
            s = self.state[layer] * np.exp(g[t])[:, None, None]
            delta = beta[t][:, None] * (v - np.einsum("hkv,hk->hv", s, k))
            self.state[layer] = s + k[:, :, None] * delta[:, None, :]
            deltas.append(delta.reshape(-1))
            reads.append(np.einsum("hkv,hk->hv", self.state[layer], q))
        rec.record(b + "hook_conv", np.stack(convs))
        rec.record(b + "hook_delta", np.stack(deltas))
        if round_ == 0 and self.zero_state is not None and self.zero_state[0] == layer:
            self.state[layer][self.zero_state[1]] = 0.0
        o = np.stack(reads)  # [T, v_head, d_v]
        if self.zero_read is not None and self.zero_read[0] == layer:
            o[:, self.zero_read[1]] = 0.0
        o = o / np.sqrt((o**2).mean(-1, keepdims=True) + self.eps) * w[p + "norm.weight"]
        o = o * silu(z.reshape(o.shape))
        return o.reshape(len(h), -1) @ w[p + "out_proj.weight"].T

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:  # [T, head, dh]: the first `rot` features
        r, half = self.rot, self.rot // 2
        angle = np.outer(positions, self.cfg["rope_parameters"]["rope_theta"] ** (-np.arange(0, r, 2) / r))
        cos, sin = (np.concatenate([f(angle), f(angle)], 1)[:, None] for f in (np.cos, np.sin))
        turned = x[..., :r] * cos + np.concatenate([-x[..., half:r], x[..., :half]], -1) * sin
        return np.concatenate([turned, x[..., r:]], -1)

    def attention(self, layer: int, h: np.ndarray) -> np.ndarray:
        w, p, t = self.w, f"layers.{layer}.self_attn.", len(h)
        both = (h @ w[p + "q_proj.weight"].T).reshape(t, self.heads, 2 * self.dh)
        q, gate = both[..., :self.dh], both[..., self.dh:]
        q = self.norm(q, w[p + "q_norm.weight"])
        k = self.norm((h @ w[p + "k_proj.weight"].T).reshape(t, self.kv, self.dh), w[p + "k_norm.weight"])
        v = (h @ w[p + "v_proj.weight"].T).reshape(t, self.kv, self.dh)
        positions = np.arange(self.length, self.length + t)
        q, k = self.rope(q, positions), self.rope(k, positions)
        cache, end = self.cache[layer], self.length + t
        cache[0][:, positions], cache[1][:, positions] = k.transpose(1, 0, 2), v.transpose(1, 0, 2)
        out = []
        for head in range(self.heads):
            keys, values = cache[0][head * self.kv // self.heads, :end], cache[1][head * self.kv // self.heads, :end]
            scores = q[:, head] @ keys.T / np.sqrt(self.dh)
            scores = np.where(np.arange(end)[None, :] <= positions[:, None], scores, -np.inf)
            e = np.exp(scores - scores.max(-1, keepdims=True))
            out.append((e / e.sum(-1, keepdims=True)) @ values)
        gated = np.stack(out, axis=1) * (1 / (1 + np.exp(-gate)))
        return gated.reshape(t, -1) @ w[p + "o_proj.weight"].T
