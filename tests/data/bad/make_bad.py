"""Write the bad-input corpus: one file per failure class, and expected.yaml saying what each must produce.

Each case edits scenarios/template.yaml (comments dropped) or a 2-wide one-layer scenario
whose weights sit in a small binary file. The expected line is where a marker text stands
in the edited file, the path and message fragment are written by hand here: nothing is
copied from the program's output. Run from the repository root: python tests/data/bad/make_bad.py
"""

from __future__ import annotations

import re
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import yaml
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
TEMPLATE = "\n".join(line for line in (re.sub(r"\s+#.*$", "", line) for line in
                     (ROOT / "scenarios" / "template.yaml").read_text(encoding="utf-8").splitlines())
                     if line.strip() and not line.lstrip().startswith("#")) + "\n"

# (file, old text, new text, marker on the reported line (None: no line), path, message fragment)
T = "template"
CASES = [
    # YAML itself
    ("syntax_unclosed_flow.yaml", "tokens: [PAD, a, b, c, EOS]", "tokens: [PAD, a, b, c, EOS", "pad: PAD", "", "YAML syntax"),
    ("syntax_bad_indent.yaml", "  layers: 1", "    layers: 1", "layers: 1", "", "YAML syntax"),
    ("syntax_tab_indent.yaml", "  layers: 1", "\tlayers: 1", "layers: 1", "", "YAML syntax"),
    ("syntax_unclosed_quote.yaml", "title: template · every key", "title: \"template", "title", "",
     "YAML syntax: while scanning a quoted scalar: found unexpected end of stream"),
    ("syntax_undefined_alias.yaml", "  pad: PAD", "  pad: *nowhere", "*nowhere", "", "YAML syntax"),
    ("top_level_list.yaml", None, "- vocab\n- model\n", "- vocab", "", "expected a mapping, got a list"),
    ("top_level_scalar.yaml", None, "just some text\n", "just", "", "expected a mapping, got text"),
    ("empty_document.yaml", None, "# nothing but a comment\n", "#", "", "expected a mapping, got nothing"),
    # keys
    ("unknown_top_key.yaml", "decode:", "colour: red\ndecode:", "colour", "colour", "unknown key"),
    ("unknown_model_key.yaml", "  causal: true", "  causal: true\n  dropout_rate: 0.1", "dropout_rate",
     "model.dropout_rate", "unknown key"),
    ("missing_vocab.yaml", "vocab:\n  tokens: [PAD, a, b, c, EOS]\n  pad: PAD\n  eos: EOS\n", "", "title", "",
     "missing required key 'vocab'"),
    ("missing_d_model.yaml", "  d_model: 4\n", "", "layers:", "model", "missing required key 'd_model'"),
    ("missing_weight.yaml", "        wk: identity\n", "", "wq:", "weights.blocks[0].attn", "missing required key 'wk'"),
    ("extra_weight.yaml", "        wk: identity\n", "        wk: identity\n        wz: identity\n", "wz",
     "weights.blocks[0].attn.wz", "unknown key"),
    ("duplicate_key.yaml", "  causal: true", "  causal: true\n  causal: false", "causal: false", "model.causal",
     "this key appears twice"),
    ("blocks_count.yaml", "  layers: 1", "  layers: 2", "- ln1", "weights.blocks", "expected 2 entries (one per layer), got 1"),
    # shapes, at every level
    ("shape_embed_rows.yaml", "    - [0.0, 0.0, 0.0, 1.0]\n  pos_embed", "  pos_embed", ("  embed:", "- ["), "weights.embed",
     "expected 5×4, got 4×4"),
    ("shape_embed_ragged.yaml", "    - [0.0, 1.0, 0.0, 0.0]\n    - [0.0, 0.0, 1.0",
     "    - [0.0, 1.0, 0.0]\n    - [0.0, 0.0, 1.0", "[0.0, 1.0, 0.0]", "weights.embed", "expected 5×4, got 5×3"),
    ("shape_pos_embed.yaml", "  pos_embed: zeros", "  pos_embed: [[0, 0, 0, 0]]", "pos_embed", "weights.pos_embed",
     "expected 8×4, got 1×4"),
    ("shape_wq.yaml", "wq: identity", "wq: [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]", "wq", "weights.blocks[0].attn.wq",
     "expected 4×4, got 4×3"),
    ("shape_wk.yaml", "wk: identity", "wk: [[1, 0, 0, 0], [0, 1, 0, 0]]", "wk", "weights.blocks[0].attn.wk",
     "expected 4×4, got 2×4"),
    ("shape_wv.yaml", "wv: identity", "wv: [1, 0, 0, 0]", "wv", "weights.blocks[0].attn.wv[0]", "expected a list, got number 1"),
    ("shape_wo.yaml", "wo: {scale: 0.5}", "wo: {scale: 0.5, shift: 1}", "wo", "weights.blocks[0].attn.wo.shift", "unknown key"),
    ("shape_bias.yaml", "bq: zeros", "bq: [0, 0, 0]", "bq", "weights.blocks[0].attn.bq", "expected 4, got 3"),
    ("shape_norm_vector.yaml", "- ln1: {w: ones, b: zeros}", "- ln1: {w: [1, 1, 1, 1, 1], b: zeros}", "ln1",
     "weights.blocks[0].ln1.w", "expected 4, got 5"),
    ("shape_final_norm.yaml", "ln_final: {w: ones, b: zeros}", "ln_final: {w: ones, b: [[0, 0, 0, 0]]}", "ln_final",
     "weights.ln_final.b", "expected 4, got 1"),
    ("shape_ffn_in.yaml", "- [0.0, 0.5, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0]", "- [0.0, 0.5, 0.0, 0.0, 0.0, 0.1, 0.0]",
     "[0.0, 0.5, 0.0, 0.0, 0.0, 0.1, 0.0]", "weights.blocks[0].mlp.w_in", "expected 4×8, got 4×7"),
    ("shape_identity_not_square.yaml", "  embed:\n" + "".join(f"    - {row}\n" for row in (
        "[0.0, 0.0, 0.0, 0.0]", "[1.0, 0.0, 0.0, 0.0]", "[0.0, 1.0, 0.0, 0.0]", "[0.0, 0.0, 1.0, 0.0]",
        "[0.0, 0.0, 0.0, 1.0]")), "  embed: identity\n", "  embed:", "weights.embed",
     "identity needs a square matrix, this one is 5×4"),
    ("shape_ffn_out.yaml", "          - [0.0, 0.0, 0.0, 0.0]\n        b_in", "        b_in", ("w_out:", "- ["), "weights.blocks[0].mlp.w_out",
     "expected 8×4, got 7×4"),
    ("shape_head.yaml", "    - [0.0, 0.0, 0.0, 0.0, 1.0]\n", "    - [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]\n", "[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]",
     "weights.unembed", "expected 4×5, got 4×6"),
    ("shape_unknown_shorthand.yaml", "wq: identity", "wq: eye", "wq", "weights.blocks[0].attn.wq",
     "expected numbers or one of identity, zeros, ones"),
    # values where numbers belong
    ("value_string_cell.yaml", "    - [1.0, 0.0, 0.0, 0.0]", "    - [1.0, half, 0.0, 0.0]", "half", "weights.embed[1][1]",
     "expected a number, got text 'half'"),
    ("value_boolean_cell.yaml", "    - [1.0, 0.0, 0.0, 0.0]", "    - [1.0, true, 0.0, 0.0]", "true, 0.0", "weights.embed[1][1]",
     "expected a number, got boolean True"),
    ("value_null_cell.yaml", "    - [1.0, 0.0, 0.0, 0.0]", "    - [1.0, null, 0.0, 0.0]", "null", "weights.embed[1][1]",
     "expected a number, got nothing"),
    ("value_nan.yaml", "    - [1.0, 0.0, 0.0, 0.0]", "    - [1.0, .nan, 0.0, 0.0]", ".nan", "weights.embed[1][1]",
     "expected a finite number, got nan"),
    ("value_inf.yaml", "    - [1.0, 0.0, 0.0, 0.0]", "    - [1.0, -.inf, 0.0, 0.0]", "-.inf", "weights.embed[1][1]",
     "expected a finite number, got -inf"),
    ("value_overflow.yaml", "    - [1.0, 0.0, 0.0, 0.0]", "    - [1.0, 1e400, 0.0, 0.0]", "1e400", "weights.embed[1][1]",
     "expected a finite number, got inf"),
    ("value_int_no_digits.yaml", "  d_model: 4", "  d_model: 0x_", "d_model", "model.d_model", "expected an integer, got text '0x_'"),
    ("value_int_5000_digits.yaml", "  d_model: 4", "  d_model: " + "9" * 5000, "d_model", "model.d_model",
     "expected an integer, got number inf"),
    ("value_cell_5000_digits.yaml", "    - [1.0, 0.0, 0.0, 0.0]", "    - [1.0, " + "9" * 5000 + ", 0.0, 0.0]", "99999",
     "weights.embed[1][1]", "expected a finite number, got inf"),
    ("value_scale_text.yaml", "wo: {scale: 0.5}", "wo: {scale: half}", "wo", "weights.blocks[0].attn.wo.scale",
     "expected a number, got text 'half'"),
    ("value_d_model_text.yaml", "  d_model: 4", "  d_model: four", "d_model", "model.d_model", "expected an integer, got text 'four'"),
    ("value_layers_boolean.yaml", "  layers: 1", "  layers: true", "layers", "model.layers", "expected an integer, got boolean True"),
    ("value_heads_null.yaml", "  heads: 2", "  heads:", "heads", "model.heads", "expected an integer, got nothing"),
    ("value_d_ff_float.yaml", "    d_ff: 8", "    d_ff: 8.5", "d_ff", "model.ffn.d_ff", "expected an integer, got number 8.5"),
    ("value_flag_text.yaml", "  causal: true", "  causal: yes", "causal", "model.causal", "expected true or false, got text 'yes'"),
    ("value_eps_nan.yaml", "    eps: 1.0e-5", "    eps: .nan", "eps", "model.norm.eps", "expected a finite number, got nan"),
    # sizes
    ("size_d_model_zero.yaml", "  d_model: 4", "  d_model: 0", "d_model", "model.d_model", "expected an integer ≥ 1, got 0"),
    ("size_layers_negative.yaml", "  layers: 1", "  layers: -1", "layers", "model.layers", "expected an integer ≥ 1, got -1"),
    ("size_heads_zero.yaml", "  heads: 2", "  heads: 0", "heads", "model.heads", "expected an integer ≥ 1, got 0"),
    ("size_d_ff_zero.yaml", "    d_ff: 8", "    d_ff: 0", "d_ff", "model.ffn.d_ff", "expected an integer ≥ 1, got 0"),
    ("size_max_positions_zero.yaml", "  max_positions: 8", "  max_positions: 0", "max_positions", "model.max_positions",
     "expected an integer ≥ 1, got 0"),
    ("size_heads_not_dividing.yaml", "  heads: 2\n  d_head: 2\n", "  heads: 3\n", "heads", "model.heads",
     "3 heads do not divide d_model 4"),
    ("size_eps_negative.yaml", "    eps: 1.0e-5", "    eps: -1.0e-5", "eps", "model.norm.eps", "expected eps ≥ 0"),
    ("size_learned_without_max.yaml", "  max_positions: 8\n", "", "d_model", "model", "missing required key 'max_positions'"),
    ("size_layers_billion.yaml", "  layers: 1", "  layers: 1000000000", "layers", "model.layers",
     "1000000000 layers make 16000000005 weight tensors, more than the 100000 this opens"),
    ("size_budget.yaml", "  d_model: 4", "  d_model: 4000000000", "d_model", "model", "over the memory budget"),
    # kinds
    ("kind_positions.yaml", "  positions: learned", "  positions: rotary", "positions", "model.positions",
     "expected one of none, seed_sin, sinusoidal, learned, rope, got 'rotary'"),
    ("kind_norm.yaml", "    kind: layernorm", "    kind: batchnorm", "batchnorm", "model.norm.kind",
     "expected one of layernorm, rmsnorm, none, got 'batchnorm'"),
    ("kind_placement.yaml", "    placement: pre", "    placement: sandwich", "placement", "model.norm.placement",
     "expected one of pre, post, got 'sandwich'"),
    ("kind_ffn.yaml", "    kind: gelu_tanh", "    kind: swiglu", "swiglu", "model.ffn.kind",
     "expected one of gated_silu, gated_gelu_tanh, relu, tanh, gelu, gelu_tanh, got 'swiglu'"),
    ("kind_decode_rule.yaml", "  rule: greedy", "  rule: beam", "rule", "decode.rule", "expected one of greedy, sample, got 'beam'"),
    # vocabulary and tokens
    ("vocab_duplicate.yaml", "tokens: [PAD, a, b, c, EOS]", "tokens: [PAD, a, b, a, EOS]", "tokens", "vocab.tokens[3]",
     "token 'a' appears twice"),
    ("vocab_empty.yaml", "tokens: [PAD, a, b, c, EOS]", "tokens: []", "tokens", "vocab.tokens", "the vocabulary is empty"),
    ("vocab_pad_missing.yaml", "  pad: PAD", "  pad: '<pad>'", "pad:", "vocab.pad", "token '<pad>' is not in the vocabulary"),
    ("vocab_eos_missing.yaml", "  eos: EOS", "  eos: </s>", "eos:", "vocab.eos", "token '</s>' is not in the vocabulary"),
    ("vocab_eos_id_range.yaml", "  eos: EOS", "  eos: 5", "eos:", "vocab.eos", "token id 5 is out of range 0..4"),
    ("vocab_token_number.yaml", "tokens: [PAD, a, b, c, EOS]", "tokens: [PAD, a, 2.5, c, EOS]", "tokens", "vocab.tokens[2]",
     "expected text, got number 2.5"),
    ("request_token_unknown.yaml", "  - tokens: [a, b]", "  - tokens: [a, z]", "tokens: [a, z]", "requests[0].tokens[1]",
     "token 'z' is not in the vocabulary"),
    ("request_id_range.yaml", "  - tokens: [a, b]", "  - tokens: [1, 7]", "tokens: [1, 7]", "requests[0].tokens[1]",
     "token id 7 is out of range 0..4"),
    ("request_id_negative.yaml", "  - tokens: [a, b]", "  - tokens: [1, -1]", "tokens: [1, -1]", "requests[0].tokens[1]",
     "token id -1 is out of range 0..4"),
    ("request_empty_tokens.yaml", "  - tokens: [a, b]", "  - tokens: []", "tokens: []", "requests[0].tokens",
     "a request needs at least one token"),
    ("request_none.yaml", "requests:\n  - tokens: [a, b]\n    max_new_tokens: 3\n", "requests: []\n", "requests", "requests",
     "expected at least one request"),
    ("request_max_new_zero.yaml", "    max_new_tokens: 3", "    max_new_tokens: 0", "max_new_tokens: 0",
     "requests[0].max_new_tokens", "expected an integer ≥ 1, got 0"),
    ("request_max_new_negative.yaml", "    max_new_tokens: 3", "    max_new_tokens: -5", "max_new_tokens: -5",
     "requests[0].max_new_tokens", "expected an integer ≥ 1, got -5"),
    ("request_past_positions.yaml", "    max_new_tokens: 3", "    max_new_tokens: 8", "- tokens", "requests[0]",
     "needs 9 positions"),
    ("request_pad_to_short.yaml", "    max_new_tokens: 3", "    max_new_tokens: 3\n    pad_to: 1", "pad_to",
     "requests[0].pad_to", "pad_to 1 is shorter than the request's 2 tokens"),
    ("request_vectors_decoder.yaml", "    max_new_tokens: 3", "    max_new_tokens: 3\n    vectors: [[0, 0, 0, 0]]", "vectors",
     "requests[0].vectors", "input vectors are for encoders"),
    # decoding
    ("decode_chunk_zero.yaml", "  prefill_chunk: 2", "  prefill_chunk: 0", "prefill_chunk", "decode.prefill_chunk",
     "expected an integer ≥ 1, got 0"),
    ("decode_max_new_negative.yaml", "  max_new_tokens: 1\n  stop", "  max_new_tokens: -1\n  stop", "max_new_tokens: -1",
     "decode.max_new_tokens", "expected an integer ≥ 1, got -1"),
    ("decode_temperature_zero.yaml", "  temperature: 1.0", "  temperature: 0", "temperature", "decode.temperature",
     "expected a number > 0, got 0"),
    ("decode_top_p_zero.yaml", "  top_p: 0.9", "  top_p: 0.0", "top_p", "decode.top_p", "expected a number in (0, 1], got 0.0"),
    ("decode_top_k_zero.yaml", "  top_k: 3", "  top_k: 0", "top_k", "decode.top_k", "expected an integer ≥ 1, got 0"),
    ("decode_forbid_unknown.yaml", "  forbid: [PAD]", "  forbid: [UNK]", "forbid", "decode.forbid[0]",
     "token 'UNK' is not in the vocabulary"),
    ("decode_forbid_every.yaml", "  forbid: [PAD]", "  forbid: [PAD, a, b, c, 4]", "forbid", "decode.forbid",
     "forbids every one of the 5 tokens: decoding would have none to choose"),
    # expect: tables (check must refuse them with a location, not count a disagreement)
    ("expect_tolerance_zero.yaml", "    note: the embedding", "    tolerance: 0\n    note: the embedding", "tolerance",
     "expect[0].tolerance", "expected a number > 0, got 0"),
    ("expect_tolerance_negative.yaml", "    note: the embedding", "    tolerance: -0.001\n    note: the embedding", "tolerance",
     "expect[0].tolerance", "expected a number > 0, got -0.001"),
    ("expect_ragged.yaml", "values:\n      - [1.0, 0.0, 0.0, 0.0]\n      - [0.0, 1.0, 0.0, 0.0]",
     "values:\n      - [1.0, 0.0, 0.0, 0.0]\n      - [0.0, 1.0, 0.0]", ("values:", "- ["), "expect[0].values",
     "expected a table: rows of equal length"),
    ("expect_empty_values.yaml", "    values:\n      - [1.0, 0.0, 0.0, 0.0]\n      - [0.0, 1.0, 0.0, 0.0]\n",
     "    values: []\n", "values", "expect[0].values", "expected a table: rows of equal length"),
    ("expect_rows_count.yaml", "    rows: [0, 1]", "    rows: [0, 1, 2]", "rows:", "expect[0].rows",
     "names 3 rows but the table has 2"),
    ("expect_cols_count.yaml", "    cols: [0, 1, 2, 3]", "    cols: [0, 1]", "cols:", "expect[0].cols",
     "names 2 columns but the table has 4"),
    ("expect_row_out_of_range.yaml", "    rows: [0, 1]", "    rows: [0, 7]", "rows:", "expect[0].rows[1]",
     "position 7 is not computed in prefill (positions 0..1)"),
    ("expect_row_negative.yaml", "    rows: [0, 1]", "    rows: [0, -1]", "rows:", "expect[0].rows[1]",
     "expected an integer ≥ 0, got -1"),
    ("expect_request_range.yaml", "    request: 0", "    request: 4", "request: 4", "expect[0].request",
     "request 4 does not exist (the scenario has 1)"),
    ("expect_round_range.yaml", "    round: 0", "    round: 5", "round: 5", "expect[0].round",
     "round 5 does not exist: request 0 runs rounds 0..2"),
    ("expect_head_range.yaml", "    request: 0", "    request: 0\n    head: 2", "    head: 2", "expect[0].head",
     "head 2 does not exist (the model has 2)"),
    ("expect_layer_range.yaml", "  - op: hook_embed", "  - op: blocks.3.hook_resid_post", "op:", "expect[0].op",
     "layer 3 does not exist (the model has 1)"),
    ("expect_op_not_a_hook.yaml", "  - op: hook_embed", "  - op: blocks.0.hook resid", "op:", "expect[0].op",
     "'blocks.0.hook resid' is not a hook name"),
    ("expect_missing_values.yaml", "    values:\n      - [1.0, 0.0, 0.0, 0.0]\n      - [0.0, 1.0, 0.0, 0.0]\n", "",
     "- op:", "expect[0]", "missing required key 'values'"),
    ("expect_value_text.yaml", "values:\n      - [1.0, 0.0, 0.0, 0.0]\n      - [0.0, 1.0, 0.0, 0.0]",
     "values:\n      - [1.0, 0.0, 0.0, 0.0]\n      - [0.0, one, 0.0, 0.0]", "one,", "expect[0].values[1][1]",
     "expected a number, got text 'one'"),
    ("expect_run_kind.yaml", "    run: cached", "    run: both", "run:", "expect[0].run", "expected one of cached, full, got 'both'"),
    # tags, aliases, bytes
    ("tag_python_object.yaml", "title: template · every key", "title: !!python/object/apply:os.system [echo hacked]", "title",
     "title", "tag tag:yaml.org,2002:python/object/apply:os.system is not allowed"),
    ("tag_python_name.yaml", "wq: identity", "wq: !!python/name:os.system ''", "wq", "weights.blocks[0].attn.wq",
     "tag tag:yaml.org,2002:python/name:os.system is not allowed"),
    ("tag_custom.yaml", "  d_model: 4", "  d_model: !big 4", "d_model", "model.d_model", "tag !big is not allowed"),
]


