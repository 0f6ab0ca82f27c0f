"""Write a random-weight scenario of real width: GPT-2-small's shape by default.

    python tools/make_big_model.py /tmp/gpt2 [--d-model 768 --layers 12 --vocab 50257 ...]
    python tools/make_big_model.py /tmp/big6 --inline      # the 6.7 MB all-weights YAML

Writes DIR/model.yaml, plus DIR/model.safetensors unless --inline puts every weight in the
YAML. Weights are N(0, 1/fan_in) (fan_in = d_model for the embedding tables), LayerNorm gain 1
and bias 0, linear biases N(0, 0.02²); seeded, so a rerun writes identical files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.parameters import name_parts, parameter_shapes  # noqa: E402
from engine.spec import ModelSpec, NormSpec  # noqa: E402
from engine.loading.weightfile import write_weights  # noqa: E402


def spec(d_model: int, layers: int, heads: int, max_positions: int) -> ModelSpec:
    return ModelSpec(
        d_model=d_model, n_layers=layers, n_heads=heads, d_head=d_model // heads, d_ff=4 * d_model,
        norm=NormSpec("layernorm", "pre", 1e-5, affine=True), final_norm=True, ffn="gelu_tanh",
        positions="learned", max_positions=max_positions, bias=True, tied_unembed=True,
    )


def random_weights(model: ModelSpec, vocab: int, dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in parameter_shapes(model, vocab).items():
        leaf = name.rsplit(".", 1)[-1]
        if name.startswith(("blocks.", "ln_final")) and leaf in ("w", "b"):  # LayerNorm
            array = np.full(shape, 1.0 if leaf == "w" else 0.0)
        elif len(shape) == 1:  # a linear layer's bias
            array = 0.02 * rng.standard_normal(shape)
        else:
            fan_in = shape[1] if name in ("embed", "pos_embed") else shape[0]
            array = rng.standard_normal(shape) / np.sqrt(fan_in)
        weights[name] = array.astype(dtype)
    return weights


def model_yaml(model: ModelSpec, vocab: int, prompt: int, new: int, weights_text: str) -> str:
    tokens = ", ".join(f"t{i}" for i in range(vocab))
    prompt_ids = ", ".join(str((7 * i + 3) % vocab) for i in range(prompt))
    return f"""\
# A random-weight model written by tools/make_big_model.py: no meaning, only size.
title: random {model.n_layers}×{model.d_model} · vocab {vocab}
vocab:
  tokens: [{tokens}]
model:
  d_model: {model.d_model}
  layers: {model.n_layers}
  heads: {model.n_heads}
  norm: {{kind: layernorm, placement: pre, eps: 1.0e-5, affine: true}}
  final_norm: true
  positions: learned
  max_positions: {model.max_positions}
  ffn: {{kind: gelu_tanh, d_ff: {model.d_ff}}}
  bias: true
  tied_unembed: true
  causal: true
{weights_text}requests:
  - tokens: [{prompt_ids}]
decode: {{rule: greedy, max_new_tokens: {new}}}
"""


def inline_weights(weights: dict[str, np.ndarray]) -> str:
    """Every weight written out as flow rows, nested as the scenario layout wants."""
    tree: dict = {}
    for name, array in weights.items():
        *parents, leaf = name_parts(name)
        branch = tree
        for part in parents:
            branch = branch.setdefault(part, {})
        branch[leaf] = array
    return "\n".join(["weights:", *_emit(tree, 2)]) + "\n"


def _emit(tree: dict, indent: int):
    pad = " " * indent
    for key, value in tree.items():
        yield f"{pad}{key}:"
        if isinstance(value, np.ndarray) and value.ndim == 1:
            yield f"{pad}  {_row(value)}"
        elif isinstance(value, np.ndarray):
            yield from (f"{pad}  - {_row(row)}" for row in value)
        elif all(isinstance(k, int) for k in value):  # the blocks list
            for item in value.values():
                yield f"{pad}  -"
                yield from _emit(item, indent + 4)
        else:
            yield from _emit(value, indent + 2)


def _row(values: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.2f}" for x in values.tolist()) + "]"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write model.yaml (and model.safetensors) into")
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=None, help="default: d_model / 64")
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--max-positions", type=int, default=1024)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--inline", action="store_true",
                        help="every weight in the YAML (default sizes then: d 128, 4 layers, vocab 2000, 128 positions, "
                        "64 tokens: 7.0 MB)")
    args = parser.parse_args(argv)
    if args.inline:
        defaults = {"d_model": 768, "layers": 12, "vocab": 50257, "prompt": 32, "max_positions": 1024}
        small = {"d_model": 128, "layers": 4, "vocab": 2000, "prompt": 64, "max_positions": 128}
        for key, value in small.items():
            if getattr(args, key) == defaults[key]:
                setattr(args, key, value)
    model = spec(args.d_model, args.layers, args.heads or max(1, args.d_model // 64), args.max_positions)
    weights = random_weights(model, args.vocab, args.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.inline:
        text = inline_weights(weights)
    else:
        write_weights(weights, args.out / "model.safetensors")
        text = "weights: {file: model.safetensors}\n"
    (args.out / "model.yaml").write_text(model_yaml(model, args.vocab, args.prompt, args.new, text), encoding="utf-8")
    print(args.out / "model.yaml")


if __name__ == "__main__":
    main()
