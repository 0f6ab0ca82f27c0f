"""A session's trace as one JSON-ready document (`tinyllm-tui run --json`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from engine.backend import to_host
from engine.session import Session
from engine.trace import OpState, RequestResult


def json_number(x: float) -> float | str:
    """JSON has no infinities: non-finite numbers become "-inf", "inf", "nan"."""
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def record(state: OpState) -> dict:
    return {
        "step": state.step,
        "request": state.request,
        "phase": state.phase,
        "round": state.round,
        "name": state.name,
        "layer": state.layer,
        "head": state.head,
        "rows": list(state.output.rows),
        "cols": list(state.output.cols),
        "values": [[json_number(float(x)) for x in row] for row in to_host(state.values)],
    }


def trace_document(session: Session, states: Iterable[OpState]) -> dict:
    """Consume `states` (from `session.steps()`) into the document `run --json` prints."""
    records = [record(state) for state in states]
    return {
        "scenario": session.scenario.path,
        "backend": session.backend.name,
        "dtype": session.backend.dtype_name,
        "records": records,
        **requests_record(session.results),
    }


def requests_record(results: list[RequestResult]) -> dict:
    """What every request generated: the last record of `run --jsonl`."""
    return {"requests": [{"input": list(r.input), "generated": list(r.generated), "stop": r.stop} for r in results]}
