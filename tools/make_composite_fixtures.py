"""Write tests/fixtures/NAME-composite/ for NAME the composites' model_types (qwen3_5, qwen3_5_moe, gemma4, gemma3,
lfm2_vl, mistral3): tiny random checkpoints laid out as the Hub's are, and transformers' true float64 outputs of each.

    /work/refenv/bin/python tools/make_composite_fixtures.py

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py. The Hub
ships Qwen3.5 (dense and MoE), Gemma 4, Gemma 3 (4b and up), LFM2-VL and Mistral Small 3.1 as composites,
…ForConditionalGeneration: config.json's `model_type` is the composite's, the language model's settings sit under
`text_config` beside a `vision_config`, and the tensors are named `model.language_model.*`, `model.visual.*` (Gemma 4:
`model.vision_tower.*`, `model.embed_vision.*`; LFM2-VL: `model.vision_tower.*`, `model.multi_modal_projector.*`)
and `lm_head.weight` when it is not tied. Gemma 3 and Mistral 3 keep llava's older names, `language_model.model.*`,
`language_model.lm_head.weight`, `vision_tower.*`, `multi_modal_projector.*`, which transformers 5 still writes.

Each fixture is that class's save_pretrained, with a one-layer vision tower of width 16 (random, never run: the
prompts are text) and as its language model the text fixture of the same family (tests/fixtures/qwen3_5,
qwen3_5_moe, gemma4, gemma3, lfm2, mistral: their configs and weights, from make_qwen35_fixtures.py,
make_qwen35moe_fixtures.py, make_gemma4_fixtures.py, make_fixtures.py, make_lfm2_fixtures.py; the MoE one keeps the
seed whose router margins are ≥ 1e-3). The dense Qwen3.5 and the Mistral 3 composites are untied (the big Hub sizes
are): their lm_head is a new random matrix, and `tie_word_embeddings` is false at the top, where the composite reads
it, and in text_config. The others tie.

The reference is the composite's own forward (transformers computes the positions: Qwen3.5's mrope rows, equal for
text), with each text script's float64 patches on its modelling module and its float32 buffers rebuilt on the
language model; those scripts' `run` reads the passes through `TextView` (the language model's layers and config,
the composite called). Gemma 3's and Mistral's are make_fixtures.py's (the sequence recomputed at each greedy step),
here under float64_reference's counter too. Each reference.npz holds the arrays of that family's text reference
(ids, greedy_ids, layers, logits, step_logits, step_layers, and the family's states or routes), `float32_ops` (0)
included.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_gemma4_fixtures as gemma4  # noqa: E402
import make_qwen35_fixtures as qwen35  # noqa: E402
import make_qwen35moe_fixtures as qwen35moe  # noqa: E402
import make_fixtures  # noqa: E402
import make_lfm2_fixtures as lfm2  # noqa: E402
import float64_reference  # noqa: E402
from float64_reference import Float32Counter, counter_sees_float32  # noqa: E402
from make_fixtures import OUT, randomize  # noqa: E402

SEED = 26
QWEN_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4, temporal_patch_size=2,
                   spatial_merge_size=2, out_hidden_size=32, num_position_embeddings=16)
GEMMA_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=2, head_dim=8, patch_size=4, position_embedding_size=16, pooling_kernel_size=2)
SIGLIP = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
              patch_size=4)  # Gemma 3's tower: 4 × 4 patches pooled to mm_tokens_per_image 4
PIXTRAL = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, head_dim=8,
               image_size=16, patch_size=4)  # Mistral Small 3.1's
SIGLIP2 = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, patch_size=4,
               num_patches=16)  # LFM2-VL's


class TextView:
    """A composite as the text scripts' reference code sees a causal LM: `model` is its language model (its
    `layers`, `rotary_emb`, embeddings), `config` its text config; a call runs the whole composite."""

    def __init__(self, composite):
        self.composite, self.model = composite, composite.model.language_model
        self.config = composite.config.text_config

    def __call__(self, *args, **kwargs):
        return self.composite(*args, **kwargs)


def _recomputed(view: TextView, ids: list[int]) -> dict[str, np.ndarray]:
    """make_fixtures.py's reference of Gemma 3 and Mistral (the whole sequence run again at each greedy step:
    step_logits, step_layers), under the float32 counter."""
    with Float32Counter() as counter:
        ref = make_fixtures.recomputed(view, ids, make_fixtures.NEW_TOKENS)
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    return ref | {"float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def _widened(view: TextView) -> None:
    """The rotary module's float32 inv_freq buffers (one per layer type, Gemma 3's) widened: make_fixtures._rotary
    computes its own in float64 and only checks it against them."""
    rotary = view.model.rotary_emb
    for name in [name for name, _ in rotary.named_buffers() if name.endswith("inv_freq")]:
        setattr(rotary, name, getattr(rotary, name).to(torch.float64))


def _gemma3_buffers(view: TextView) -> None:
    """Gemma 3's float32 buffers in the composite's language model: the embedding scale (√d rounded) made again in
    float64, and the inv_freq widened."""
    embed = view.model.embed_tokens
    embed.embed_scale = torch.tensor(embed.scalar_embed_scale, dtype=torch.float64)
    _widened(view)


def _seen(view: TextView) -> None:
    """make_qwen35moe_fixtures.load's: each router keeps what it saw, for the routes."""
    qwen35.rebuild_rotary(view)
    for layer in view.model.layers:
        layer.mlp.gate.seen = []


