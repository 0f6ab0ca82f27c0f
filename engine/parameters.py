"""Every weight of a model, by name and shape.

One naming scheme serves the scenario file, the engine, messages and edits:
`embed`, `pos_embed`, `type_embed`, `ln_embed.w|b`, `blocks.L.ln1.w|b`,
`blocks.L.attn.wq|wk|wv|wo` (`bq|bk|bv|bo`; wk, wv are [d_model, kv_heads·d_head]),
`blocks.L.attn.q_norm.w|k_norm.w` ([d_head], Qwen3/Gemma 3), `blocks.L.ln1_post.w` and `ln2_post.w` (Gemma),
`blocks.L.ln2.w|b`, `blocks.L.mlp.w_gate|w_up|w_down` (or `w_in|w_out`), `ln_final.w|b`,
`unembed`. Matrices are written [input feature, output feature]: y = x @ W.
"""

from __future__ import annotations

from engine.spec import FfnKind, ModelSpec, NormKind, Positions

Shape = tuple[int, ...]


def parameter_shapes(model: ModelSpec, vocab_size: int) -> dict[str, Shape]:
    """All parameters `model` needs, in document order, with their shapes."""
    d, a, f = model.d_model, model.d_attn, model.d_ff
    shapes: dict[str, Shape] = {"embed": (vocab_size, d)}
    if model.positions == Positions.LEARNED:
        shapes["pos_embed"] = (model.max_positions, d)
    if model.type_vocab:
        shapes["type_embed"] = (model.type_vocab, d)
    if model.embed_norm:
        shapes.update(_norm_shapes(model, "ln_embed"))
    for layer in range(model.n_layers):
        block = f"blocks.{layer}"
        shapes.update(_norm_shapes(model, f"{block}.ln1"))
        widths = {"q": a, "k": model.d_kv, "v": model.d_kv}
        shapes.update({f"{block}.attn.w{n}": (d, width) for n, width in widths.items()})
        if model.qk_norm:
            shapes.update({f"{block}.attn.{n}_norm.w": (model.d_head,) for n in "qk"})
        shapes[f"{block}.attn.wo"] = (a, d)
        shapes.update({f"{block}.attn.b{n}": (width,) for n, width in widths.items() if model.has_bias(n)})
        if model.has_bias("o"):
            shapes[f"{block}.attn.bo"] = (d,)
        if model.post_norms:
            shapes.update(_norm_shapes(model, f"{block}.ln1_post"))
        shapes.update(_norm_shapes(model, f"{block}.ln2"))
        shapes.update(_mlp_shapes(model, f"{block}.mlp", d, f))
        if model.post_norms:
            shapes.update(_norm_shapes(model, f"{block}.ln2_post"))
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


def _mlp_shapes(model: ModelSpec, prefix: str, d: int, f: int) -> dict[str, Shape]:
    if FfnKind(model.ffn).gated:
        shapes = {f"{prefix}.w_gate": (d, f), f"{prefix}.w_up": (d, f), f"{prefix}.w_down": (f, d)}
        biases = {f"{prefix}.b_gate": (f,), f"{prefix}.b_up": (f,), f"{prefix}.b_down": (d,)}
    else:
        shapes = {f"{prefix}.w_in": (d, f), f"{prefix}.w_out": (f, d)}
        biases = {f"{prefix}.b_in": (f,), f"{prefix}.b_out": (d,)}
    return shapes | biases if model.has_bias("mlp") else shapes


def format_shape(shape: Shape) -> str:
    return "×".join(map(str, shape)) or "a single number (no dimensions)"


def name_parts(name: str) -> list[str | int]:
    """`blocks.0.attn.wq` -> ["blocks", 0, "attn", "wq"]: the keys to walk in the document."""
    return [int(part) if part.isdigit() else part for part in name.split(".")]
