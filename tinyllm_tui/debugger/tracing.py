"""The operator stream read once, from the first operator to the end of the trace: `tinyllm-tui run`'s pass.

A `Trace` is a session of the debugger's run (its weights, interventions and fault) with nothing kept: no
history for stepping back (no budget accounting, no round-start copies) and no frames. It gives what each
operator hits, the documents `run --json`/`--jsonl` print, the activations `--save-activations` writes, and
each pass's logit lens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine import Scenario, Session
from engine.analysis import decisions, passes
from engine.breakpoints import Breakpoint
from engine.compare.dump import save_dump
from engine.layout import Passes
from engine.export import ActivationDump, record, requests_record, trace_document
from engine.trace import OpState
from tinyllm_tui.debugger.readings import pass_lens


class Trace:
    def __init__(self, scenario: Scenario, backend, inject: str | None, breakpoints: tuple[Breakpoint, ...],
                 save: str | Path | None = None):
        """`save`: where every pass's activations and caches go once the stream has been read (or stopped)."""
        self.scenario, self.backend, self.inject, self.breakpoints = scenario, backend, inject, breakpoints
        self.session = Session(scenario, backend, inject=inject)
        self.save = save
        self._dump = None if save is None else ActivationDump(Passes(scenario))

    def __iter__(self) -> Iterator[tuple[OpState, tuple[str, ...]]]:
        """Every operator with the breakpoints that hit it (where the TUI's continue stops)."""
        try:
            for state in self.session.steps():
                if self._dump is not None:
                    self._dump.see(state)
                yield state, tuple(b.text for b in self.breakpoints if b.hits(state))
        finally:
            if self._dump is not None:
                save_dump(self._dump.arrays(), self.save)

    @property
    def results(self):
        """What each request generated (complete once the stream has been read to its end)."""
        return self.session.results

    def unused_interventions(self) -> list[str]:
        """The interventions that changed nothing: no operator of that name, head, rows and pass ran."""
        return [i.text for i in self.session.patcher.unused()] if self.session.patcher else []

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
        if not self.scenario.interventions:
            return None
        clean = dataclasses.replace(self.scenario, interventions=())
        return decisions(Session(clean, self.backend, inject=self.inject).steps())
