"""Write tests/fixtures/qwen3_5_moe/ and gguf-qwen3_5_moe/: a tiny random Qwen3.5 MoE text model
(Qwen3_5MoeForCausalLM, config `qwen3_5_moe_text`), its GGUFs as llama.cpp's own converter writes them (`qwen35moe`),
and transformers' true float64 outputs of each.

    /work/refenv/bin/python tools/make_qwen35moe_fixtures.py

Written with transformers 5.24.0, torch 2.13.0 (CPU), gguf 0.19.0 and llama.cpp's convert_hf_to_gguf.py from the
llama-cpp-python 0.3.36 sdist, in the reference environment of make_fixtures.py. Qwen3.5's layers as
make_qwen35_fixtures.py has them (Gated DeltaNet, Gated DeltaNet, gated full attention; the delta rule in chunks of
CHUNK tokens, shorter than the prompt), each followed by the sparse FFN of Qwen3.5 MoE: a softmax router over
EXPERTS experts of width 32 (whole Q8_0 blocks), the TOP_K best per token, their scores always renormalised
(transformers' Qwen3_5MoeTopKRouter has no norm_topk_prob), plus a shared expert of width 32 on every token under its
sigmoid gate (`shared_expert_gate`). Every layer is sparse (the config has no mlp_only_layers).

The float64 patches are make_qwen35_fixtures.py's (RMSNorm (1 + w), the gated norm, the rotary module, eager
attention's softmax, the delta rule's `.to(torch.float32)`, `Tensor.float()` in the decay) applied to the
qwen3_5_moe module, whose classes are the same, and the router's softmax in the input's dtype (transformers:
`dtype=torch.float`) from make_moe_fixtures.py; the rotary module is rebuilt after from_pretrained, and a
dispatch-mode counter proves that no operator of the reference passes reads or writes a float32 tensor (the script
stops if one does). The seed is the first from SEED whose reference has router margins (the k-th less the (k+1)-th
score, and the same of the logits) of at least MIN_MARGIN for every token of every pass and layer; the random
router is scaled by ROUTER_SCALE first (unscaled, its 3rd and 4th scores were ~e^-10 and no seed of 200 kept the
margins: the 2nd and 3rd scores nearly tie near 0).

qwen3_5_moe/reference.npz: make_qwen35_fixtures.py's arrays (`ids`, `greedy_ids`, `chunk`, `linear_layers`,
`layers`, `logits`, `step_logits`, `step_layers`, `step_recurrent`, `step_conv`, `float32_ops`, `ops`) and
make_moe_fixtures.py's routes (`moe_layers`, `router_logits` and `topk` of the prefill: layer × token × expert / k,
best first; `step_router_logits`, `step_topk` per pass), `seed`.

gguf-qwen3_5_moe/qwen35moe-f32.gguf and qwen35moe-q8_0.gguf: the folder through the converter (--outtype f32 / q8_0
--no-mtp; it writes the experts merged, ffn_gate_exps / ffn_up_exps / ffn_down_exps, the shared expert as
ffn_*_shexp and its gate as the vector ffn_gate_inp_shexp, besides Qwen3.5's transforms, which
make_qwen35_fixtures.hf_tensors_of undoes). Their references (reference-f32.npz, reference-q8_0.npz, the same
arrays) are transformers' float64 forward of a folder rebuilt from the dequantized tensors, with the file's float32 ε.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_qwen35_fixtures as qwen35  # noqa: E402
from float64_reference import counter_sees_float32, greedy_passes  # noqa: E402
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402
from make_moe_fixtures import _router  # noqa: E402

SEED, MIN_MARGIN = 500, 1e-3
EXPERTS, TOP_K = 4, 2
ROUTER_SCALE = 0.1  # make_fixtures.randomize's router (std 1/√experts over inputs of norm ~2√d) saturates the softmax
LAYER_TYPES = qwen35.LAYER_TYPES
HF_OF_GGUF = {**qwen35.HF_OF_GGUF, "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.gate",
              "ffn_up_exps": "mlp.experts.up", "ffn_down_exps": "mlp.experts.down",
              "ffn_gate_shexp": "mlp.shared_expert.gate_proj", "ffn_up_shexp": "mlp.shared_expert.up_proj",
              "ffn_down_shexp": "mlp.shared_expert.down_proj", "ffn_gate_inp_shexp": "mlp.shared_expert_gate"}


def config(vocab_size: int):
    import transformers

    return transformers.Qwen3_5MoeTextConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=len(LAYER_TYPES), layer_types=LAYER_TYPES,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=3, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
        max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        eos_token_id=0)


def pure_float64() -> None:
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as module

    qwen35.pure_float64(module, "Qwen3_5Moe")
    module.Qwen3_5MoeTopKRouter.forward = _router
    module.Qwen3_5MoeTopKRouter.norm_topk_prob = True  # what its own forward always does


# -- the reference ---------------------------------------------------------------------------------------
def load(folder: Path):
    import transformers

    model = transformers.Qwen3_5MoeForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                                               experts_implementation="eager").eval()
    qwen35.rebuild_rotary(model)
    for layer in model.model.layers:
        layer.mlp.gate.seen = []
    return model


def run(model, ids: list[int]) -> dict[str, np.ndarray]:
    """Prefill, then greedy decoding through transformers' own cache: every pass's logits, layer outputs, router
    logits and chosen experts, and the linear-attention layers' states, under the float32 counter."""
    linear = [i for i, kind in enumerate(LAYER_TYPES) if kind == "linear_attention"]

    def states(cache):
        seen = [layer.mlp.gate.seen.pop() for layer in model.model.layers]
        return {"recurrent": np.stack([cache.layers[i].recurrent_states[0][0].numpy() for i in linear]),
                "conv": np.stack([cache.layers[i].conv_states[0][0].numpy() for i in linear]),
                **{name: np.stack([s[i].numpy() for s in seen]) for i, name in enumerate(("router_logits", "probs",
                                                                                          "topk"))}}

    with qwen35._TensorFloatIsDouble():
        passes, counter = greedy_passes(model, ids, qwen35.NEW_TOKENS, states)
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    prefill = passes[0]
    steps = {f"step_{name}": np.stack([p[name] if name in ("recurrent", "conv") else p[name][:, -1] for p in passes])
             for name in ("layers", "recurrent", "conv", "router_logits", "probs", "topk")}
    return {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
            "layers": prefill["layers"], "logits": prefill["logits"], "chunk": np.array(qwen35.CHUNK),
            "linear_layers": np.array(linear), "moe_layers": np.arange(len(LAYER_TYPES)),
            "router_logits": prefill["router_logits"], "probs": prefill["probs"], "topk": prefill["topk"],
            "step_logits": np.stack([p["logits"][-1] for p in passes]), **steps,
            "float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def smallest_margin(ref: dict[str, np.ndarray]) -> float:
    """The least gap, over every token of every pass and layer, between the k-th and (k+1)-th router score and
    between the same two router logits."""
    ordered = [-np.sort(-ref[name], axis=-1) for name in ("probs", "step_probs", "router_logits", "step_router_logits")]
    return float(min((o[..., TOP_K - 1] - o[..., TOP_K]).min() for o in ordered))


# -- the GGUF files and the references of their dequantized weights ---------------------------------------------
def hf_tensors_of(path: Path, config) -> dict[str, torch.Tensor]:
    """make_qwen35_fixtures.hf_tensors_of, the merged experts (E × rows × columns) split one tensor per expert as the
    Hub stores them (and transformers 5's save_pretrained writes them), the shared expert's gate a one-row matrix."""
    tensors = qwen35.hf_tensors_of(path, config, HF_OF_GGUF)
    for layer in range(config.num_hidden_layers):
        base = f"model.layers.{layer}.mlp"
        for name in ("gate", "up", "down"):
            merged = tensors.pop(f"{base}.experts.{name}.weight")
            tensors |= {f"{base}.experts.{e}.{name}_proj.weight": merged[e].clone() for e in range(len(merged))}
        tensors[f"{base}.shared_expert_gate.weight"] = tensors[f"{base}.shared_expert_gate.weight"].reshape(1, -1)
    return tensors


def gguf_reference(path: Path, folder: Path, ids: list[int], original: dict | None = None) -> dict[str, np.ndarray]:
    """transformers' float64 run of the GGUF's dequantized weights (`original`: the weights they must be close to)."""
    import transformers

    config = transformers.Qwen3_5MoeTextConfig.from_pretrained(folder)
    with qwen35.rebuilt_folder(path, config, hf_tensors_of, original) as rebuilt:
        return run(load(Path(rebuilt)), ids)


def make_gguf(folder: Path, ids: list[int]) -> dict[str, dict[str, np.ndarray]]:
    """Each GGUF (written into gguf-qwen3_5_moe/) and the reference of its dequantized weights, by type."""
    from safetensors.torch import load_file

    out = OUT / "gguf-qwen3_5_moe"
    out.mkdir(exist_ok=True)
    original = dict(load_file(folder / "model.safetensors"))
    refs = {}
    for outtype in ("f32", "q8_0"):
        path = out / f"qwen35moe-{outtype}.gguf"
        qwen35.convert(folder, path, outtype)
        refs[outtype] = gguf_reference(path, folder, ids, original if outtype == "f32" else None)
    return refs


def main() -> None:
    """The first seed whose folder's reference and both GGUFs' keep every router margin ≥ MIN_MARGIN."""
    import transformers

    assert counter_sees_float32()
    pure_float64()
    tokenizer = byte_bpe(["<|endoftext|>"])
    folder = OUT / "qwen3_5_moe"
    folder.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode(PROMPT).ids
    assert len(ids) > 2 * qwen35.CHUNK, "the prompt must cross chunk boundaries"
    for seed in range(SEED, SEED + 200):
        torch.manual_seed(seed)
        model = transformers.Qwen3_5MoeForCausalLM(config(tokenizer.get_vocab_size()))
        randomize(model, seed)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.gate.weight.mul_(ROUTER_SCALE)
        model.save_pretrained(folder)
        ref = run(load(folder), ids)
        margin = smallest_margin(ref)
        refs = make_gguf(folder, ids) if margin >= MIN_MARGIN else {}
        margins = [margin] + [smallest_margin(r) for r in refs.values()]
        print(f"seed {seed}: smallest router margins {', '.join(f'{m:.3g}' for m in margins)}")
        if refs and min(margins) >= MIN_MARGIN:
            break
    else:
        sys.exit("no seed gave router margins of at least MIN_MARGIN")
    tokenizer.save(str(folder / "tokenizer.json"))
    np.savez_compressed(folder / "reference.npz", **ref, seed=np.array(seed))
    for outtype, gguf_ref in refs.items():
        np.savez_compressed(OUT / "gguf-qwen3_5_moe" / f"reference-{outtype}.npz", **gguf_ref)
        print(f"qwen35moe-{outtype}.gguf: greedy {gguf_ref['greedy_ids'].tolist()}")
    print(f"qwen3_5_moe: seed {seed}, {len(ids)} prompt tokens, {int(ref['ops'])} operators dispatched, "
          f"{int(ref['float32_ops'])} read or wrote float32; greedy {ref['greedy_ids'].tolist()}")


if __name__ == "__main__":
    main()
