"""Every class of invalid scenario: one line on stderr naming file:line and path, exit 2, no traceback.

Each case edits the real X01 file; the expected line is found by searching the
edited text for a marker, so it is never a number copied from the program.
"""

from __future__ import annotations

import re

import pytest
from conftest import X01
from typer.testing import CliRunner

from engine import load_scenario_text
from engine.compare.expect import EXPECT_KEYS
from engine.parameters import name_parts, parameter_shapes
from engine.loading.cache_options import CACHE_KEYS
from engine.loading.scenario_file import (DECODE_KEYS, DROPOUT_KEYS, FFN_KEYS, MODEL_KEYS, NORM_KEYS, REQUEST_KEYS, TOP_KEYS,
                             VOCAB_KEYS)
from engine.spec import ModelSpec, NormSpec
from tinyllm_tui.cli import app

X01_TEXT = X01.read_text(encoding="utf-8")
ROW = "- [0.0, 0.5, 0.0, 0.0]"

# (case, old, new, marker on the reported line, path and message that must follow file:line)
CASES = [
    ("wrong shape", ROW, "- [0.0, 0.5, 0.0]", "- [0.0, 0.5, 0.0]",
     "weights.blocks[0].attn.wv: expected 4×4, got 4×3"),
    ("not a number", ROW, "- [0.0, abc, 0.0, 0.0]", "abc", "weights.blocks[0].attn.wv[1][1]: expected a number, got text 'abc'"),
    ("NaN weight", ROW, "- [0.0, .nan, 0.0, 0.0]", ".nan", "weights.blocks[0].attn.wv[1][1]: expected a finite number, got nan"),
    ("Inf weight", ROW, "- [0.0, .inf, 0.0, 0.0]", ".inf", "weights.blocks[0].attn.wv[1][1]: expected a finite number, got inf"),
    ("unknown key", "  causal: true", "  causal: true\n  colour: red", "colour", "model.colour: unknown key"),
    ("token not in vocab", "- tokens: [你, 爱]", "- tokens: [你, 他]", "他", "requests[1].tokens[1]: token '他' is not in the vocabulary"),
    ("id out of range", "- tokens: [你, 爱]", "- tokens: [4, 9]", "[4, 9]", "requests[1].tokens[1]: token id 9 is out of range 0..5"),
    ("heads do not divide", "  heads: 2 ", "  heads: 3 ", "heads: 3", "model.heads: 3 heads do not divide d_model 4"),
    ("python tag", "        wo: identity", "        wo: !!python/object/apply:os.system [echo hacked]", "python/object",
     "weights.blocks[0].attn.wo: tag tag:yaml.org,2002:python/object/apply:os.system is not allowed"),
    ("custom tag", "        wo: identity", "        wo: !mine identity", "!mine", "weights.blocks[0].attn.wo: tag !mine is not allowed"),
    ("unknown shorthand", "        wo: identity", "        wo: identiti", "identiti", "weights.blocks[0].attn.wo: expected numbers or one of"),
    ("missing weight", "        wo: identity\n", "", "wq: identity", "weights.blocks[0].attn: missing required key 'wo'"),
    ("bad choice", "kind: layernorm", "kind: batchnorm", "batchnorm", "model.norm.kind: expected one of layernorm, rmsnorm, none, got 'batchnorm'"),
    ("duplicate key", "  causal: true", "  causal: true\n  causal: false", "causal: false", "model.causal: this key appears twice"),
    ("duplicate token", "[PAD, 我, 爱, 学习, 你, ！]", "[PAD, 我, 爱, 学习, 爱, ！]", "[PAD, 我, 爱, 学习, 爱",
     "vocab.tokens[4]: token '爱' appears twice"),
    ("control character after Chinese text", "- tokens: [你, 爱]", "- tokens: [你, 爱]\x07", "\x07",
     "YAML: character #x0007 is not allowed"),
]


def _run(path):
    return CliRunner().invoke(app, ["run", str(path)])


def _assert_one_line(result, expected: str):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tinyllm-tui: error: "), lines[0]
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize("case, old, new, marker, message", CASES, ids=[c[0] for c in CASES])
def test_invalid_scenario_names_line_and_path(tmp_path, case, old, new, marker, message):
    assert old in X01_TEXT
    text = X01_TEXT.replace(old, new, 1)
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    line = text[: text.index(marker) + len(marker)].count("\n") + 1
    _assert_one_line(_run(path), f"{path}:{line}: {message}")


