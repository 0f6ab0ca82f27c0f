"""Routing flips on the near-tie fixture (tools/make_moe_fixtures.py qwen3_moe_tie): a tiny Qwen3-MoE whose
float64 reference ties two experts within 2e-8 at one token of decode round 2 in layer 1, every other margin at
least 1e-3. A float32 run (the engine's, `diff --dtype float32`) and a float32 dump written by transformers' own
float32 forward (`check --against`) each route that token otherwise first; a quantized cache's first flip is
the first token its run routes otherwise than the exact cache's."""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from said import refused
from typer.testing import CliRunner

from engine import Session, make_backend, to_host
from engine.caches import CacheSpec, Quantize
from engine.compare.against import compare_generation
from engine.compare.diff import diff_scenario
from engine.layout import parse_key
from engine.layers.moe_ffn import route
from engine.loading.checkpoint import load_checkpoint
from engine.causes import Cause
from tinyllm_tui.cli import app
from tinyllm_tui.debugger.comparisons import Compared, Comparisons
from tinyllm_tui.presentation.against_words import report_lines

FOLDER = Path(__file__).parent / "fixtures" / "qwen3_moe_tie"
REF = dict(np.load(FOLDER / "reference.npz"))
DUMP = FOLDER / "float32_dump.npz"
IDS = [int(t) for t in REF["ids"]]
ROUND, LAYER, POSITION = int(REF["tie_round"]), int(REF["tie_layer"]), int(REF["tie_position"])
SCENARIO = load_checkpoint(FOLDER, ids=IDS, max_new_tokens=len(REF["greedy_ids"]))
STATES = list(Session(SCENARIO, make_backend("numpy", "float64")).steps())
ARGS = [str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", str(len(REF["greedy_ids"]))]


def reference_margins() -> list[np.ndarray]:
    """Per pass (layer × token), the k-th router score less the (k+1)-th, from transformers' float64 scores."""
    k = REF["topk"].shape[-1]
    passes = [REF["probs"]] + [REF["step_probs"][r][:, None] for r in range(1, len(REF["step_probs"]))]
    return [o[..., k - 1] - o[..., k] for o in (-np.sort(-p, axis=-1) for p in passes)]


def tie_choice(topk: np.ndarray) -> list[int]:
    return topk[ROUND, LAYER].tolist()


def test_the_fixture_ties_two_experts_at_one_known_token_and_no_other():
    margins = reference_margins()
    assert 1e-8 <= margins[ROUND][LAYER, 0] <= 1e-7 and margins[ROUND][LAYER, 0] == pytest.approx(REF["tie_margin"])
    margins[ROUND][LAYER, 0] = np.inf
    assert min(m.min() for m in margins) >= 1e-3
    assert set(REF["tie_experts"].tolist()) & set(tie_choice(REF["step_topk"]))  # one of the pair is chosen
    assert REF["float32_ops"] == 0 and POSITION == len(IDS) + ROUND - 1


def test_the_engine_in_float64_routes_every_pass_as_transformers_and_its_tie_is_the_references():
    for round_ in range(len(REF["step_logits"])):
        topk = {s.layer: s for s in STATES if s.round == round_ and s.name.endswith("mlp.hook_topk")}
        for layer, state in topk.items():
            chosen = to_host(state.values)[-1]
            assert chosen.tolist() == REF["step_topk"][round_, layer].tolist()
            logits = next(to_host(s.values)[-1] for s in STATES
                          if s.round == round_ and s.name == f"blocks.{layer}.mlp.hook_router_logits")
            assert np.abs(logits - REF["step_router_logits"][round_, layer]).max() <= 1e-9
        logits = next(to_host(s.values)[-1] for s in STATES if s.round == round_ and s.name == "unembed.hook_out")
        assert np.abs(logits - REF["step_logits"][round_]).max() <= 1e-9
    tie = next(s for s in STATES if s.round == ROUND and s.name == f"blocks.{LAYER}.mlp.hook_topk")
    assert route(tie.op).margins[-1] == pytest.approx(float(REF["tie_margin"]), abs=1e-12)
    assert max(d.max_abs for d in diff_scenario(SCENARIO, make_backend("numpy", "float64"))) <= 1e-12


def test_diff_in_float32_names_the_tie_as_the_first_routing_flip_before_the_operators():
    result = CliRunner().invoke(app, ["diff", *ARGS, "--dtype", "float32"])
    lines = result.output.splitlines()
    assert lines[0].startswith(f"first routing flip against the float64 exact-cache run: decode.{ROUND} · layer "
                               f"{LAYER} · token {POSITION} · ")
    assert f"reference chose {tie_choice(REF['step_topk'])}" in lines[0]
    dumped = np.load(DUMP)[f"decode.{ROUND}.blocks.{LAYER}.mlp.hook_topk"][0].tolist()  # transformers in float32
    assert f"float32 run {dumped}" in lines[0] and dumped != tie_choice(REF["step_topk"])
    document = json.loads(CliRunner().invoke(app, ["diff", *ARGS, "--dtype", "float32", "--json"]).output)
    flip = document["first_route_flip"]
    assert (flip["pass"], flip["layer"], flip["other"], flip["dump"]) == (f"decode.{ROUND}", LAYER, "float32 run", dumped)
    assert 0 < flip["margin"] < 1e-6  # --dtype float32 keeps the weights in float32: the tie moves a little


def test_a_float64_diff_has_no_routing_flip_to_report():
    result = CliRunner().invoke(app, ["diff", *ARGS])
    assert result.exit_code == 0 and "routing flip" not in result.output


def test_check_against_transformers_float32_dump_names_the_tie_before_the_numeric_divergence():
    result = CliRunner().invoke(app, ["check", *ARGS, "--against", str(DUMP)])
    lines = result.output.splitlines()
    assert lines[1].startswith(f"first routing flip: decode.{ROUND} · layer {LAYER} · token {POSITION} · ")
    assert lines[2].startswith(f"first divergence: decode.{ROUND} · ")  # nothing before the tie leaves float32's
    report = compare_generation(SCENARIO, DUMP)
    assert report.flip.margin == pytest.approx(float(REF["tie_margin"]), abs=1e-12)
    assert list(report.flip.ours) == tie_choice(REF["step_topk"])
    assert list(report.flip.theirs) == np.load(DUMP)[f"decode.{ROUND}.blocks.{LAYER}.mlp.hook_topk"][0].tolist()


def first_flip_walked(reference, run) -> tuple[int, int, int] | None:
    """(round, layer, position) of the first top-k row whose expert sets differ, the runs walked side by side."""
    def choices(states):
        return [(s.round, s.layer, s.positions, to_host(s.values)) for s in states if s.name.endswith("mlp.hook_topk")]

    for (round_, layer, positions, ours), (_, _, _, theirs) in zip(choices(reference), choices(run)):
        for position, a, b in zip(positions, ours, theirs):
            if set(a.tolist()) != set(b.tolist()):
                return round_, layer, position
    return None


@pytest.mark.parametrize("quantize", [Quantize.FLOAT8_E4M3, Quantize.FLOAT8_E5M2])
def test_a_quantized_cache_reports_the_first_token_it_routes_otherwise_than_the_exact_cache(quantize):
    lossy = dataclasses.replace(SCENARIO, cache=CacheSpec(quantize=quantize))
    backend = make_backend("numpy", "float64")
    flip = Comparisons(backend, None, lambda: Compared(lossy, None, None)).route_flip()
    walked = first_flip_walked(STATES, Session(lossy, backend).steps())
    assert walked is not None and (flip.key.round, flip.layer, int(flip.token.split(" · ")[0])) == walked
    assert flip.other == Cause("side.cache", {"quantize": quantize})


@pytest.mark.parametrize("kept", ["hook_router_scores", "hook_router_logits"])
def test_a_dump_with_only_router_scores_or_logits_names_the_same_flip(tmp_path, kept):
    """Their choices are then the k best of what the dump holds (transformers' float32 scores or logits)."""
    arrays = {k: v for k, v in np.load(DUMP).items() if ".mlp." not in k or k.endswith(kept)}
    np.savez(tmp_path / "dump.npz", **arrays)
    flip = compare_generation(SCENARIO, tmp_path / "dump.npz").flip
    assert (flip.key.pass_, flip.layer, flip.token.split(" · ")[0]) == (f"decode.{ROUND}", LAYER, str(POSITION))
    assert list(flip.theirs) == np.load(DUMP)[f"decode.{ROUND}.blocks.{LAYER}.mlp.hook_topk"][0].tolist()
    assert (flip.their_scores is None) == (kept == "hook_router_logits")


def test_the_tui_diff_summary_names_the_flip_in_english_and_chinese():
    from tinyllm_tui.tui.widgets.diffview import report_summary

    report = Comparisons(make_backend("numpy", "float32"), None, lambda: Compared(SCENARIO, None, None)).compare()
    en, zh = (report_summary(report, lang).plain.splitlines()[0] for lang in ("en", "zh"))
    assert en.startswith(f"⚠ first routing flip against the float64 exact-cache run: decode.{ROUND} · layer {LAYER} · "
                         f"token {POSITION} · ")
    assert f"reference chose {tie_choice(REF['step_topk'])}" in en and "float32 run" in en
    assert f"第{LAYER}层" in zh and "参考选择" in zh and "float32 运行 选择" in zh and "run" not in zh  # issue 24
    twice = dataclasses.replace(SCENARIO, requests=SCENARIO.requests * 2)  # a pass names its request now
    report = Comparisons(make_backend("numpy", "float32"), None, lambda: Compared(twice, None, None)).compare()
    assert report_summary(report, "en").plain.startswith("⚠ first routing flip against the float64 exact-cache run: "
                                                         f"request.0.decode.{ROUND} · layer {LAYER} · ")


class _Ggml:
    """Enough of ggml for engine.compare.llama_cpp._Collector: each fake tensor is a real `_Head` (type, ne, nb)
    over a NumPy buffer, named as llama.cpp's graph names them."""

    def __init__(self):
        self.tensors = {}

    def tensor(self, name: str, array: np.ndarray, ggml_type: int, view_of: np.ndarray | None = None) -> int:
        """`array` (tokens × features) laid out as ggml does (ne0 the features); `view_of`: the array it is a view
        into (its first columns), as ggml_argsort_top_k's top-k is a view of the whole argsort."""
        from engine.compare.llama_cpp import _Head

        backing = np.ascontiguousarray(array if view_of is None else view_of)
        item = backing.itemsize
        head = _Head(ggml_type, None, (array.shape[1], array.shape[0], 1, 1),
                     (item, backing.shape[1] * item, backing.size * item, backing.size * item))
        address = ctypes.addressof(head)
        self.tensors[address] = (name, head, backing)
        return address

    def ggml_get_name(self, tensor):
        return self.tensors[tensor][0].encode()

    def ggml_op_desc(self, tensor):  # the operator that made it, as llama.cpp's graph has it
        return b"SOFT_MAX" if self.tensors[tensor][0].startswith("ffn_moe_probs") else b"NONE"

    def ggml_nbytes(self, tensor):
        _, head, _ = self.tensors[tensor]
        return sum((head.ne[i] - 1) * head.nb[i] for i in range(4)) + head.nb[0]

    def ggml_backend_tensor_get(self, tensor, raw, offset, size):
        ctypes.memmove(raw, self.tensors[tensor][2].ctypes.data, size)


def test_llama_cpps_ffn_moe_topk_tensors_give_its_choices_and_name_the_first_flip():
    """llama-cpp-python is not installed here (building it needs llama.cpp's C++ build): the collector that
    `check --against-llama-cpp` runs is fed constructed graph tensors instead — transformers' float32 router
    logits, softmax and chosen experts (int32, a view of the argsort's first k columns) as `ffn_moe_*-L`."""
    from engine.compare.llama_cpp import Geometry, _Collector, collected

    ggml, dump = _Ggml(), np.load(DUMP)
    collector = _Collector(ggml, Geometry(4, 2, 8, pairs=False))
    past = 0
    for round_ in range(len(REF["greedy_ids"])):
        pass_ = "prefill" if round_ == 0 else f"decode.{round_}"
        count = dump[f"{pass_}.unembed.hook_out"].shape[0]
        collector.start(pass_, past, count)
        for layer in (0, 1):
            logits = dump[f"{pass_}.blocks.{layer}.mlp.hook_router_logits"]
            topk = dump[f"{pass_}.blocks.{layer}.mlp.hook_topk"].astype(np.int32)
            argsort = np.concatenate([topk, np.argsort(-logits, axis=1)[:, topk.shape[1]:].astype(np.int32)], axis=1)
            for tensor in (ggml.tensor(f"ffn_moe_logits-{layer}", logits, 0),
                           ggml.tensor(f"ffn_moe_probs-{layer}", dump[f"{pass_}.blocks.{layer}.mlp.hook_router_scores"], 0),
                           ggml.tensor(f"ffn_moe_topk-{layer}", topk, 26, view_of=argsort)):
                assert collector.callback(tensor, True, None) and collector.callback(tensor, False, None)
        past += count
    assert collector.error is None
    llama = collected("model.gguf", collector)
    assert np.array_equal(llama.get(parse_key(f"decode.{ROUND}.blocks.{LAYER}.mlp.hook_topk")),
                          dump[f"decode.{ROUND}.blocks.{LAYER}.mlp.hook_topk"])
    report = compare_generation(SCENARIO, llama)
    assert (report.flip.key.pass_, report.flip.layer, report.flip.other) == (f"decode.{ROUND}", LAYER,
                                                                             Cause("side.llama_cpp"))
    assert int(report.flip.token.split(" · ")[0]) == POSITION
    assert report_lines(report, "en")[1].startswith(f"first routing flip: decode.{ROUND} · layer {LAYER} · token {POSITION}")
    assert "llama.cpp [6, 1]" in report_lines(report, "en")[1]


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is not None, reason="llama-cpp-python is installed")
def test_check_against_llama_cpp_without_llama_cpp_python_says_what_it_needs():
    from engine.compare.llama_cpp import llama_cpp_dump
    from engine.loading import ScenarioError

    with refused(ScenarioError, "needs the llama-cpp-python package"):
        llama_cpp_dump("model.gguf", [1], [])


