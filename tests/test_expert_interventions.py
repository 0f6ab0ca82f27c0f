"""Interventions on a mixture of experts (tests/fixtures/qwen3_moe): `run` prints beside each top-k what the same
pass chose without them (checked against transformers' own choices), an intervention on an expert's hooks applies
to the rows of the tokens routed to it by their positions, and one on an expert no token reaches in the first
round is accepted, applied where a later pass reaches it, and said to be waiting."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from engine import Session, make_backend, to_host
from engine.interventions import parse_intervention
from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.cli import app
from tinyllm_tui.debugger import Debugger
from tinyllm_tui.debugger.interventions import Intervened
from tinyllm_tui.tui.result_words import describe

FOLDER = Path(__file__).parent / "fixtures" / "qwen3_moe"
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]
LAYER_1 = list(REF["moe_layers"]).index(1)


def without_line(output: str, name: str = "blocks.1.mlp.hook_topk") -> str:
    """The line `run` prints under the prefill's table of `name`."""
    block = output.split(f"] {name}\n", 1)[1].split("\n\n", 1)[0]
    return block.splitlines()[-1]


def run(*options: str) -> str:
    result = CliRunner().invoke(app, ["run", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "1",
                                      *options])
    assert result.exit_code == 0, result.output
    return result.output


def test_run_prints_beside_an_ablated_top_k_the_experts_each_token_chose_without_the_ablation():
    reference = REF["topk"][LAYER_1]  # transformers' choices: what the pass chooses without interventions
    line = without_line(run("--ablate", "blocks.1.mlp expert 3"))
    changed = [t for t in range(len(IDS)) if 3 in reference[t]]
    assert changed and line.startswith("without the interventions: ")
    listed = line.removeprefix("without the interventions: ").removesuffix(" (the other tokens as here)").split("; ")
    assert [item.split(" · ")[0] for item in listed] == [str(t) for t in changed]
    assert all(item.endswith(str(reference[t].tolist())) for item, t in zip(listed, changed))


def test_a_forced_route_lists_only_the_token_it_forced_and_a_layer_before_it_the_same_experts():
    output = run("--patch", "blocks.1.mlp.hook_topk[4,:]=[2, 7]")
    line = without_line(output)
    assert line.startswith("without the interventions: 4 · ") and line.count(";") == 0
    assert line.endswith(f"{REF['topk'][LAYER_1][4].tolist()} (the other tokens as here)")
    assert without_line(output, "blocks.0.mlp.hook_topk") == "without the interventions: the same experts for every token"


def test_an_intervention_on_an_expert_row_applies_to_that_tokens_row_by_its_position():
    """Expert 2 of layer 1 runs on the tokens routed to it: position 2 is one of them, not its third row."""
    scenario = load_checkpoint(FOLDER, ids=IDS, max_new_tokens=1)
    assert 2 in REF["topk"][LAYER_1][2]

    def expert_2(interventions):
        states = Session(dataclasses.replace(scenario, interventions=interventions), make_backend()).steps()
        state = next(s for s in states if s.name == "blocks.1.mlp.experts.2.hook_out")
        return state.positions, to_host(state.values)

    positions, clean = expert_2(())
    _, patched = expert_2((parse_intervention("blocks.1.mlp.experts.2.hook_out[2,:]=0"),))
    row = positions.index(2)
    assert row != 2 and not patched[row].any()
    assert np.array_equal(np.delete(patched, row, axis=0), np.delete(clean, row, axis=0))


def test_an_expert_no_token_reaches_in_the_prefill_is_accepted_applied_later_and_said_to_be_waiting():
    """With the prompt [1, 2], layer 1 routes no token to expert 3 in the prefill; decode round 2 does."""
    scenario = load_checkpoint(FOLDER, ids=[1, 2], max_new_tokens=3)
    debugger = Debugger(scenario)
    result = debugger.intervene("blocks.1.mlp.experts.3.hook_out[:,:]=0")
    assert isinstance(result, Intervened) and result.unreached == (1, 3)
    assert "no token has been routed to expert 3 of layer 1 so far" in describe(result, "en")
    assert "专家3" in describe(result, "zh")
    states = list(Session(debugger.scenario, make_backend()).steps())
    reached = [s for s in states if s.name == "blocks.1.mlp.experts.3.hook_out"]
    assert [s.round for s in reached] == [2] and not to_host(reached[0].values).any()


def test_run_warns_of_an_expert_no_token_was_routed_to_in_words_that_say_so():
    result = CliRunner().invoke(app, ["run", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "2",
                                      "--patch", "blocks.1.mlp.experts.4.hook_out[:,0]=0"])
    assert result.exit_code == 0
    assert "changed nothing: no token at those positions and passes was routed to expert 4 of layer 1" in result.output