@dataclass(frozen=True)
class Family:
    text: str  # the text fixture: its folder under tests/fixtures and its class's prefix in transformers
    prefix: str
    towers: dict  # the composite config's settings besides its text_config
    tied: bool
    prepare: object  # what its script does to a loaded model before the reference passes
    run: object


FAMILIES = {
    "qwen3_5": Family("qwen3_5", "Qwen3_5", {"vision_config": QWEN_VISION}, False, qwen35.rebuild_rotary, qwen35.run),
    "qwen3_5_moe": Family("qwen3_5_moe", "Qwen3_5Moe", {"vision_config": QWEN_VISION}, True, _seen, qwen35moe.run),
    "gemma4": Family("gemma4", "Gemma4", {"vision_config": GEMMA_VISION}, True, gemma4.rebuild_float32_buffers,
                     gemma4.run),
    "gemma3": Family("gemma3", "Gemma3", {"vision_config": SIGLIP, "mm_tokens_per_image": 4}, True,
                     _gemma3_buffers, _recomputed),
    "mistral3": Family("mistral", "Mistral3", {"vision_config": PIXTRAL}, False, _widened, _recomputed),
    "lfm2_vl": Family("lfm2", "Lfm2Vl", {"vision_config": SIGLIP2, "projector_hidden_size": 16}, True,
                      float64_reference.rebuild_rotary, lfm2.run),
}


def composite_of(family: Family, seed: int):
    """The composite class's model: the text fixture as its language model, a random vision tower (and lm_head)."""
    import transformers

    causal = {"Lfm2Vl": "Lfm2", "Mistral3": "Mistral"}.get(family.prefix, family.prefix)  # the text model's class
    text = getattr(transformers, f"{causal}ForCausalLM").from_pretrained(OUT / family.text, dtype=torch.float32)
    text_config = text.config.to_dict() | {"tie_word_embeddings": family.tied}
    config = getattr(transformers, f"{family.prefix}Config")(text_config=text_config, tie_word_embeddings=family.tied,
                                                             **family.towers)
    model = getattr(transformers, f"{family.prefix}ForConditionalGeneration")(config)
    randomize(model, seed)  # every parameter, the language model's then overwritten with the text fixture's
    model.model.language_model.load_state_dict(text.model.state_dict())
    if family.tied:
        model.tie_weights()
    else:
        assert not torch.equal(model.lm_head.weight, model.model.language_model.embed_tokens.weight)
    return model


def reference(family: Family, folder: Path, ids: list[int]) -> dict[str, np.ndarray]:
    import transformers

    cls = getattr(transformers, f"{family.prefix}ForConditionalGeneration")
    extra = {"experts_implementation": "eager"} if family.text == "qwen3_5_moe" else {}
    view = TextView(cls.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager", **extra).eval())
    family.prepare(view)
    return family.run(view, ids)


def main() -> None:
    assert counter_sees_float32()
    qwen35.pure_float64()
    qwen35moe.pure_float64()
    gemma4.pure_float64()
    make_fixtures.pure_float64_module("gemma3")
    make_fixtures.pure_float64_module("mistral")
    lfm2.pure_float64()
    for name, family in FAMILIES.items():
        ids = np.load(OUT / family.text / "reference.npz")["ids"].tolist()  # the text fixture's prompt
        folder = OUT / f"{name}-composite"  # the composite's model_type
        folder.mkdir(parents=True, exist_ok=True)
        composite_of(family, SEED).save_pretrained(folder)
        shutil.copy(OUT / family.text / "tokenizer.json", folder)
        ref = reference(family, folder, ids)
        np.savez_compressed(folder / "reference.npz", **ref)
        print(f"{folder.name}: {len(ids)} prompt tokens, {int(ref['ops'])} operators dispatched, "
              f"{int(ref['float32_ops'])} read or wrote float32; greedy {ref['greedy_ids'].tolist()}")


if __name__ == "__main__":
    main()
