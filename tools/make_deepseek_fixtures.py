"""Write tests/fixtures/deepseek_v3/: a tiny random DeepSeek-V3 checkpoint (MLA attention, DeepSeek-V3 routing) and
transformers' true float64 outputs.

    /work/refenv/bin/python tools/make_deepseek_fixtures.py

and tests/fixtures/gguf-deepseek2/model.gguf: that folder as llama.cpp's own converter (convert_hf_to_gguf.py of the
llama-cpp-python 0.3.36 sdist, CONVERTER below) writes it, in f32: the same numbers, so the same reference.
The converter does not know this byte-level BPE's pre-tokenizer (it hashes known tokenizers), so it is told
"qwen2"'s; config.json carries DeepSeek-V3's own `scoring_func` and `topk_method` (the Hub's config.json has them,
transformers' writer does not), from which the converter writes the sigmoid `expert_gating_func`.

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py.
3 layers: layer 0 dense (`first_k_dense_replace` 1), layers 1 and 2 sparse. MLA: 4 heads, q through a rank-12
bottleneck (`q_lora_rank`), a latent of 10 (`kv_lora_rank`), no-position parts of 6, rope parts of 4, values of 5,
RoPE on interleaved pairs (`rope_interleave`, DeepSeek's default) with YaRN (factor 4 over 16 original positions,
mscale and mscale_all_dim 0.7: the softmax's factor mscale² differs from 1; they are equal, as a GGUF can say them).
Routing: 8 experts in 2 groups (`n_group`), 1 group kept per token (`topk_group`), 2 experts per token by sigmoid
score plus a random selection bias (`e_score_correction_bias`), weights normalised (`norm_topk_prob`) and times
2.5 (`routed_scaling_factor`), one shared expert. The seed is the first from SEED on whose float64 reference every
token of every pass has margins of at least MIN_MARGIN between its k-th and (k+1)-th biased score within the kept
groups, and between its topk_group-th and next group score.

transformers' float64 forward is not float64 throughout: besides RMSNorm, eager attention's softmax and the rotary
tables (tools/float64_reference.py), DeepSeek's router casts the hidden states and its weight to float32, and
from_pretrained keeps the router's weight and bias in float32 (`_keep_in_fp32_modules_strict`). Each is patched
(the router's tensors made float64 after loading, the rotary module rebuilt with YaRN's inv_freq in float64), and
the dispatch-mode counter proves that no operator of the reference passes reads or writes a float32 tensor.

reference.npz: `ids`, `greedy_ids`, `moe_layers`; for the prefill `layers` (every layer's output), `logits`,
`router_logits` (moe layer × token × expert), `selection` (the biased scores, kept groups only, −∞ elsewhere),
`topk` (moe layer × token × k, best first by the biased score), `latent` and `rope_key` (layer × token × width: the
cache transformers keeps); for each pass (the prefill's last row, then every cached decode step through
transformers' DynamicCache) `step_logits`, `step_layers`, `step_router_logits`, `step_topk`. `float32_ops` is the
counter's count (0), `ops` how many operators it saw.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import counter_sees_float32, eager_attention, greedy_passes, rms_norm  # noqa: E402
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402

NEW_TOKENS = 5
SEED, MIN_MARGIN = 300, 1e-3
TOP_K, GROUPS, TOPK_GROUPS = 2, 2, 1
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.7, "mscale_all_dim": 0.7}
CONVERTER = Path("/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
HUB_KEYS = {"scoring_func": "sigmoid", "topk_method": "noaux_tc"}


def config(vocab_size: int):
    import transformers

    return transformers.DeepseekV3Config(
        vocab_size=vocab_size, hidden_size=24, intermediate_size=40, moe_intermediate_size=12, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
        routed_scaling_factor=2.5, kv_lora_rank=10, q_lora_rank=12, qk_rope_head_dim=4, v_head_dim=5,
        qk_nope_head_dim=6, n_group=GROUPS, topk_group=TOPK_GROUPS, num_experts_per_tok=TOP_K,
        first_k_dense_replace=1, norm_topk_prob=True, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_parameters=dict(YARN), rope_interleave=True, tie_word_embeddings=False, eos_token_id=0,
        bos_token_id=None)


# -- float64 everywhere -------------------------------------------------------------------------------
def _router(self, hidden_states):
    """DeepseekV3TopkRouter.forward in the input's dtype (transformers: float32), recording what it saw."""
    hidden_states = hidden_states.view(-1, self.hidden_dim)
    router_logits = torch.nn.functional.linear(hidden_states, self.weight)
    scores = router_logits.sigmoid()
    choice = scores + self.e_score_correction_bias
    group_scores = choice.view(-1, self.num_group, self.num_experts // self.num_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(-1, self.num_group, self.num_experts // self.num_group)
    choice = choice.masked_fill(~score_mask.reshape(-1, self.num_experts).bool(), float("-inf"))
    topk_indices = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
    topk_weights = scores.gather(1, topk_indices)
    if self.norm_topk_prob:
        topk_weights /= topk_weights.sum(dim=-1, keepdim=True) + 1e-20
    topk_weights = topk_weights * self.routed_scaling_factor
    best_first = torch.argsort(choice.gather(1, topk_indices), dim=-1, descending=True)
    self.seen.append((router_logits.detach().clone(), choice.detach().clone(), group_scores.detach().clone(),
                      topk_indices.gather(1, best_first).detach().clone()))
    return router_logits, topk_weights, topk_indices


def _rotary(self, x, position_ids):
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def pure_float64() -> None:
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as module

    module.DeepseekV3RMSNorm.forward = rms_norm
    module.DeepseekV3RotaryEmbedding.forward = _rotary
    module.DeepseekV3TopkRouter.forward = _router
    module.eager_attention_forward = eager_attention(module.repeat_kv)


def yarn_inv_freq(dim: int) -> torch.Tensor:
    """transformers' _compute_yarn_parameters in float64 (truncated correction range)."""
    base, factor, old = YARN["rope_theta"], YARN["factor"], YARN["original_max_position_embeddings"]

    def correction(rotations):
        return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(correction(YARN["beta_fast"])), 0), min(math.ceil(correction(YARN["beta_slow"])), dim - 1)
    high = high + 0.001 if low == high else high
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    extrapolation = 1 - ramp
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def load(folder: Path):
    import transformers

    model = transformers.DeepseekV3ForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                                               experts_implementation="eager").eval()
    rotary = model.model.rotary_emb
    ours = yarn_inv_freq(model.config.qk_rope_head_dim)
    assert torch.allclose(ours.float(), rotary.inv_freq.float(), rtol=1e-6, atol=0)
    rotary.inv_freq = ours
    routers = [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    for router in routers:
        router.weight.data = router.weight.data.double()  # kept float32 by from_pretrained
        router.e_score_correction_bias = router.e_score_correction_bias.double()
        router.seen = []
    return model, routers


def run(model, routers, ids: list[int]) -> dict[str, np.ndarray]:
    """Prefill, then greedy decoding through transformers' own cache, under the float32 counter."""
    def routes_and_latents(cache):
        seen = [router.seen.pop() for router in routers]
        return {**{name: np.stack([s[i].numpy() for s in seen])
                   for i, name in enumerate(("router_logits", "selection", "groups", "topk"))},
                "latent": np.stack([layer.keys[0, 0].numpy() for layer in cache.layers]),
                "rope_key": np.stack([layer.values[0, 0].numpy() for layer in cache.layers])}

    passes, counter = greedy_passes(model, ids, NEW_TOKENS, routes_and_latents)
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    prefill = passes[0]
    return {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
            **{name: prefill[name] for name in ("layers", "logits", "router_logits", "selection", "groups", "topk")},
            "latent": passes[-1]["latent"], "rope_key": passes[-1]["rope_key"],
            **{f"step_{name}": np.stack([p[name][:, -1] if name == "layers" else p[name][..., -1, :] for p in passes])
               for name in ("logits", "layers", "router_logits", "selection", "groups", "topk")},
            "float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def margin(scores: np.ndarray, k: int) -> float:
    ordered = -np.sort(-scores, axis=-1)
    return float((ordered[..., k - 1] - ordered[..., k]).min())


def smallest_margin(ref: dict[str, np.ndarray]) -> float:
    return min(margin(ref[f"{prefix}{name}"], k) for prefix in ("", "step_")
               for name, k in (("selection", TOP_K), ("groups", TOPK_GROUPS)))


def make() -> None:
    import transformers

    tokenizer = byte_bpe(["<|endoftext|>"])
    folder = OUT / "deepseek_v3"
    folder.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode(PROMPT).ids
    for seed in range(SEED, SEED + 200):
        torch.manual_seed(seed)
        model = transformers.DeepseekV3ForCausalLM(config(tokenizer.get_vocab_size()))
        randomize(model, seed)
        with torch.no_grad():
            for layer in model.model.layers:
                if hasattr(layer.mlp, "gate"):  # a buffer, not a parameter: randomize leaves it at 0
                    layer.mlp.gate.e_score_correction_bias.copy_(0.3 * torch.randn(8))
        model.save_pretrained(folder)
        ref = run(*load(folder), ids)
        found = smallest_margin(ref)
        print(f"seed {seed}: smallest margin {found:.3g}")
        if found >= MIN_MARGIN:
            break
    else:
        sys.exit("no seed gave margins of at least MIN_MARGIN")
    tokenizer.save(str(folder / "tokenizer.json"))
    config_file = folder / "config.json"
    config_file.write_text(json.dumps(json.loads(config_file.read_text()) | HUB_KEYS, indent=2) + "\n")
    ref["moe_layers"] = np.array([i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")])
    np.savez_compressed(folder / "reference.npz", **ref)
    print(f"deepseek_v3: {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read or wrote float32; "
          f"greedy {ref['greedy_ids'].tolist()}")


def convert() -> None:
    """tests/fixtures/deepseek_v3 through llama.cpp's convert_hf_to_gguf.py, in f32."""
    sys.path[:0] = [str(CONVERTER), str(CONVERTER / "gguf-py")]
    from conversion import base

    import convert_hf_to_gguf

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    out = OUT / "gguf-deepseek2"
    out.mkdir(exist_ok=True)
    sys.argv = ["convert_hf_to_gguf.py", str(OUT / "deepseek_v3"), "--outtype", "f32", "--outfile", str(out / "model.gguf")]
    convert_hf_to_gguf.main()


def main() -> None:
    assert counter_sees_float32()
    pure_float64()
    make()
    convert()


if __name__ == "__main__":
    main()