def laughs(name: str) -> str:
    """Nine anchors, each a list of nine aliases of the one before: 9^9 (387 million) leaves if expanded."""
    levels = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return f"[{', '.join(levels)}]"


EXTRA = [  # (file, text or bytes, marker, path, message)
    ("laughs_tokens.yaml", TEMPLATE.replace("tokens: [PAD, a, b, c, EOS]", "tokens: " + laughs("t")), "tokens",
     "vocab.tokens[0]", "expected text, got a list"),
    ("laughs_embed.yaml", TEMPLATE.replace("  embed:\n" + "".join(f"    - {row}\n" for row in (
        "[0.0, 0.0, 0.0, 0.0]", "[1.0, 0.0, 0.0, 0.0]", "[0.0, 1.0, 0.0, 0.0]", "[0.0, 0.0, 1.0, 0.0]",
        "[0.0, 0.0, 0.0, 1.0]")), "  embed: " + laughs("e") + "\n"), "  embed:", "weights.embed", "expected 5×4, got 9×9"),
    ("laughs_expect.yaml", TEMPLATE.replace(
        "    values:\n      - [1.0, 0.0, 0.0, 0.0]\n      - [0.0, 1.0, 0.0, 0.0]\n",
        "    values:\n      - &row [" + ", ".join(["0"] * 3000) + "]\n" + "      - *row\n" * 3000),
     ("values:", "- &row"), "expect[0].values", "the table has 9003000 cells, more than the 4000000"),
    ("recursive_alias.yaml", TEMPLATE.replace("title: template · every key", "title: &me [*me]"), "title", "title",
     "expected text, got a list"),
    ("control_character.yaml", TEMPLATE.replace("  pad: PAD", "  pad: P\x00D"), "pad:", "",
     "YAML: character #x0000 is not allowed (control characters are not allowed)"),
    ("not_utf8.yaml", TEMPLATE.replace("title: template · every key", "title: caf\udce9").encode("utf-8", "surrogateescape"),
     "title", "", "not UTF-8 text"),
    ("utf16.yaml", TEMPLATE.encode("utf-16"), "__line1__", "", "not UTF-8 text"),
]


