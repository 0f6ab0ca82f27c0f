"""Write the scenarios whose weights the seed texts do not print: decoder2, chunked, eos7.

    python tools/make_scenarios.py

Weights are drawn from seeded NumPy generators and rounded, so the YAML holds
exactly what the engine computes with; eos7's output head is fitted by least
squares so that 我爱 continues 学习 → ！ → EOS. Rerunning rewrites identical files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine import Session, load_scenario_text
from engine.loading.document import Node, parse
from engine.loading.scenario_file import _model
from engine.parameters import name_parts, parameter_shapes

OUT = Path(__file__).resolve().parents[1] / "tinyllm_tui" / "scenarios"


def matrix(values: np.ndarray, indent: int, labels: list[str] | None = None) -> str:
    pad = " " * indent
    rows = []
    for i, row in enumerate(np.atleast_2d(values)):
        text = f"{pad}- [{', '.join(f'{x + 0.0:g}' for x in row)}]"  # + 0.0: no "-0"
        rows.append(text + (f"  # {labels[i]}" if labels else ""))
    return "\n".join(rows)


def block(weights: dict[str, np.ndarray], layer: int, mlp: tuple[str, ...]) -> str:
    lines = ["    - attn:"]
    for name in ("wq", "wk", "wv", "wo"):
        lines += [f"        {name}:", matrix(weights[f"blocks.{layer}.attn.{name}"], 10)]
    lines.append("      mlp:")
    for name in mlp:
        lines += [f"        {name}:", matrix(weights[f"blocks.{layer}.mlp.{name}"], 10)]
    return "\n".join(lines)


def weights_text(weights: dict[str, np.ndarray], layers: int, tokens: list[str], mlp: tuple[str, ...]) -> str:
    labels = [f"{i} · {t}" for i, t in enumerate(tokens)]
    parts = ["weights:", "  embed:", matrix(weights["embed"], 4, labels), "  blocks:"]
    parts += [block(weights, layer, mlp) for layer in range(layers)]
    if "unembed" in weights:
        parts += ["  unembed:  # rows: features; columns: " + ", ".join(tokens), matrix(weights["unembed"], 4)]
    return "\n".join(parts) + "\n"


def random_weights(seed: int, shapes: dict[str, tuple[int, ...]], scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: np.round(rng.normal(0.0, scale, shape), 2) for name, shape in shapes.items()}


# -- the 2-layer decoder of 003 (A.2-A.9), with weights of our own ---------------------------
DECODER2_TOKENS = ["PAD", "我", "爱", "学习", "你", "！", "好", "的"]
DECODER2_MODEL = """\
vocab:
  tokens: [PAD, 我, 爱, 学习, 你, ！, 好, 的]
  pad: PAD

model:
  d_model: 4
  layers: 2           # each layer has its own KV cache
  heads: 1            # one head of width 4: scores are divided by √4
  norm: {kind: layernorm, placement: pre, eps: 1.0e-5, affine: false}
  final_norm: true
  positions: seed_sin # 0.1·sin((p+1)/(j+1)) added to the embedding (A.2)
  ffn: {kind: relu, d_ff: 8}
  bias: false
  tied_unembed: false # a separate 4×8 output matrix (A.7)
"""


def decoder2_weights() -> dict[str, np.ndarray]:
    shapes = {"embed": (8, 4)}
    for layer in range(2):
        shapes |= {f"blocks.{layer}.attn.{w}": (4, 4) for w in ("wq", "wk", "wv", "wo")}
        shapes |= {f"blocks.{layer}.mlp.w_in": (4, 8), f"blocks.{layer}.mlp.w_out": (8, 4)}
    shapes["unembed"] = (4, 8)
    return random_weights(2026, shapes, 0.5)


def decoder2(requests: str, decode: str, title: str, about: str) -> str:
    head = (f"# {about}\n# The seed does not print its weights: these were drawn once with\n"
            "# numpy.random.default_rng(2026).normal(0, 0.5) and rounded to 2 decimals\n"
            "# (tools/make_scenarios.py writes this file).\n")
    return (head + f"title: {title}\n\n" + DECODER2_MODEL + "\n"
            + weights_text(decoder2_weights(), 2, DECODER2_TOKENS, ("w_in", "w_out")) + "\n" + requests + "\n" + decode)


# -- the 7-token EOS example of 003 ---------------------------------------------------------
EOS7_TOKENS = ["PAD", "我", "爱", "学习", "你", "！", "EOS"]
EOS7_HEAD = """\
# The 7-token model of 003_b083148e430164ac.txt ("我爱" → 学习 → ！ → EOS): one layer, one head,
# width 4, tanh FFN 4→8→4, no normalisation, no positions. Attention and FFN weights were drawn
# with numpy.random.default_rng(7).normal(0, 0.6), rounded to 2 decimals; the output head was then
# fitted by least squares so that the last hidden state of 我爱, 我爱学习 and 我爱学习！ scores
# 学习, ！ and EOS highest (rounded to 3 decimals). tools/make_scenarios.py writes this file.
title: eos7 · 我爱 → 学习 → ！ → EOS

