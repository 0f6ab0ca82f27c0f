"""Write scenarios/encoder004.yaml from the printed matrices of 004_55ab6efb29f446bd.txt.

    python tools/make_encoder004.py ../shared/seeds/004_55ab6efb29f446bd.txt

Every number is copied from the text as printed (inputs and expectations alike); the
text's own row comments are dropped. What the text leaves open is said in the file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tinyllm_tui" / "scenarios" / "encoder004.yaml"
ROW = re.compile(r"\[([^\[\]]*)\]")


def printed(text: str, header: str, occurrence: int = 0) -> list[list[str]]:
    """The rows of the matrix printed after the line starting with `header`, numbers as text."""
    starts = [m.end() for m in re.finditer(rf"(?m)^{re.escape(header)}\s*\[", text)]
    rows = []
    for line in text[starts[occurrence]:].splitlines()[1:]:
        if line.strip().startswith("]"):
            break
        code = line.split("#")[0].replace("，", ",")
        for match in ROW.finditer(code):
            rows.append([cell.strip() for cell in match.group(1).split(",") if cell.strip()])
    return rows


def flow(rows: list[list[str]], indent: int) -> str:
    pad = " " * indent
    return "\n".join(f"{pad}- [{', '.join(_yaml(v) for v in row)}]" for row in rows)


def _yaml(value: str) -> str:
    return '"−∞"' if value == "-inf" else value


def expectation(op: str, rows: list[list[str]], note: str, *, head: int | None = None,
                positions: list[int] | None = None, cols: list[int] | None = None) -> str:
    lines = [f"  - op: {op}"] + ([f"    head: {head}"] if head is not None else [])
    lines += [f"    rows: {positions}"] if positions is not None else []
    lines += [f"    cols: {cols}"] if cols is not None else []
    return "\n".join(lines + [f"    note: \"{note}\"", "    values:", flow(rows, 6)])


HEAD = """\
# The encoder layer of 004_55ab6efb29f446bd.txt: "今天天气真好" → [今天, 天气, 真, 好] padded to 8,
# the text's input_vectors (embedding + positions, already added: positions are off here),
# W_q = W_k = W_v = W_o = the one printed 8×8 matrix, 4 heads of width 2, key-side padding mask,
# post-LN Add&Norm (γ = 1, β = 0), FFN 8→32→8 with GELU (exact erf), zero biases.
# Choices where the text is open: W_o is the same matrix (its Z computation uses W_q's columns);
# LayerNorm eps 1e-5; dropout stays off (the text's Y3 zeroes cells by hand); the embedding
# table is unused (zeros) since the inputs are given as vectors.
# The expect: tables are the text's printed results, copied as printed; many are illustrative
# and do not follow from the printed inputs: `tinyllm-tui check` shows which cells do.
# Written by tools/make_encoder004.py from the seed text.
title: encoder004 · 今天 天气 真 好 + PAD

vocab:
  tokens: [PAD, 今天, 天气, 真, 好]
  pad: PAD

model:
  d_model: 8
  layers: 1
  heads: 4            # the text's 头1..头4 are heads 0..3 here
  norm: {kind: layernorm, placement: post, eps: 1.0e-5, affine: true}
  positions: none
  ffn: {kind: gelu, d_ff: 32}
  bias: true
  causal: false       # an encoder: every position reads every real position
  lm_head: false      # no output head and no decoding: the layer's output is the result
"""


def main(seed: Path) -> None:
    text = seed.read_text(encoding="utf-8")
    w = printed(text, "W_q = W_k = W_v =")
    zeros8, ones8 = "[" + ", ".join(["0.0"] * 8) + "]", "[" + ", ".join(["1.0"] * 8) + "]"
    attn = "\n".join(f"        {name}:\n{flow(w, 10)}" for name in ("wq", "wk", "wv", "wo"))
    biases = "\n".join(f"        {name}: {zeros8}" for name in ("bq", "bk", "bv", "bo"))
    weights = f"""
weights:
  embed: zeros          # unused: the request gives its input vectors
  blocks:
    - ln1: {{w: {ones8}, b: {zeros8}}}
      attn:
{attn}
{biases}
      ln2: {{w: {ones8}, b: {zeros8}}}
      mlp:
        w_in:   # the text's W1 (8×32)
{flow(printed(text, "W1 ="), 10)}
        # The text's W2 is said to be 32×8 but prints 33 rows; the 33rd,
        # [{", ".join(printed(text, "W2 =")[32])}], is left out.
        w_out:
{flow(printed(text, "W2 =")[:32], 10)}
        b_in: zeros
        b_out: zeros

requests:
  - tokens: [今天, 天气, 真, 好]
    pad_to: 8           # positions 4-7 hold PAD: masked as keys, still computed as queries
    vectors:            # the text's input_vectors
{flow(printed(text, "input_vectors ="), 6)}
"""
    all8 = list(range(8))
    expects = [
        expectation("blocks.0.attn.hook_q", printed(text, "Q ="), "Q = input_vectors × W_q"),
        expectation("blocks.0.attn.hook_attn_scores", printed(text, "head1_scores =", 0), "head1_scores, 4×4",
                    head=0, positions=[0, 1, 2, 3], cols=[0, 1, 2, 3]),
        expectation("blocks.0.attn.hook_attn_scores", [r[:4] for r in printed(text, "head1_scores =", 1)],
                    "head1_scores before the mask, real key columns", head=0, positions=all8, cols=[0, 1, 2, 3]),
        expectation("blocks.0.attn.hook_attn_scores", printed(text, "masked_scores ="), "masked_scores", head=0),
        expectation("blocks.0.attn.hook_pattern", printed(text, "attention_weights ="), "attention_weights", head=0),
        expectation("blocks.0.attn.hook_z", printed(text, "head1_output ="), "head1_output", head=0),
        expectation("blocks.0.attn.hook_concat", printed(text, "concatenated ="), "concatenated"),
        expectation("blocks.0.hook_attn_out", printed(text, "Z ="), "Z = concatenated × W_o"),
        expectation("blocks.0.hook_resid_mid", printed(text, "X + Y = X_res ="), "X_res = X + Z"),
        expectation("blocks.0.ln1.hook_out", printed(text, "z ="), "LayerNorm z (γ=1, β=0)"),
        expectation("blocks.0.mlp.hook_pre", printed(text, "Y1 ="), "Y1 = LN · W1 + b1"),
        expectation("blocks.0.mlp.hook_post", printed(text, "Y2 ="), "Y2 = GELU(Y1)"),
        expectation("blocks.0.hook_mlp_out", printed(text, "FFN_out ="), "FFN_out"),
        expectation("blocks.0.hook_resid_post", printed(text, "residual ="), "residual (second Add)"),
        expectation("blocks.0.ln2.hook_out", printed(text, "encoder_final ="), "encoder_final"),
    ]
    OUT.write_text(HEAD + weights + "\nexpect:\n" + "\n".join(expects) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
