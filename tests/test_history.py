"""Time travel: stepping back inside the kept window, and replay when stepping back past it."""

from __future__ import annotations

from conftest import X01

from engine import Session, load_scenario, to_host
from engine.history import History, round_summaries


def test_bounded_history_replays_to_go_back_past_its_window():
    scenario = load_scenario(X01)
    reference = list(Session(scenario).steps())
    starts = []

    def start(resume=None, on_round=None):
        starts.append(resume)
        return Session(scenario).steps(resume, on_round)

    history = History(start, limit=5)
    assert history.goto(40) and history.current.name == reference[40].name
    assert len(starts) == 1
    assert history.goto(37) and len(starts) == 1  # still in memory
    assert history.goto(3) and len(starts) == 2  # dropped: replayed from the start (round 0 starts it)
    assert starts[1].step == 0 and history.resumed_from == 0
    assert (to_host(history.current.values) == to_host(reference[3].values)).all()
    assert not history.goto(999) and history.cursor == len(reference) - 1 and history.total == len(reference)
    assert history.at_end and not history.forward()


def test_round_summaries_are_the_a9_table():
    states = list(Session(load_scenario(X01)).steps())
    rounds = round_summaries(states, 0)
    assert [(r.phase, r.fed, r.cache_length, r.chosen) for r in rounds] == [
        ("prefill", ("我", "爱", "学习"), 3, "爱"), ("decode", ("爱",), 4, "爱")]
