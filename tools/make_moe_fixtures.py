"""Write tests/fixtures/qwen3_moe/, qwen2_moe/ and gpt_oss/: tiny random mixture-of-experts checkpoints and
transformers' true float64 outputs.

    /work/refenv/bin/python tools/make_moe_fixtures.py               # all three
    /work/refenv/bin/python tools/make_moe_fixtures.py gpt_oss       # only that one

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py.
qwen3_moe: 4 layers, layer 2 dense (`mlp_only_layers`), layers 0, 1 and 3 sparse: 8 experts of width 12, 2 per
token, the chosen weights renormalised (`norm_topk_prob`). qwen2_moe: 3 layers, layer 0 dense, q/k/v biases,
8 experts of width 12, 2 per token, the chosen scores as weights, and a shared expert of width 20 under its
sigmoid gate. gpt_oss: 2 layers, layer 0 sliding (a window of 4, shorter than the prompt), layer 1 full, attention
sinks, q/k/v/o biases, YaRN RoPE (factor 32 over an original context of 4096, beta 32/1, untruncated, as gpt-oss),
8 experts of width 32 with biases, 2 per token, and the clamped SwiGLU with alpha 1.702 and a limit of 1.5 (gpt-oss:
7; lower here so that random weights reach the clamp). The seed of each is the first from SEED on whose float64
reference every token of every pass has a margin of at least MIN_MARGIN between its 2nd and 3rd router score
(and its router logits): the reference itself never sits on a tie.

transformers' float64 forward is not float64 throughout: the router's softmax is `dtype=torch.float`, RMSNorm
and eager attention compute in float32, and the rotary module's inv_freq is a float32 buffer made at init
(gpt-oss's YaRN table too, and its norms are kept in float32 by `_keep_in_fp32_modules`; its sinks' softmax and
its router already keep the input's dtype). Each is patched (the rotary modules are rebuilt after
from_pretrained, gpt-oss's from a float64 YaRN written here), and a dispatch-mode counter proves that
no operator of the reference passes reads or writes a float32 tensor; the script stops if one does.

reference.npz: `ids`, `greedy_ids`, `moe_layers`; for the prefill `layers` (every layer's output), `logits`,
`router_logits` (moe layer × token × expert) and `topk` (moe layer × token × k, best first); for each pass
(the prefill's last row, then every cached decode step through transformers' DynamicCache) `step_logits`,
`step_layers`, `step_router_logits` and `step_topk`. `float32_ops` is the counter's count (0), `ops` how many
operators it saw.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import (Float32Counter, counter_sees_float32, eager_attention, rebuild_rotary, rms_norm,  # noqa: E402
                               rotary)
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402

NEW_TOKENS = 5
SEED, MIN_MARGIN = 100, 1e-3
TOP_K = 2


GPT_OSS_ROPE = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": False, "original_max_position_embeddings": 4096}
SMALL = dict(hidden_size=24, intermediate_size=40, moe_intermediate_size=12, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, num_experts=8,
             num_experts_per_tok=TOP_K, decoder_sparse_step=1, tie_word_embeddings=True, eos_token_id=0)
QWEN = {"qwen3_moe": "Qwen3Moe", "qwen2_moe": "Qwen2Moe"}
PREFIXES = {**QWEN, "gpt_oss": "GptOss"}


def config(arch: str, vocab_size: int):
    import transformers

    if arch == "gpt_oss":
        return transformers.GptOssConfig(
            vocab_size=vocab_size, num_hidden_layers=2, hidden_size=32, intermediate_size=32, head_dim=8,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=TOP_K,
            sliding_window=4, layer_types=["sliding_attention", "full_attention"], rope_parameters=dict(GPT_OSS_ROPE),
            max_position_embeddings=131072, rms_norm_eps=1e-5, swiglu_alpha=1.702, swiglu_limit=1.5,
            tie_word_embeddings=False, eos_token_id=0)
    if arch == "qwen3_moe":
        return transformers.Qwen3MoeConfig(vocab_size=vocab_size, num_hidden_layers=4, head_dim=8, norm_topk_prob=True,
                                           mlp_only_layers=[2], **SMALL)
    return transformers.Qwen2MoeConfig(vocab_size=vocab_size, num_hidden_layers=3, norm_topk_prob=False, qkv_bias=True,
                                       shared_expert_intermediate_size=20, mlp_only_layers=[0], **SMALL)


# -- float64 everywhere -------------------------------------------------------------------------------
def _router(self, hidden_states):
    """Qwen3MoeTopKRouter.forward with its softmax in the input's dtype (transformers: float32)."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(hidden_states, self.weight)
    probs = torch.softmax(logits, dim=-1)
    top, indices = torch.topk(probs, self.top_k, dim=-1)
    if self.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    self.seen.append((logits.detach().clone(), probs.detach().clone(), indices.detach().clone()))
    return logits, top, indices


