"""Labels are made only when read, once, and say which token or feature an entry stands for."""

from __future__ import annotations

from conftest import ROOT, X01

from engine import Session, load_scenario
from engine import labels as labels_module
from engine.labels import Axis, labels, visible
from engine.loading.checkpoint import load_checkpoint
from engine.trace import OpKind, Phase


def test_a_traced_run_builds_no_label_and_reading_builds_it_once(monkeypatch):
    made = []
    real = labels_module.labels
    monkeypatch.setattr(labels_module, "labels", lambda axis: made.append(axis) or real(axis))
    states = list(Session(load_scenario(X01)).steps())
    assert made == []
    assert not any("timeline" in vars(s.moment) or "inputs" in vars(s) for s in states)  # also made when read
    assert states[0].timeline[0].text == "我" and states[0].inputs[0].name == "embed"
    scores = next(s for s in states if s.kind == "scores")
    assert scores.output.rows == ("0 · 我", "1 · 爱", "2 · 学习")  # X01's prompt 我 爱 学习
    assert scores.output.rows == ("0 · 我", "1 · 爱", "2 · 学习")
    assert len(made) == 1


def test_each_scheme_reads_as_in_the_walkthrough():
    vocab = load_scenario(X01).vocab  # X01: 0 PAD, 1 我, 2 爱, 3 学习, 4 你
    context = (1, 2, 3)
    assert labels(Axis("chunk", 2, 1, context, vocab)) == ("1 · 爱", "2 · 学习")
    assert labels(Axis("keys", 4, 0, context, vocab, column=True)) == ("k0 · 我", "k1 · 爱", "k2 · 学习", "k3 · ?")
    assert labels(Axis("vocab", 5, vocab=vocab))[4] == "4 · 你"
    assert labels(Axis("features", 3)) == ("f0", "f1", "f2")
    assert labels(Axis("choice", 1)) == ("token id",)


def test_phase_and_kind_are_typed_and_still_read_as_text():
    state = next(iter(Session(load_scenario(X01)).steps()))
    assert state.phase is Phase.PREFILL and state.phase == "prefill" and f"{state.phase}" == "prefill"
    assert state.kind is OpKind.EMBED and state.kind == "embed" and str(state.kind) == "embed"
    assert state.context == (1, 2, 3)


def test_a_token_of_only_whitespace_is_drawn_visibly_and_any_other_as_it_is():
    assert [visible(t) for t in (" ", "  ", "\n", "\t", " \r\n", "", "\u3000")] == \
        ["␣", "␣␣", "\\n", "\\t", "␣\\r\\n", "∅", "\\u3000"]
    assert [visible(t) for t in (" cat", "cat ", "学习", "\n.")] == [" cat", "cat ", "学习", "\n."]


def test_a_one_space_token_shows_in_the_timeline_the_row_labels_and_the_round_summary():
    """qwen3_moe's tokenizer reads "The cat" as The, a space, cat: the space is drawn ␣ wherever a label is made."""
    from tinyllm_tui.debugger.debugger import Debugger

    scenario = load_checkpoint(ROOT / "tests" / "fixtures" / "qwen3_moe", prompt="The cat")
    assert [scenario.vocab.tokens[t] for t in scenario.requests[0].tokens] == ["The", " ", "cat"]
    debugger = Debugger(scenario)
    frame = debugger.frame
    assert [text for _, text, _ in frame.timeline.tokens] == ["The", "␣", "cat"]
    assert [frame.matrix.rows[i] for i in range(3)] == ["0 · The", "1 · ␣", "2 · cat"]
    debugger.continue_()
    assert debugger.frame.timeline.rounds[0].fed == ("The", "␣", "cat")
