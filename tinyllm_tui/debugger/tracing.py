"""The operator stream read once, from the first operator to the end of the trace: `tinyllm-tui run`'s pass.

A `Trace` is a session of the debugger's run (its weights, interventions and fault) with nothing kept: no
history for stepping back (no budget accounting, no round-start copies) and no frames. It gives what each
operator hits, the documents `run --json`/`--jsonl` print, the activations `--save-activations` writes, and
each pass's logit lens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from engine import Scenario, Session, to_host
from engine.analysis import decisions, passes
from engine.breakpoints import Breakpoint
from engine.compare.dump import save_dump
from engine.layout import Passes
from engine.export import ActivationDump, record, requests_record, trace_document
from engine.interventions import routed_expert
from engine.layers import route
from engine.trace import OpKind, OpState
from tinyllm_tui.debugger.readings import pass_lens


@dataclass(frozen=True)
class RouteWithout:
    """What a mixture of experts' top-k chose in the same pass of the run without the scenario's interventions."""

    chosen: np.ndarray | None  # (T, k) each token's experts there; None: that pass fed another token (an earlier
    #                             pass chose another one without the interventions)


class Trace:
    def __init__(self, scenario: Scenario, backend, inject: str | None, breakpoints: tuple[Breakpoint, ...],
                 save: str | Path | None = None):
        """`save`: where every pass's activations and caches go once the stream has been read (or stopped)."""
        self.scenario, self.backend, self.inject, self.breakpoints = scenario, backend, inject, breakpoints
        self.session = Session(scenario, backend, inject=inject)
        self.save = save
        self._dump = None if save is None else ActivationDump(Passes(scenario))
        self._chose: dict[tuple[int, int], int] = {}  # (request, round) -> the token this run chose

    def __iter__(self) -> Iterator[tuple[OpState, tuple[str, ...]]]:
        """Every operator with the breakpoints that hit it (where the TUI's continue stops)."""
        try:
            for state in self.session.steps():
                if self._dump is not None:
                    self._dump.see(state)
                if state.kind == OpKind.CHOICE:
                    self._chose[(state.request, state.round)] = int(to_host(state.values)[0, 0])
                yield state, tuple(b.text for b in self.breakpoints if b.hits(state))
        finally:
            if self._dump is not None:
                save_dump(self._dump.arrays(), self.save)

    @property
    def results(self):
        """What each request generated (complete once the stream has been read to its end)."""
        return self.session.results

    def unused_interventions(self) -> list[tuple[str, tuple[int, int] | None]]:
        """The interventions that changed nothing (no operator of that name, head, rows and pass ran), each with the
        (layer, expert) it names when it is on one expert's hooks (no token was routed there)."""
        unused = self.session.patcher.unused() if self.session.patcher else []
        return [(i.text, routed_expert(i)) for i in unused]

    def document(self, states: Iterable[OpState]) -> dict:
        """`states` (read from this trace) as the document `run --json` prints."""
        return trace_document(self.session, states)

    @staticmethod
    def record(state: OpState) -> dict:
        return record(state)

    def requests_record(self) -> dict:
        return requests_record(self.results)

    def lenses(self, top_k: int) -> Iterator[tuple]:
        """Each pass with its logit lens and the chosen token's direct logit attribution (None where the model
        normalizes each block's output), as the TUI's lens reads one round."""
        for run in passes(state for state, _ in self):
            yield (run, *pass_lens(self.session.model, run, top_k))

    def clean_decisions(self) -> dict | None:
        """(request, round) -> what each pass chose without the scenario's interventions (None when it has none)."""
        return None if self._clean is None else self._clean[0]

    def route_without(self, state: OpState) -> RouteWithout | None:
        """Beside a top-k operator of a run under interventions: what the same pass chose without them."""
        if self._clean is None or route(state.op) is None:
            return None
        decisions, routes = self._clean
        apart = any(self._chose.get((state.request, r)) != decisions.get((state.request, r), (None,))[0]
                    for r in range(state.round))
        return RouteWithout(None if apart else routes.get((state.request, state.round, state.chunk, state.layer)))

    @cached_property
    def _clean(self) -> tuple[dict, dict] | None:
        """The run without the interventions, read once: its decisions and each top-k's experts."""
        if not self.scenario.interventions:
            return None
        clean, routes = dataclasses.replace(self.scenario, interventions=()), {}

        def routed(states: Iterable[OpState]) -> Iterator[OpState]:
            for state in states:
                if (chosen := route(state.op)) is not None:
                    routes[(state.request, state.round, state.chunk, state.layer)] = chosen.chosen
                yield state

        return decisions(routed(Session(clean, self.backend, inject=self.inject).steps())), routes