def _recording(forward):
    """gpt-oss's router as it is (top k of the logits, a softmax over those), keeping what it chose."""
    def recorded(self, hidden_states):
        logits, top, indices = forward(self, hidden_states)
        self.seen.append((logits.detach().clone(), torch.softmax(logits, dim=-1), indices.detach().clone()))
        return logits, top, indices

    return recorded


def _gpt_oss_rotary(self, x, position_ids):
    """GptOssRotaryEmbedding.forward with the positions in float64 (transformers: float32); cos and sin times
    YaRN's attention factor, half-width (gpt-oss rotates the two halves with one table)."""
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq
    return (freqs.cos() * self.attention_scaling).to(x.dtype), (freqs.sin() * self.attention_scaling).to(x.dtype)


def yarn_inv_freq(params: dict, dim: int, truncate: bool) -> torch.Tensor:
    """YaRN's frequencies (the paper's ramp between beta_fast and beta_slow rotations over the original context),
    in float64."""
    import math

    base, factor, old = params["rope_theta"], params["factor"], params["original_max_position_embeddings"]

    def corr(rotations):
        return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(params["beta_fast"]), corr(params["beta_slow"])
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    extrapolation = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return extrapolation / factor * ramp + extrapolation * (1 - ramp)


def pure_float64() -> None:
    import importlib

    gpt_oss = importlib.import_module("transformers.models.gpt_oss.modeling_gpt_oss")
    gpt_oss.GptOssRMSNorm.forward = rms_norm
    gpt_oss.GptOssRotaryEmbedding.forward = _gpt_oss_rotary
    gpt_oss.GptOssTopKRouter.forward = _recording(gpt_oss.GptOssTopKRouter.forward)
    gpt_oss.GptOssPreTrainedModel._keep_in_fp32_modules = []
    for arch, prefix in QWEN.items():
        module = importlib.import_module(f"transformers.models.{arch}.modeling_{arch}")
        getattr(module, f"{prefix}RMSNorm").forward = rms_norm
        getattr(module, f"{prefix}RotaryEmbedding").forward = rotary
        getattr(module, f"{prefix}TopKRouter").forward = _router
        module.eager_attention_forward = eager_attention(module.repeat_kv)


def rebuild_yarn_rotary(model) -> None:
    """gpt-oss's inv_freq from the float64 YaRN above (transformers makes it float32 at init), checked against theirs."""
    rotary_module, config = model.model.rotary_emb, model.config
    params = config.rope_parameters
    ours = yarn_inv_freq(params, config.head_dim, params.get("truncate", True))
    assert torch.allclose(ours.float(), rotary_module.inv_freq.float(), rtol=1e-6, atol=0)
    rotary_module.inv_freq = ours


# -- the reference ---------------------------------------------------------------------------------------
def model_class(arch: str):
    import transformers

    return getattr(transformers, f"{PREFIXES[arch]}ForCausalLM")


