"""Every weight of a model, by name and shape.

One naming scheme serves the scenario file, the engine, messages and edits:
`embed`, `pos_embed`, `type_embed`, `ln_embed.w|b`, `blocks.L.ln1.w|b`,
`blocks.L.attn.wq|wk|wv|wo` (`bq|bk|bv|bo`; wk, wv are [d_model, kv_heads·d_head]),
`blocks.L.attn.q_norm.w|k_norm.w` ([d_head], Qwen3/Gemma 3), `blocks.L.ln1_post.w` and `ln2_post.w` (Gemma),
`blocks.L.ln2.w|b`, `blocks.L.mlp.w_gate|w_up|w_down` (or `w_in|w_out`), `ln_final.w|b`,
`unembed`. Matrices are written [input feature, output feature]: y = x @ W.
"""

from __future__ import annotations

from engine import layers
from engine.causes import Cause
from engine.layers import per_layer_input
from engine.spec import ModelSpec, NormKind, Positions

Shape = tuple[int, ...]


def parameter_shapes(model: ModelSpec, vocab_size: int) -> dict[str, Shape]:
    """All parameters `model` needs, in document order, with their shapes."""
    d = model.d_model
    shapes: dict[str, Shape] = {"embed": (vocab_size, d)}
    if model.positions == Positions.LEARNED:
        shapes["pos_embed"] = (model.max_positions, d)
    if model.type_vocab:
        shapes["type_embed"] = (model.type_vocab, d)
    if model.embed_norm:
        shapes.update(_norm_shapes(model, "ln_embed"))
    shapes.update({name: tuple(vocab_size if n == "vocab" else n for n in shape)
                   for name, shape in per_layer_input.parameter_shapes(model).items()})
    for layer, block in enumerate(model.blocks):  # each kind names its own parameters
        mixer, ffn = layers.block_kinds(block)
        prefix = f"blocks.{layer}"
        shapes.update(_norm_shapes(model, f"{prefix}.ln1"))
        shapes.update(mixer.parameter_shapes(model, layer, block))
        if model.post_norms:
            shapes.update(_norm_shapes(model, f"{prefix}.ln1_post"))
        shapes.update(_norm_shapes(model, f"{prefix}.ln2"))
        shapes.update(ffn.parameter_shapes(model, layer, block))
        if model.post_norms:
            shapes.update(_norm_shapes(model, f"{prefix}.ln2_post"))
        shapes.update(per_layer_input.block_shapes(model, layer))
    if model.lm_head and model.final_norm:
        shapes.update(_norm_shapes(model, "ln_final"))
    if model.lm_head and not model.tied_unembed:
        shapes["unembed"] = (d, vocab_size)
    return shapes


def _norm_shapes(model: ModelSpec, prefix: str) -> dict[str, Shape]:
    if model.norm.kind == NormKind.NONE or not model.norm.affine:
        return {}
    shapes = {f"{prefix}.w": (model.d_model,)}
    if model.norm.kind == NormKind.LAYERNORM:
        shapes[f"{prefix}.b"] = (model.d_model,)
    return shapes


def format_shape(shape: Shape) -> str | Cause:
    """`4×8`, as a fact of a cause; a scalar's shape is a cause itself, which a front end words."""
    return "×".join(map(str, shape)) or Cause("value.scalar")


def name_parts(name: str) -> list[str | int]:
    """`blocks.0.attn.wq` -> ["blocks", 0, "attn", "wq"]: the keys to walk in the document."""
    return [int(part) if part.isdigit() else part for part in name.split(".")]
