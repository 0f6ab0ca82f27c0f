"""Write tests/fixtures/qwen3_moe/ and qwen2_moe/: tiny random mixture-of-experts checkpoints and transformers'
true float64 outputs.

    /work/refenv/bin/python tools/make_moe_fixtures.py               # both
    /work/refenv/bin/python tools/make_moe_fixtures.py qwen2_moe     # only that one

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py.
qwen3_moe: 4 layers, layer 2 dense (`mlp_only_layers`), layers 0, 1 and 3 sparse: 8 experts of width 12, 2 per
token, the chosen weights renormalised (`norm_topk_prob`). qwen2_moe: 3 layers, layer 0 dense, q/k/v biases,
8 experts of width 12, 2 per token, the chosen scores as weights, and a shared expert of width 20 under its
sigmoid gate. The seed of each is the first from SEED on whose float64
reference every token of every pass has a margin of at least MIN_MARGIN between its 2nd and 3rd router score
(and its router logits): the reference itself never sits on a tie.

transformers' float64 forward is not float64 throughout: the router's softmax is `dtype=torch.float`, RMSNorm
and eager attention compute in float32, and the rotary module's inv_freq is a float32 buffer made at init.
Each is patched (the rotary modules are rebuilt after from_pretrained), and a dispatch-mode counter proves that
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


SMALL = dict(hidden_size=24, intermediate_size=40, moe_intermediate_size=12, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, num_experts=8,
             num_experts_per_tok=TOP_K, decoder_sparse_step=1, tie_word_embeddings=True, eos_token_id=0)
PREFIXES = {"qwen3_moe": "Qwen3Moe", "qwen2_moe": "Qwen2Moe"}


def config(arch: str, vocab_size: int):
    import transformers

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


def pure_float64() -> None:
    import importlib

    for arch, prefix in PREFIXES.items():
        module = importlib.import_module(f"transformers.models.{arch}.modeling_{arch}")
        getattr(module, f"{prefix}RMSNorm").forward = rms_norm
        getattr(module, f"{prefix}RotaryEmbedding").forward = rotary
        getattr(module, f"{prefix}TopKRouter").forward = _router
        module.eager_attention_forward = eager_attention(module.repeat_kv)


# -- the reference ---------------------------------------------------------------------------------------
def model_class(arch: str):
    import transformers

    return getattr(transformers, f"{PREFIXES[arch]}ForCausalLM")


def load(arch: str, folder: Path):
    model = model_class(arch).from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                              experts_implementation="eager").eval()
    rebuild_rotary(model)
    routers = [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "gate")]
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
    ref["moe_layers"] = np.array([i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")])
    np.savez_compressed(folder / "reference.npz", **ref)
    print(f"{arch}: {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read or wrote float32; "
          f"greedy {ref['greedy_ids'].tolist()}")


def main() -> None:
    assert counter_sees_float32()
    pure_float64()
    chosen = sys.argv[1:] or list(PREFIXES)
    if unknown := set(chosen) - set(PREFIXES):
        sys.exit(f"unknown fixture(s) {', '.join(sorted(unknown))} (known: {', '.join(PREFIXES)})")
    for arch in chosen:
        make(arch)


if __name__ == "__main__":
    main()