vocab:
  tokens: [PAD, 我, 爱, 学习, 你, ！, EOS]
  pad: PAD
  eos: EOS

model:
  d_model: 4
  layers: 1
  heads: 1
  norm: {kind: none}
  positions: none
  ffn: {kind: tanh, d_ff: 8}
  bias: false
  tied_unembed: false
"""
EOS7_REQUESTS = """\
requests:
  - tokens: [我, 爱]   # choices 学习 (3), ！ (5), EOS (6); cache lengths 2, 3, 4

decode:
  rule: greedy
  forbid: [PAD]
  max_new_tokens: 8    # EOS stops it first
"""
EOS7_PREFIXES, EOS7_TARGETS = [[1, 2], [1, 2, 3], [1, 2, 3, 5]], [3, 5, 6]


def eos7() -> str:
    shapes = {"embed": (7, 4)} | {f"blocks.0.attn.{w}": (4, 4) for w in ("wq", "wk", "wv", "wo")}
    shapes |= {"blocks.0.mlp.w_in": (4, 8), "blocks.0.mlp.w_out": (8, 4)}
    weights = random_weights(7, shapes, 0.6)
    weights["unembed"] = np.zeros((4, 7))
    hidden = np.array([last_hidden(weights, prefix) for prefix in EOS7_PREFIXES])  # (3, 4)
    targets = np.zeros((3, 7))
    targets[np.arange(3), EOS7_TARGETS] = 4.0
    weights["unembed"] = np.round(np.linalg.lstsq(hidden, targets, rcond=None)[0], 3)
    return EOS7_HEAD + "\n" + weights_text(weights, 1, EOS7_TOKENS, ("w_in", "w_out")) + "\n" + EOS7_REQUESTS


def last_hidden(weights: dict[str, np.ndarray], prefix: list[int]) -> np.ndarray:
    text = EOS7_HEAD + weights_text(weights, 1, EOS7_TOKENS, ("w_in", "w_out"))
    text += f"requests:\n  - tokens: {prefix}\n    max_new_tokens: 1\n"
    states = [s for s in Session(load_scenario_text(text)).steps() if s.name == "blocks.0.hook_resid_post"]
    return np.asarray(states[-1].values)[-1]


# -- a Llama-like toy: RMSNorm, RoPE, SwiGLU, grouped-query attention, a sliding layer -----------------
GQA_TOY_HEAD = """\
# A hand-written Llama-like toy: what a Llama/Qwen/Mistral checkpoint computes, small enough to read.
#   - pre-RMSNorm with gains, a SwiGLU FFN 8→8→8, a final norm and a tied output head;
#   - RoPE (half-split, θ = 10000) turning each head's q and k by its position;
#   - grouped-query attention: 4 query heads of width 2 share 2 kv heads (query head h reads kv head
#     h // 2), so each layer's K/V cache rows are 4 wide where q is 8;
#   - layer 0 slides (window 4: a query reads itself and the 3 keys before it), layer 1 sees every key.
# `diff --inject gqa-modulo` makes query head h read kv head h % 2 on the cached path: heads 1 and 2
# read the wrong cache columns and the diff shows it from the first scores on.
# Weights: numpy.random.default_rng(24).normal(0, 0.5), rounded to 2 decimals; the norm gains are
# 1 + normal(0, 0.1) (tools/make_scenarios.py writes this file).
title: gqa toy · RoPE, GQA 4 heads / 2 kv heads, a sliding layer

