"""Run a scenario and check its `expect:` tables (`tinyllm-tui check`)."""

from __future__ import annotations

from engine.backend import Backend
from engine.compare.expect import Outcome, check
from engine.scenario import Scenario
from engine.session import Session
from engine.spec import Mode


def check_scenario(scenario: Scenario, backend: Backend | None = None) -> list[Outcome]:
    """Every expectation against the cached run, or the full recompute where it asks for one."""
    needs_full = any(e.run == Mode.FULL for e in scenario.expect)
    full = Session(scenario, backend, mode=Mode.FULL).steps() if needs_full else None
    return check(scenario.expect, Session(scenario, backend).steps(), full)