def test_missing_section(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(X01_TEXT[: X01_TEXT.index("requests:")], encoding="utf-8")
    _assert_one_line(_run(path), f"{path}:1: missing required key 'requests'")


def test_yaml_syntax_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(X01_TEXT.replace("  pad: PAD", "  pad: [PAD"), encoding="utf-8")
    result = _run(path)
    _assert_one_line(result, f"{path}:")
    assert "YAML syntax" in result.stderr


def test_an_unclosed_flow_sequence_names_the_line_it_opened_on_too(tmp_path):
    """A new user's report: `heads: [2, 3` on line 15 was reported at line 16 alone, where the parser noticed."""
    path = tmp_path / "badsyntax.yaml"
    text = X01_TEXT.replace("  heads: 2 ", "  heads: [2, 3 ")
    path.write_text(text, encoding="utf-8")
    opened = text[: text.index("heads: [2, 3")].count("\n") + 1
    _assert_one_line(_run(path), f"{path}:{opened + 1}: YAML syntax: did not find expected ',' or ']' "
                                 f"(in the flow sequence opened at line {opened})")


def test_non_utf8_bytes(tmp_path):
    data = X01_TEXT.encode("utf-8")
    cut = data.index(b"vocab:")
    path = tmp_path / "bad.yaml"
    path.write_bytes(data[:cut] + b"\xff\xfe" + data[cut:])
    line = data[:cut].count(b"\n") + 1
    _assert_one_line(_run(path), f"{path}:{line}: not UTF-8 text (byte {cut})")


def test_missing_file(tmp_path):
    _assert_one_line(_run(tmp_path / "nowhere.yaml"), "nowhere.yaml: cannot read")


@pytest.mark.parametrize("args, message", [
    (["run", str(X01), "--bogus"], "No such option: --bogus"),
    (["run", str(X01), "--backend", "torch"], "unknown backend 'torch'"),
    (["run", str(X01), "--dtype", "int8"], "unknown dtype 'int8'"),
    (["diff"], "Missing argument"),
    (["open", str(X01), "--break", "abs>lots"], "breakpoint 'abs>lots': 'lots' is not a number"),
    (["open", str(X01), "--break", "colour=red"], "unknown field 'colour'"),
    (["run", str(X01), "--break", "round=x"], "breakpoint 'round=x': round is a whole number ≥ 0, got 'x'"),  # no
    (["run", str(X01), "--break", "phase=pre"], "'pre' is no phase (expected prefill | decode)"),  # silent never
    ([str(X01), "--lang", "fr"], "expected en or zh, got 'fr'"),
])
def test_bad_flags(args, message):
    _assert_one_line(CliRunner().invoke(app, args), message)


def test_a_request_longer_than_the_learned_position_table(tmp_path):
    text = X01_TEXT.replace("  positions: none", "  positions: learned\n  max_positions: 3")
    text = text.replace("weights:\n", "weights:\n  pos_embed: zeros\n")
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    line = text[: text.index("- tokens: [我, 爱, 学习]")].count("\n") + 1
    _assert_one_line(_run(path), f"{path}:{line}: requests[0]: needs 4 positions (3 tokens + 1 fed back) "
                                 "but model.max_positions is 3")


def test_input_vectors_on_a_decoder_are_refused(tmp_path):
    text = X01_TEXT.replace("  - tokens: [你, 爱]", "  - tokens: [你, 爱]\n    vectors: [[0, 0, 0, 0], [1, 1, 1, 1]]")
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    line = text[: text.index("vectors: [[")].count("\n") + 1
    _assert_one_line(_run(path), f"{path}:{line}: requests[1].vectors: input vectors are for encoders")


def test_plain_scalars_resolve_as_yaml_1_2_does():
    """`no`, `on`, `yes` are text (YAML 1.1 made them booleans); `1e-5` is a number (1.1 made it text)."""
    text = X01_TEXT.replace("[PAD, 我, 爱, 学习, 你, ！]", "[PAD, 我, 爱, 学习, no, on]").replace("eps: 1.0e-5", "eps: 1e-5")
    scenario = load_scenario_text(text.replace("[你, 爱]", "[no, 爱]"), "x01.yaml")
    assert scenario.vocab.tokens[4:] == ("no", "on") and scenario.model.norm.eps == 1e-5


def test_the_template_loads_runs_and_names_every_key():
    """scenarios/template.yaml documents every key the loader knows, and is itself a valid scenario."""
    template = X01.parent / "template.yaml"
    result = CliRunner().invoke(app, ["run", str(template)])
    assert result.exit_code == 0, result.output
    text = template.read_text(encoding="utf-8")
    keys = set().union(TOP_KEYS, VOCAB_KEYS, MODEL_KEYS, NORM_KEYS, FFN_KEYS, DROPOUT_KEYS, REQUEST_KEYS,
                       DECODE_KEYS, EXPECT_KEYS, CACHE_KEYS, {"file", "scale"})
    for gated, bias in ((True, True), (False, True)):
        spec = ModelSpec(d_model=4, n_layers=1, n_heads=2, d_head=2, d_ff=8, norm=NormSpec(affine=True),
                         final_norm=True, ffn="gated_silu" if gated else "relu", positions="learned",
                         max_positions=8, bias=bias, tied_unembed=False)
        keys |= {str(part) for name in parameter_shapes(spec, 5) for part in name_parts(name) if isinstance(part, str)}
    missing = sorted(key for key in keys if not re.search(rf"(?<![\w.]){key}\b", text))
    assert not missing, f"template.yaml does not mention: {missing}"


def test_numbers_in_every_yaml_1_2_form_read_as_numbers():
    """Hex, underscores, a bare exponent and a leading dot: the slow cell-by-cell path agrees with YAML."""
    text = X01_TEXT.replace(ROW, "- [0x1, 1_0, 1e-1, .5]", 1)
    wv = load_scenario_text(text, "x01.yaml").weights["blocks.0.attn.wv"]
    assert wv[1].tolist() == [1.0, 10.0, 0.1, 0.5]