vocab:
  tokens: [PAD, 我, 爱, 学习, 你, ！, 好, 的]
  pad: PAD

model:
  d_model: 8
  heads: 4            # d_head 2
  kv_heads: 2         # grouped-query attention
  layers:
    - {mixer: attention, window: 4}   # sliding
    - {mixer: attention}              # full
  norm: {kind: rmsnorm, placement: pre, eps: 1.0e-6, affine: true}
  final_norm: true
  positions: rope
  rope: {theta: 10000.0}
  ffn: {kind: gated_silu, d_ff: 8}
  bias: false
  tied_unembed: true
"""
GQA_TOY_REQUESTS = """\
requests:
  - tokens: [我, 爱, 学习, 你, 好]   # longer than the window: layer 0's first keys drop out of view

decode:
  rule: greedy
  forbid: [PAD]
  max_new_tokens: 4
"""


def gqa_toy() -> str:
    spec = _model(Node(parse(GQA_TOY_HEAD, "gqa_toy"), "", 1, "gqa_toy").get("model"))
    shapes = parameter_shapes(spec, len(DECODER2_TOKENS))
    rng = np.random.default_rng(24)
    weights = {name: np.round(1.0 + rng.normal(0.0, 0.1, shape) if name.endswith(".w") and len(shape) == 1
                              else rng.normal(0.0, 0.5, shape), 2) for name, shape in shapes.items()}
    return GQA_TOY_HEAD + "\n" + nested_text(weights, DECODER2_TOKENS) + "\n" + GQA_TOY_REQUESTS


def nested_text(weights: dict[str, np.ndarray], tokens: list[str]) -> str:
    """Every weight in the document's layout (`blocks:` a list of layers), in parameter order."""
    tree: dict = {}
    for name, values in weights.items():
        parts = name_parts(name)
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = values
    labels = [f"{i} · {t}" for i, t in enumerate(tokens)]
    return "weights:\n" + "\n".join(_emit(tree, 2, labels)) + "\n"


def _emit(tree: dict, indent: int, labels: list[str]) -> list[str]:
    pad, lines = " " * indent, []
    for key, value in tree.items():
        if isinstance(value, np.ndarray):
            if value.ndim == 1:
                lines.append(f"{pad}{key}: [{', '.join(f'{x + 0.0:g}' for x in value)}]")
            else:
                lines += [f"{pad}{key}:", matrix(value, indent + 2, labels if key == "embed" else None)]
        elif all(isinstance(k, int) for k in value):  # blocks: a list of layers
            lines.append(f"{pad}{key}:")
            for layer in value.values():
                item = _emit(layer, indent + 4, labels)
                lines += [f"{pad}  - {item[0].lstrip()}", *item[1:]]
        else:
            lines += [f"{pad}{key}:", *_emit(value, indent + 2, labels)]
    return lines


def main() -> None:
    files = {
        "decoder2.yaml": decoder2(
            "requests:\n  - tokens: [我, 爱, 学习]   # ids [1, 2, 3], as in A.7-A.9\n",
            "decode:\n  rule: greedy\n  forbid: [PAD]\n  max_new_tokens: 3   # prefill + 2 cached decode rounds\n",
            "decoder2 · 2 layers, position term, ReLU FFN",
            "The 2-layer, width-4, single-head, vocab-8 decoder of 003_b083148e430164ac.txt (A.2-A.9)."),
        "chunked.yaml": decoder2(
            "requests:\n  - tokens: [我, 爱, 学习, 你, 好]  # chunk 1: positions 0-2; chunk 2: positions 3-4\n",
            "decode:\n  rule: greedy\n  forbid: [PAD]\n  max_new_tokens: 3\n"
            "  prefill_chunk: 3  # 3 cached tokens, then a chunk of 2 with mask key ≤ past + query index (A.10)\n",
            "chunked · 3 cached tokens + a chunk of 2",
            "Chunked prefill (003, A.10) on the decoder2 model: 2 new tokens onto 3 cached ones."),
        "eos7.yaml": eos7(),
        "gqa_toy.yaml": gqa_toy(),
    }
    for name, text in files.items():
        (OUT / name).write_text(text, encoding="utf-8")
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
