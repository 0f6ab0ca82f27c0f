"""check --against: a dump of activations from another implementation, operator by operator.

The dump here comes from a hand NumPy forward of the tiny Llama fixture, written from the
Hugging Face tensors ([out, in] weights, rotate_half RoPE, repeated kv heads) in
TransformerLens's layouts, independently of the engine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine.loading.checkpoint import load_checkpoint
from engine.compare.against import compare_activations, prefill_states, save_activations

LLAMA = Path(__file__).parent / "fixtures" / "llama"
IDS = [0, 266, 222, 286, 280, 279, 261, 276]


def hand_llama(ids: list[int]) -> dict[str, np.ndarray]:
    w = {k: v.astype(np.float64) for k, v in load_file(LLAMA / "model.safetensors").items()}
    cfg = json.loads((LLAMA / "config.json").read_text())
    heads, kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    dh, eps, t = d // heads, cfg["rms_norm_eps"], len(ids)
    angle = np.outer(np.arange(t), 1.0 / cfg["rope_parameters"]["rope_theta"] ** (np.arange(0, dh, 2) / dh))
    cos, sin = np.cos(np.concatenate([angle, angle], 1))[:, None], np.sin(np.concatenate([angle, angle], 1))[:, None]

    def rms(x, gain):
        return gain * x / np.sqrt((x**2).mean(-1, keepdims=True) + eps)

    def rope(x):
        return x * cos + np.concatenate([-x[..., dh // 2:], x[..., :dh // 2]], -1) * sin

    out = {"hook_embed": w["model.embed_tokens.weight"][ids]}
    x = out["hook_embed"]
    for layer in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{layer}.", f"blocks.{layer}."
        h = out[b + "ln1.hook_out"] = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = ((h @ w[f"{p}self_attn.{n}_proj.weight"].T).reshape(t, -1, dh) for n in "qkv")
        out[b + "attn.hook_q"], out[b + "attn.hook_k"], out[b + "attn.hook_v"] = q, k, v
        rq, rk = out[b + "attn.hook_rot_q"], out[b + "attn.hook_rot_k"] = rope(q), rope(k)
        rk, v = np.repeat(rk, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
        scores = np.einsum("qhd,khd->hqk", rq, rk) / np.sqrt(dh)
        scores = out[b + "attn.hook_attn_scores"] = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        pattern = out[b + "attn.hook_pattern"] = e / e.sum(-1, keepdims=True)
        z = out[b + "attn.hook_z"] = np.einsum("hqk,khd->qhd", pattern, v)
        attn = out[b + "hook_attn_out"] = z.reshape(t, -1) @ w[p + "self_attn.o_proj.weight"].T
        mid = out[b + "hook_resid_mid"] = x + attn
        h = out[b + "ln2.hook_out"] = rms(mid, w[p + "post_attention_layernorm.weight"])
        gate = out[b + "mlp.hook_pre"] = h @ w[p + "mlp.gate_proj.weight"].T
        up = out[b + "mlp.hook_pre_linear"] = h @ w[p + "mlp.up_proj.weight"].T
        post = out[b + "mlp.hook_post"] = gate / (1 + np.exp(-gate)) * up
        mlp = out[b + "hook_mlp_out"] = post @ w[p + "mlp.down_proj.weight"].T
        x = out[b + "hook_resid_post"] = mid + mlp
    final = out["ln_final.hook_out"] = rms(x, w["model.norm.weight"])
    out["unembed.hook_out"] = final @ w["lm_head.weight"].T
    return out


@pytest.fixture
def scenario():
    return load_checkpoint(LLAMA, ids=IDS)


def test_an_independent_dump_agrees_everywhere(scenario, tmp_path):
    dump = tmp_path / "dump.safetensors"
    # with the batch axis; safetensors writes an array's memory as it lies, so make it C-ordered first
    save_file({name: np.ascontiguousarray(a[None]) for name, a in hand_llama(IDS).items()}, dump)
    report = compare_activations(scenario, dump, tolerance=1e-9)
    assert report.first_divergence is None and not report.unused
    assert len(report.ops) == 1 + 2 * (14 + 3 * 4) + 2  # per-head scores/pattern/z count once per head


def test_one_perturbed_cell_is_named_as_the_first_divergence(scenario, tmp_path):
    arrays = hand_llama(IDS)
    arrays["blocks.1.attn.hook_pattern"][2, 5, 3] += 1e-6  # head 2, query 5, key 3
    dump = tmp_path / "dump.npz"
    np.savez(dump, **arrays)  # no batch axis
    report = compare_activations(scenario, dump, tolerance=1e-9)
    first = report.first_divergence
    assert (first.name, first.head, first.cell) == ("blocks.1.attn.hook_pattern", 2, (5, 3))
    assert first.where == "row 5 ·  on, col k3 · cat"  # the tokens at those positions
    assert [op for op in report.ops if not op.agrees] == [first]
    assert "first divergence: blocks.1.attn.hook_pattern head 2" in report.lines()[1]


def test_stacked_heads_and_missing_keys(scenario, tmp_path):
    arrays = hand_llama(IDS)
    arrays["blocks.0.attn.hook_z"] = arrays["blocks.0.attn.hook_z"].reshape(len(IDS), -1)  # [pos, head·d_head]
    del arrays["blocks.1.hook_mlp_out"]
    arrays["blocks.0.mlp.hook_post"] = arrays["blocks.0.mlp.hook_post"][:, :5]
    dump = tmp_path / "dump.npz"
    np.savez(dump, **arrays)
    report = compare_activations(scenario, dump, tolerance=1e-9)
    assert "blocks.1.hook_mlp_out" in report.missing
    first = report.first_divergence
    assert first.name == "blocks.0.mlp.hook_post" and "does not fit" in first.where
    assert all(op.agrees for op in report.ops if op.name == "blocks.0.attn.hook_z")


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_saved_reference_reads_back_as_agreeing(suffix, tmp_path):
    scenario = load_checkpoint(LLAMA, ids=IDS)
    path = tmp_path / f"ref{suffix}"
    save_activations(prefill_states(scenario), path)
    saved = dict(np.load(path)) if suffix == ".npz" else load_file(path)
    assert saved["blocks.0.attn.hook_pattern"].shape == (1, 4, len(IDS), len(IDS))
    assert saved["blocks.0.attn.hook_k"].shape == (1, len(IDS), 2, 4)
    report = compare_activations(scenario, path, tolerance=0.0)
    assert report.first_divergence is None and not report.missing


def test_unreadable_dump_is_one_error(scenario, tmp_path):
    from engine import ScenarioError

    with pytest.raises(ScenarioError, match="cannot read"):
        compare_activations(scenario, tmp_path / "absent.npz")
    with pytest.raises(ScenarioError, match="expected a .safetensors or .npz"):
        compare_activations(scenario, tmp_path / "dump.pt")