def load(arch: str, folder: Path):
    model = model_class(arch).from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                              experts_implementation="eager").eval()
    (rebuild_yarn_rotary if model.config.rope_parameters["rope_type"] == "yarn" else rebuild_rotary)(model)
    routers = [getattr(layer.mlp, "gate", None) or getattr(layer.mlp, "router", None) for layer in model.model.layers]
    routers = [router for router in routers if router is not None]
    for router in routers:
        router.seen = []
    return model, routers


def run(model, routers, ids: list[int]) -> dict[str, np.ndarray]:
    """Prefill, then greedy decoding through transformers' own cache: every pass's logits, layer outputs,
    router logits and chosen experts, under the float32 counter."""
    from transformers import DynamicCache

    captured = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
             for layer in model.model.layers]
    cache, feed, passes = DynamicCache(config=model.config), ids, []
    counter = Float32Counter()
    with torch.no_grad(), counter:
        for _ in range(NEW_TOKENS):
            captured.clear()
            logits = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0]
            seen = [router.seen.pop() for router in routers]
            passes.append({"logits": logits.numpy(), "layers": np.stack([h[0].numpy() for h in captured]),
                           "router_logits": np.stack([s[0].numpy() for s in seen]),
                           "probs": np.stack([s[1].numpy() for s in seen]),
                           "topk": np.stack([s[2].numpy() for s in seen])})
            feed = [int(torch.argmax(logits[-1]))]
    for hook in hooks:
        hook.remove()
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    prefill = passes[0]
    return {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
            "layers": prefill["layers"], "logits": prefill["logits"], "router_logits": prefill["router_logits"],
            "topk": prefill["topk"], "probs": prefill["probs"],
            "step_logits": np.stack([p["logits"][-1] for p in passes]),
            "step_layers": np.stack([p["layers"][:, -1] for p in passes]),
            "step_router_logits": np.stack([p["router_logits"][:, -1] for p in passes]),
            "step_topk": np.stack([p["topk"][:, -1] for p in passes]),
            "step_probs": np.stack([p["probs"][:, -1] for p in passes]),
            "float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def smallest_margin(ref: dict[str, np.ndarray]) -> float:
    """The least gap, over every token of every pass and layer, between the k-th and (k+1)-th router score and
    between the same two router logits."""
    gaps = []
    for scores in (ref["probs"], ref["step_probs"], ref["router_logits"], ref["step_router_logits"]):
        ordered = -np.sort(-scores, axis=-1)
        gaps.append((ordered[..., TOP_K - 1] - ordered[..., TOP_K]).min())
    return float(min(gaps))


def make(arch: str) -> None:
    tokenizer = byte_bpe(["<|endoftext|>"])
    folder = OUT / arch
    folder.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode(PROMPT).ids
    for seed in range(SEED, SEED + 200):
        torch.manual_seed(seed)
        model = model_class(arch)(config(arch, tokenizer.get_vocab_size()))
        randomize(model, seed)
        model.save_pretrained(folder)
        ref = run(*load(arch, folder), ids)
        margin = smallest_margin(ref)
        print(f"seed {seed}: smallest router margin {margin:.3g}")
        if margin >= MIN_MARGIN:
            break
    else:
        sys.exit("no seed gave router margins of at least MIN_MARGIN")
    tokenizer.save(str(folder / "tokenizer.json"))
    ref["moe_layers"] = np.array([i for i, layer in enumerate(model.model.layers)
                                  if hasattr(layer.mlp, "gate") or hasattr(layer.mlp, "router")])
    np.savez_compressed(folder / "reference.npz", **ref)
    print(f"{arch}: {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read or wrote float32; "
          f"greedy {ref['greedy_ids'].tolist()}")


def main(known=PREFIXES, make_one=make) -> None:
    """Make the fixtures named on the command line (of `known`; none named: all), under the float64 patches."""
    assert counter_sees_float32()
    pure_float64()
    chosen = sys.argv[1:] or list(known)
    if unknown := set(chosen) - set(known):
        sys.exit(f"unknown fixture(s) {', '.join(sorted(unknown))} (known: {', '.join(known)})")
    for arch in chosen:
        make_one(arch)

if __name__ == "__main__":
    main()
