"""Write tests/fixtures/qwen3_moe/, qwen2_moe/, qwen3_moe_tie/ and gpt_oss/: tiny random mixture-of-experts
checkpoints and transformers' true float64 outputs.

    /work/refenv/bin/python tools/make_moe_fixtures.py               # all four
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

qwen3_moe_tie: 2 sparse layers as qwen3_moe's, weights stored in float64, built to have a near tie: from seed
TIE_SEED on, the first whose reference keeps every margin above 2·MIN_MARGIN; then layer 1's router row of the
expert that comes (k+1)-th for the token of decode round 2 is moved (orthogonally to every earlier token's router
input, so no earlier pass changes) until the k-th score less the (k+1)-th is TIE_MARGIN = 2e-8, solved in
float64; every other margin stays at least MIN_MARGIN. `float32_dump.npz` is transformers' own float32 forward
(unpatched, in a second process: `make_moe_fixtures.py --float32-dump FOLDER`) fed the reference's greedy tokens:
per pass `PASS.blocks.L.mlp.hook_router_logits` / `hook_router_scores` / `hook_topk`, `PASS.blocks.L.hook_resid_post`
and `PASS.unembed.hook_out`, as `check --against` reads them; the script checks that its first routing flip is
that token (if not, the tie is set the other way round). Run 2026-12-02: seed 301, experts 0 and 1 tie at
position 21; the float32 dump chooses [6, 1] where the reference chooses [6, 0]. (A tie of 1e-7 flipped in
transformers' float32 but not in the engine's, whose float32 error there is 5.5e-8.)

reference.npz: `ids`, `greedy_ids`, `moe_layers`; for the prefill `layers` (every layer's output), `logits`,
`router_logits` (moe layer × token × expert) and `topk` (moe layer × token × k, best first); for each pass
(the prefill's last row, then every cached decode step through transformers' DynamicCache) `step_logits`,
`step_layers`, `step_router_logits` and `step_topk`; `router_inputs` / `step_router_inputs` what each router
read. `float32_ops` is the counter's count (0), `ops` how many operators it saw; the tie's fixture adds `tie_round`, `tie_layer`, `tie_position`, `tie_experts`,
`tie_margin` and `seed`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import (counter_sees_float32, eager_attention, greedy_passes, rebuild_rotary, rms_norm,  # noqa: E402
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
    self.seen.append((logits.detach().clone(), probs.detach().clone(), indices.detach().clone(),
                      hidden_states.detach().clone()))
    return logits, top, indices


def _recording(forward):
    """gpt-oss's router as it is (top k of the logits, a softmax over those), keeping what it chose."""
    def recorded(self, hidden_states):
        logits, top, indices = forward(self, hidden_states)
        self.seen.append((logits.detach().clone(), torch.softmax(logits, dim=-1), indices.detach().clone(),
                          hidden_states.detach().clone()))
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
    def routes(cache):
        seen = [router.seen.pop() for router in routers]
        return {name: np.stack([s[i].numpy() for s in seen])
                for i, name in enumerate(("router_logits", "probs", "topk", "router_inputs"))}

    passes, counter = greedy_passes(model, ids, NEW_TOKENS, routes)
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    prefill = passes[0]
    return {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
            "layers": prefill["layers"], "logits": prefill["logits"], "router_logits": prefill["router_logits"],
            "topk": prefill["topk"], "probs": prefill["probs"], "router_inputs": prefill["router_inputs"],
            "step_logits": np.stack([p["logits"][-1] for p in passes]),
            "step_layers": np.stack([p["layers"][:, -1] for p in passes]),
            "step_router_logits": np.stack([p["router_logits"][:, -1] for p in passes]),
            "step_topk": np.stack([p["topk"][:, -1] for p in passes]),
            "step_probs": np.stack([p["probs"][:, -1] for p in passes]),
            "step_router_inputs": np.stack([p["router_inputs"][:, -1] for p in passes]),
            "float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def smallest_margin(ref: dict[str, np.ndarray]) -> float:
    """The least gap, over every token of every pass and layer, between the k-th and (k+1)-th router score and
    between the same two router logits."""
    gaps = []
    for scores in (ref["probs"], ref["step_probs"], ref["router_logits"], ref["step_router_logits"]):
        ordered = -np.sort(-scores, axis=-1)
        gaps.append((ordered[..., TOP_K - 1] - ordered[..., TOP_K]).min())
    return float(min(gaps))


def first_stable_seed(reference) -> tuple[int, dict[str, np.ndarray]]:
    """The first seed from SEED whose `reference(seed)` keeps every router margin at least MIN_MARGIN, and that
    reference."""
    for seed in range(SEED, SEED + 200):
        ref = reference(seed)
        margin = smallest_margin(ref)
        print(f"seed {seed}: smallest router margin {margin:.3g}")
        if margin >= MIN_MARGIN:
            return seed, ref
    sys.exit("no seed gave router margins of at least MIN_MARGIN")


def make(arch: str) -> None:
    tokenizer = byte_bpe(["<|endoftext|>"])
    folder = OUT / arch
    folder.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode(PROMPT).ids

    def reference(seed: int) -> dict[str, np.ndarray]:
        nonlocal model
        torch.manual_seed(seed)
        model = model_class(arch)(config(arch, tokenizer.get_vocab_size()))
        randomize(model, seed)
        model.save_pretrained(folder)
        return run(*load(arch, folder), ids)

    model = None
    _, ref = first_stable_seed(reference)
    tokenizer.save(str(folder / "tokenizer.json"))
    ref["moe_layers"] = np.array([i for i, layer in enumerate(model.model.layers)
                                  if hasattr(layer.mlp, "gate") or hasattr(layer.mlp, "router")])
    np.savez_compressed(folder / "reference.npz", **ref)
    print(f"{arch}: {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read or wrote float32; "
          f"greedy {ref['greedy_ids'].tolist()}")


# -- the near tie -----------------------------------------------------------------------------------------
TIE, TIE_LAYER, TIE_ROUND, TIE_MARGIN, TIE_SEED = "qwen3_moe_tie", 1, 2, 2e-8, 300


def tie_model(vocab_size: int, seed: int):
    """Two sparse layers, float64 weights (a float32 file could not hold a tie of 1e-7)."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.Qwen3MoeConfig(vocab_size=vocab_size, num_hidden_layers=2, head_dim=8, norm_topk_prob=True,
                                         mlp_only_layers=[], dtype="float64", **SMALL)
    model = model_class("qwen3_moe")(config).to(torch.float64)
    randomize(model, seed)
    return model


def set_tie(model, ref: dict[str, np.ndarray], target: float) -> tuple[int, int]:
    """Moves the router row of the (k+1)-th expert of layer TIE_LAYER's token in pass TIE_ROUND so that the k-th
    score less the (k+1)-th is `target` (negative: the two change places), solved in float64; the change is
    orthogonal to every earlier token's router input, so no earlier pass routes or computes otherwise."""
    h = ref["step_router_inputs"][TIE_ROUND, TIE_LAYER]
    earlier = np.concatenate([ref["router_inputs"][TIE_LAYER], ref["step_router_inputs"][1:TIE_ROUND, TIE_LAYER]])
    logits = ref["step_router_logits"][TIE_ROUND, TIE_LAYER]
    order = np.argsort(-logits)
    a, b = int(order[TOP_K - 1]), int(order[TOP_K])
    e = np.exp(logits - logits.max())
    rest = e.sum() - e[b]
    alpha = np.log((e[a] - target * rest) / (1 + target)) - np.log(e[b])  # (e_a − x)/(rest + x) = target
    basis, _ = np.linalg.qr(earlier.T)
    direction = h - basis @ (basis.T @ h)
    with torch.no_grad():
        model.model.layers[TIE_LAYER].mlp.gate.weight[b] += torch.tensor(alpha * direction / (direction @ h))
    return a, b


def margins(ref: dict[str, np.ndarray]) -> np.ndarray:
    """Per pass, layer and token (each decode pass's one row), the k-th router score less the (k+1)-th."""
    passes = [ref["probs"]] + [ref["step_probs"][r][:, None] for r in range(1, len(ref["step_probs"]))]
    ordered = [-np.sort(-p, axis=-1) for p in passes]
    return [o[..., TOP_K - 1] - o[..., TOP_K] for o in ordered]


def first_flip(ref: dict[str, np.ndarray], dump: dict[str, np.ndarray]) -> tuple[int, int, int] | None:
    """(round, layer, row) of the first token whose chosen experts differ between the reference and the dump."""
    for round_ in range(len(ref["step_topk"])):
        pass_ = "prefill" if round_ == 0 else f"decode.{round_}"
        for i, layer in enumerate(ref["moe_layers"]):
            ours = ref["topk"][i] if round_ == 0 else ref["step_topk"][round_, i][None]
            theirs = dump[f"{pass_}.blocks.{layer}.mlp.hook_topk"]
            for row, (a, b) in enumerate(zip(ours, theirs)):
                if set(a.tolist()) != set(b.tolist()):
                    return round_, int(layer), row
    return None


def make_tie() -> None:
    """A seed whose reference keeps every margin above 2·MIN_MARGIN, then the tie set at one token; the float32
    dump (transformers' own float32 forward, unpatched, in a process of its own) must flip there first: if it
    does not, the tie is set the other way round."""
    tokenizer = byte_bpe(["<|endoftext|>"])
    folder = OUT / TIE
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    ids = tokenizer.encode(PROMPT).ids
    for seed in range(TIE_SEED, TIE_SEED + 200):
        model = tie_model(tokenizer.get_vocab_size(), seed)
        model.save_pretrained(folder)
        base = run(*load("qwen3_moe", folder), ids)
        if smallest_margin(base) >= 2 * MIN_MARGIN:
            break
    router = model.model.layers[TIE_LAYER].mlp.gate.weight
    kept = router.detach().clone()
    for target in (TIE_MARGIN, -TIE_MARGIN):
        with torch.no_grad():
            router.copy_(kept)
        pair = set_tie(model, base, target)
        model.save_pretrained(folder)
        ref = run(*load("qwen3_moe", folder), ids)
        ref["moe_layers"] = np.array([0, 1])
        gaps = margins(ref)
        tie = float(gaps[TIE_ROUND][TIE_LAYER, 0])
        gaps[TIE_ROUND][TIE_LAYER, 0] = np.inf
        assert abs(tie - abs(target)) < 1e-12 and min(g.min() for g in gaps) >= MIN_MARGIN, (tie, gaps)
        ref |= {"tie_round": np.array(TIE_ROUND), "tie_layer": np.array(TIE_LAYER),
                "tie_position": np.array(len(ids) + TIE_ROUND - 1), "tie_experts": np.array(pair),
                "tie_margin": np.array(tie), "seed": np.array(seed)}
        np.savez_compressed(folder / "reference.npz", **ref)
        subprocess.run([sys.executable, __file__, "--float32-dump", str(folder)], check=True)
        flip = first_flip(ref, dict(np.load(folder / "float32_dump.npz")))
        print(f"seed {seed}: tie {target:+.0e} between experts {pair}: float32 first flips at {flip}")
        if flip == (TIE_ROUND, TIE_LAYER, 0):
            return
    sys.exit("the float32 dump does not flip at the tie either way round")


def float32_dump(folder: Path) -> None:
    """transformers' own float32 forward (no patch), fed the float64 reference's greedy tokens: per pass, every
    sparse layer's router logits, scores and chosen experts, every layer's output and the logits, keyed as
    `check --against` reads them."""
    from transformers import DynamicCache

    ref = np.load(folder / "reference.npz")
    model = model_class("qwen3_moe").from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                     experts_implementation="eager").eval()
    dump, pass_ = {}, "prefill"

    def keep(name):
        return lambda _m, _i, out: dump.__setitem__(f"{pass_}.{name}", out)

    hooks = []
    for layer, block in enumerate(model.model.layers):
        hooks.append(block.register_forward_hook(
            lambda _m, _i, out, layer=layer: dump.__setitem__(f"{pass_}.blocks.{layer}.hook_resid_post",
                                                              (out[0] if isinstance(out, tuple) else out)[0])))
        hooks.append(block.mlp.gate.register_forward_hook(lambda _m, _i, out, layer=layer: dump.update({
            f"{pass_}.blocks.{layer}.mlp.hook_router_logits": out[0],
            f"{pass_}.blocks.{layer}.mlp.hook_router_scores": torch.softmax(out[0], dim=-1, dtype=torch.float),
            f"{pass_}.blocks.{layer}.mlp.hook_topk": out[2]})))
    cache, feed = DynamicCache(config=model.config), [int(t) for t in ref["ids"]]
    with torch.no_grad():
        for round_, token in enumerate(ref["greedy_ids"][:-1].tolist(), 1):
            dump[f"{pass_}.unembed.hook_out"] = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0]
            pass_, feed = f"decode.{round_}", [token]
        dump[f"{pass_}.unembed.hook_out"] = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0]
    for hook in hooks:
        hook.remove()
    arrays = {key: value.detach().numpy() for key, value in dump.items()}
    assert all(a.dtype in (np.float32, np.int64) for a in arrays.values())
    np.savez_compressed(folder / "float32_dump.npz", **arrays)


def make_any(arch: str) -> None:
    make_tie() if arch == TIE else make(arch)


def main(known=(*PREFIXES, TIE), make_one=make_any) -> None:
    """Make the fixtures named on the command line (of `known`; none named: all), under the float64 patches."""
    if sys.argv[1:2] == ["--float32-dump"]:
        float32_dump(Path(sys.argv[2]))  # before pure_float64: transformers' float32 forward as it is
        return
    assert counter_sees_float32()
    pure_float64()
    chosen = sys.argv[1:] or list(known)
    if unknown := set(chosen) - set(known):
        sys.exit(f"unknown fixture(s) {', '.join(sorted(unknown))} (known: {', '.join(known)})")
    for arch in chosen:
        make_one(arch)


if __name__ == "__main__":
    main()