def test_diff_of_a_quantized_cache_scenario_reports_its_error_and_first_flip_where_experts_differ(tmp_path):
    """The exact-cache report met the two runs operator by operator in order; once a token is routed to another
    expert the runs hold different operators, and it compared a (20, 300) matrix with a (20, 24) one."""
    scenario = tmp_path / "tie.yaml"
    scenario.write_text(f"checkpoint: {FOLDER}\ncache: {{quantize: float8_e5m2}}\n"
                        f"requests:\n  - ids: {IDS}\n    max_new_tokens: 3\n")
    result = CliRunner().invoke(app, ["diff", str(scenario)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    lines = result.output.splitlines()
    assert lines[0] == "float8_e5m2 cache against the exact cache (max |Δ|):"
    assert [line.split(":")[0].strip() for line in lines[1:4]] == [f"request 0 round {r}" for r in range(3)]
    lossy = dataclasses.replace(SCENARIO, cache=CacheSpec(quantize=Quantize.FLOAT8_E5M2))
    round_, layer, position = first_flip_walked(STATES, Session(lossy, make_backend("numpy", "float64")).steps())
    where = "prefill" if round_ == 0 else f"decode.{round_}"
    assert lines[4].startswith(f"first routing flip against the float64 exact-cache run: {where} · layer {layer} · "
                               f"token {position} · ")