# -- weight files: a 2-wide model whose weights sit beside it ------------------------------------
SMALL = """title: weights from a file
vocab: {tokens: [a, b, c]}
model: {d_model: 2, layers: 1, heads: 1, norm: {kind: none}, ffn: {kind: relu, d_ff: 2}}
weights: {file: FILE}
requests:
  - tokens: [a, b]
"""
SHAPES = {"embed": (3, 2), "blocks.0.attn.wq": (2, 2), "blocks.0.attn.wk": (2, 2), "blocks.0.attn.wv": (2, 2),
          "blocks.0.attn.wo": (2, 2), "blocks.0.mlp.w_in": (2, 2), "blocks.0.mlp.w_out": (2, 2)}


def valid_arrays(dtype=np.float32) -> dict[str, np.ndarray]:
    return {name: np.full(shape, 0.5, dtype=dtype) for name, shape in SHAPES.items()}


def safetensors_bytes(arrays: dict[str, np.ndarray], scratch: Path) -> bytes:
    save_file(arrays, str(scratch))
    return scratch.read_bytes()


def npz_claiming(scratch: Path, rows: int) -> bytes:
    """A valid npz whose embed.npy header then claims `rows` rows (same header length: spaces give way)."""
    np.savez(scratch, **valid_arrays())
    with zipfile.ZipFile(scratch) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    raw = members["embed.npy"]
    claimed = raw.replace(b"(3, 2)", f"({rows}, 2)".encode())
    end = claimed.index(b"\n")
    members["embed.npy"] = claimed[: end - (len(claimed) - len(raw))] + claimed[end:]
    with zipfile.ZipFile(scratch, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return scratch.read_bytes()


def weight_cases(scratch: Path) -> list:
    """(scenario file, weight file name, its bytes, path in the message, message)."""
    valid = safetensors_bytes(valid_arrays(), scratch)
    length = struct.unpack("<Q", valid[:8])[0]
    wrong_dtype = valid_arrays() | {"blocks.0.attn.wq": np.ones((2, 2), dtype=np.int32)}
    wrong_shape = valid_arrays() | {"blocks.0.attn.wq": np.ones((2, 3), dtype=np.float32)}
    missing = {k: v for k, v in valid_arrays().items() if k != "blocks.0.mlp.w_out"}
    npz_ints = scratch.with_suffix(".npz")
    np.savez(npz_ints, **(valid_arrays() | {"embed": np.ones((3, 2), dtype=np.int64)}))
    return [
        ("weights_missing_file.yaml", "absent.safetensors", None, "weights.file", "no weight file"),
        ("weights_truncated.yaml", "truncated.safetensors", valid[: 8 + length + 10], "blocks.0.attn.wk",
         "its data ends at byte 16 of the data, the file holds 10 bytes of data (truncated?)"),  # first in the data
        ("weights_header_only.yaml", "header_cut.safetensors", valid[:20], "header",
         f"its length field claims {length} bytes, the file holds 12 after it (truncated?)"),
        ("weights_claims_more.yaml", "claims_more.safetensors", struct.pack("<Q", 10**12) + valid[8:], "header",
         f"its length field claims {10**12} bytes, more than the 100 MiB safetensors allows"),
        ("weights_wrong_dtype.yaml", "wrong_dtype.safetensors", safetensors_bytes(wrong_dtype, scratch),
         "blocks.0.attn.wq", "expected floating-point numbers, got I32"),
        ("weights_wrong_shape.yaml", "wrong_shape.safetensors", safetensors_bytes(wrong_shape, scratch),
         "blocks.0.attn.wq", "expected 2×2, got 2×3"),
        ("weights_missing_tensor.yaml", "missing_tensor.safetensors", safetensors_bytes(missing, scratch),
         "blocks.0.mlp.w_out", "missing from the weight file"),
        ("weights_npz_ints.yaml", "ints.npz", npz_ints.read_bytes(), "embed", "expected floating-point numbers, got int64"),
        ("weights_npz_claims.yaml", "claims.npz", npz_claiming(npz_ints, 10**11), "embed",
         "expected 3×2, got 100000000000×2"),
        ("weights_npz_garbage.yaml", "garbage.npz", b"PK\x03\x04 not really a zip archive" * 4, "",
         "not a readable npz file"),
        ("weights_wrong_suffix.yaml", "weights.bin", b"\x00" * 64, "", "expected a .safetensors or .npz file"),
    ]


def line_of(text: str, marker: str | None) -> int | None:
    if marker is None:
        return None
    if marker == "__line1__":
        return 1
    after, marker = marker if isinstance(marker, tuple) else ("", marker)
    return text[: text.index(marker, text.index(after))].count("\n") + 1


def main() -> None:
    for old in HERE.iterdir():
        if old.name not in ("make_bad.py", "README.md"):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    expected: dict[str, dict] = {}

    def record(name, line, path, message, **more):
        expected[name] = {"line": line, "path": path, "message": message, **more}

    for name, old, new, marker, path, message in CASES:
        if old is None:
            text = new
        else:
            assert TEMPLATE.count(old) >= 1, (name, old)
            text = TEMPLATE.replace(old, new, 1)
        (HERE / name).write_text(text, encoding="utf-8")
        record(name, line_of(text, marker), path, message, command="check" if name.startswith("expect_") else "run")
    for name, data, marker, path, message in EXTRA:
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        (HERE / name).write_bytes(raw)
        text = raw.decode("utf-8", errors="replace")
        record(name, line_of(text, marker), path, message)
    (HERE / "a_directory.yaml").mkdir()
    (HERE / "a_directory.yaml" / ".keep").write_text("a folder named like a scenario\n")
    record("a_directory.yaml", None, "", "cannot read (Is a directory)")
    scratch = HERE / ".scratch.safetensors"
    for name, weight_file, data, path, message in weight_cases(scratch):
        (HERE / name).write_text(SMALL.replace("FILE", weight_file), encoding="utf-8")
        if data is not None:
            (HERE / weight_file).write_bytes(data)
        if path == "weights.file":
            record(name, line_of(SMALL, "weights:"), path, message)
        else:
            record(name, None, path, message, names=weight_file)
    scratch.unlink()
    scratch.with_suffix(".npz").unlink()
    header = "# What each file of this folder must produce: `tinyllm-tui run FILE` (or check, for expect_ cases)\n" \
             "# exits 2 with one stderr line `FILE[:line]: [path: ]…message…`; names: the file the line names\n" \
             "# instead (a weight file beside the scenario). Written by make_bad.py.\n"
    (HERE / "expected.yaml").write_text(header + yaml.safe_dump(expected, allow_unicode=True, sort_keys=True, width=200),
                                        encoding="utf-8")
    print(f"{len(expected)} cases")


if __name__ == "__main__":
    main()
