"""The Debugger's comparisons: the run being debugged (fault and stale cache included) against a full
recompute, against each request alone, against the exact cache, against the --against dump or llama.cpp,
and its expect: tables. Each runs sessions of its own (safe in a worker, beside the runner) and is
cancelled through `cancel()`, which raises DiffCancelled in it at its next step.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine import Scenario, ScenarioError, Session
from engine.backend import make_backend
from engine.caches import CacheSpec, Quantize
from engine.causes import Cause, cause
from engine.compare.against import Against, Report
from engine.compare.check import check_scenario
from engine.compare.diff import TOLERANCE, OpDiff, diff_batch, diff_scenario, first_divergence
from engine.compare.exact import against_exact
from engine.compare.routes import RouteFlip, flip_between
from engine.layout import Passes
from engine.compare.expect import Outcome
from engine.interventions import InterventionError
from engine.layers import routes
from engine.session import StaleFrom
from engine.trace import OpState
from tinyllm_tui.debugger.results import DiffLine, DiffReport, FlipLine, FlipPass


class DiffCancelled(RuntimeError):
    """A comparison was cancelled before it finished."""


@dataclass(frozen=True)
class Compared:
    """What a comparison runs: the debugged run's scenario, fault and stale cache, as they are now."""

    scenario: Scenario
    inject: str | None
    stale: StaleFrom | None

    def session(self, backend) -> Session:
        return Session(self.scenario, backend, inject=self.inject, stale=self.stale)


class Comparisons:
    def __init__(self, backend, against: Against | None, now: Callable[[], Compared]):
        """`now()`: the run being debugged at the moment a comparison starts."""
        self.backend, self.against, self._now = backend, against, now
        self._cancel = threading.Event()
        self._count = 0
        self._counting = threading.Lock()  # guards _count: several may run

    @property
    def running(self) -> bool:
        return self._count > 0

    def cancel(self) -> None:
        self._cancel.set()

    def _cancellable(self, states: Iterator[OpState]) -> Iterator[OpState]:
        for state in states:
            time.sleep(0)  # hand the interpreter to the UI thread now and then: keys stay quick
            if self._cancel.is_set():
                raise DiffCancelled("cancelled")
            yield state

    @contextmanager
    def _counted(self) -> Iterator[None]:
        """A comparison in flight, counted so that `cancel()` reaches it."""
        with self._counting:
            if self._count == 0:
                self._cancel.clear()
            self._count += 1
        try:
            yield
        finally:
            with self._counting:
                self._count -= 1

    def diff(self, alone: bool = False) -> list[OpDiff]:
        """The run against a full recompute, or (`alone`) its requests as one batch against each run alone."""
        now = self._now()
        with self._counted():
            return (diff_batch if alone else diff_scenario)(now.scenario, self.backend, now.inject, now.stale,
                                                             self._cancellable)

    def compare(self, alone: bool = False) -> DiffReport:
        """`diff()` with where it first diverges."""
        now, diffs = self._now(), self.diff(alone)
        first = first_divergence(diffs)
        flip = self.route_flip()
        return DiffReport(tuple(map(diff_line, diffs)), None if first is None else diffs.index(first), now.inject,
                          diffs[0].tolerance if diffs else TOLERANCE, None if flip is None else flip_line(flip),
                          len(now.scenario.requests))

    def route_flip(self) -> RouteFlip | None:
        """A mixture of experts run in another dtype than float64, or over a quantized cache: the first token it
        routes otherwise than the float64 run over the exact cache (None: no experts, or nothing to compare)."""
        now = self._now()
        scenario, lossy = now.scenario, now.scenario.cache.quantize is not Quantize.NONE
        if not routes(scenario.model) or not (lossy or self.backend.dtype_name != "float64"):
            return None
        other = _other_run(self.backend.dtype_name, str(scenario.cache.quantize) if lossy else None)
        exact = Compared(dataclasses.replace(scenario, cache=CacheSpec()) if lossy else scenario, now.inject, now.stale)
        reference = make_backend(self.backend.name, "float64")
        with self._counted():
            return flip_between(self._cancellable(exact.session(reference).steps()),
                                self._cancellable(now.session(self.backend).steps()), Passes(scenario), other)

    def exact_cache(self) -> list:
        """A quantized cache's error against the exact cache, round by round (nothing for an exact cache)."""
        scenario = self._now().scenario
        return [] if scenario.cache.quantize is Quantize.NONE else against_exact(scenario, self.backend)

    def against_dump(self) -> tuple[Scenario, Report | None]:
        """The run against the --against dump over every pass (None: no dump), with the scenario it was made for.
        Raises InterventionError for an intervention that cannot run to the end."""
        now = self._now()
        if self.against is None:
            return now.scenario, None
        with self._counted():
            return now.scenario, self.against.meet(self._cancellable(now.session(self.backend).steps()))

    def against_llama_cpp(self, file: str | Path, atol: float | None, rtol: float | None) -> Report:
        """A GGUF file's first request through llama.cpp itself against this reference."""
        from engine.compare.llama_cpp import compare_with_llama_cpp  # ctypes and llama.cpp only when asked

        return compare_with_llama_cpp(self._now().scenario, file, atol, rtol, self.backend)

    def expectations(self, scenario: Scenario) -> list[Outcome]:
        """The expect: tables of `scenario` against its computation (none for one that cannot run to the end:
        the move that reaches it says why)."""
        try:
            return check_scenario(scenario, self.backend) if scenario.expect else []
        except InterventionError:
            return []

    def checked(self) -> list[Outcome]:
        """`tinyllm-tui check`: the tables' outcomes; a scenario without tables, or a table naming what the run
        never computes, raises ScenarioError (a bad file, not a disagreement)."""
        scenario = self._now().scenario
        if not scenario.expect:
            raise ScenarioError(str(scenario.path), None, "expect", cause("option.no_tables"))
        outcomes = self.expectations(scenario)
        malformed = next((o for o in outcomes if o.problem is not None), None)
        if malformed is not None:
            raise malformed.error(str(scenario.path))
        return outcomes


def diff_line(d: OpDiff) -> DiffLine:
    return DiffLine(d.step, d.request, d.phase, d.round, d.name, d.layer, d.head, d.max_abs, d.tolerance, d.agrees,
                    d.mismatch, d.state)


def flip_line(flip: RouteFlip) -> FlipLine:
    return FlipLine(FlipPass(flip.key.request, flip.key.pass_), flip.layer, flip.token, flip.ours, flip.theirs,
                    flip.our_scores, flip.their_scores, flip.margin, flip.other)


def _other_run(dtype: str, quantize: str | None) -> Cause:
    """What a run in `dtype` over a `quantize` cache (None: exact) is beside the float64, exact-cache one."""
    if quantize is None:
        return Cause("side.run", {"dtype": dtype})
    return Cause("side.cache", {"quantize": quantize}) if dtype == "float64" else Cause(
        "side.run_cache", {"dtype": dtype, "quantize": quantize})
