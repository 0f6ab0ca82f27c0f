"""LFM2 written from its equations in NumPy (not the engine's code), recording a greedy generation as a porter's
implementation would: every layer's output, the conv caches in transformers' layout ([channels, K]: the last K
inputs of B·x) and the logits after each pass, under TransformerLens's names through tinyllm_tui.Recorder.
`plant=(round, layer)` writes that pass's new conv input over the cache's newest column instead of shifting it
(the conv state not shifted), for `check --against` to find."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from tinyllm_tui import Recorder


def rms(x, gain, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gain


def rope(x, positions, theta):  # (T, heads, dh), half-split
    dh = x.shape[-1]
    angle = np.asarray(positions)[:, None] * theta ** (-np.arange(0, dh, 2) / dh)[None, :]
    cos, sin = np.cos(np.concatenate([angle, angle], 1))[:, None], np.sin(np.concatenate([angle, angle], 1))[:, None]
    return x * cos + np.concatenate([-x[..., dh // 2:], x[..., :dh // 2]], -1) * sin


class Lfm2:
    def __init__(self, folder: Path):
        self.w = {k.removeprefix("model."): v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
        self.c = json.loads((folder / "config.json").read_text())
        self.kernel, self.eps = self.c["conv_L_cache"], self.c["norm_eps"]
        d = self.c["hidden_size"]
        self.conv = {i: np.zeros((d, self.kernel)) for i, t in enumerate(self.c["layer_types"]) if t == "conv"}
        self.keys: dict[int, list] = {i: [] for i, t in enumerate(self.c["layer_types"]) if t != "conv"}
        self.values: dict[int, list] = {i: [] for i in self.keys}
        self.fed = 0

    def short_conv(self, layer, h, planted):
        p = f"layers.{layer}.conv."
        b, c, x = np.split(h @ self.w[p + "in_proj.weight"].T, 3, axis=1)
        bx = b * x
        taps = self.w[p + "conv.weight"][:, 0, :]  # (channels, K)
        rows = np.concatenate([self.conv[layer].T, bx])  # the K cached inputs, then the new ones
        out = np.stack([(rows[t + 1:t + 1 + self.kernel] * taps.T).sum(0) for t in range(len(bx))])
        if planted:  # the bug: the newest column overwritten, nothing shifted
            self.conv[layer] = self.conv[layer].copy()
            self.conv[layer][:, -1] = bx[-1]
        else:
            self.conv[layer] = rows[-self.kernel:].T
        return (c * out) @ self.w[p + "out_proj.weight"].T

    def attention(self, layer, h, positions):
        p, heads, kv = f"layers.{layer}.self_attn.", self.c["num_attention_heads"], self.c["num_key_value_heads"]
        dh, theta, t = h.shape[1] // heads, self.c["rope_parameters"]["rope_theta"], len(h)
        q = rms((h @ self.w[p + "q_proj.weight"].T).reshape(t, heads, dh), self.w[p + "q_layernorm.weight"], self.eps)
        k = rms((h @ self.w[p + "k_proj.weight"].T).reshape(t, kv, dh), self.w[p + "k_layernorm.weight"], self.eps)
        self.keys[layer] += list(rope(k, positions, theta))
        self.values[layer] += list((h @ self.w[p + "v_proj.weight"].T).reshape(t, kv, dh))
        q, keys, values = rope(q, positions, theta), np.stack(self.keys[layer]), np.stack(self.values[layer])
        z = []
        for head in range(heads):
            scores = q[:, head] @ keys[:, head // (heads // kv)].T / np.sqrt(dh)
            scores = np.where(np.arange(len(keys))[None] <= np.asarray(positions)[:, None], scores, -np.inf)
            e = np.exp(scores - scores.max(-1, keepdims=True))
            z.append(e / e.sum(-1, keepdims=True) @ values[:, head // (heads // kv)])
        return np.concatenate(z, 1) @ self.w[p + "out_proj.weight"].T

    def forward(self, ids, rec: Recorder, planted_layer: int | None):
        positions = list(range(self.fed, self.fed + len(ids)))
        x = self.w["embed_tokens.weight"][ids]
        for layer in range(self.c["num_hidden_layers"]):
            p = f"layers.{layer}."
            h = rms(x, self.w[p + "operator_norm.weight"], self.eps)
            if layer in self.conv:
                x = x + self.short_conv(layer, h, planted_layer == layer)
                rec.record(f"blocks.{layer}.conv.conv_state", self.conv[layer])
            else:
                x = x + self.attention(layer, h, positions)
                rec.record(f"blocks.{layer}.attn.cache_k", np.stack(self.keys[layer]).transpose(1, 0, 2))
            h = rms(x, self.w[p + "ffn_norm.weight"], self.eps)
            gate = h @ self.w[p + "feed_forward.w1.weight"].T
            up = h @ self.w[p + "feed_forward.w3.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ self.w[p + "feed_forward.w2.weight"].T
            rec.record(f"blocks.{layer}.hook_resid_post", x)
        logits = rms(x, self.w["embedding_norm.weight"], self.eps) @ self.w["embed_tokens.weight"].T
        rec.record("unembed.hook_out", logits)
        self.fed += len(ids)
        return logits


def generation_dump(folder: Path, ids: list[int], new_tokens: int, plant: tuple[int, int] | None = None) -> Recorder:
    model, rec, feed = Lfm2(folder), Recorder(), list(ids)
    rec.prefill()
    for round_ in range(new_tokens):
        if round_:
            rec.decode(round_)
        logits = model.forward(feed, rec, plant[1] if plant and plant[0] == round_ else None)
        feed = [int(np.argmax(logits[-1]))]
    return rec
