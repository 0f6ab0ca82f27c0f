"""What stops a command before or while it runs, as the front ends tell it: a bad input (one line, exit 2 on the
CLI), a bad option (named), a load cancelled. The front ends ask here instead of naming the engine's errors."""

from __future__ import annotations

from engine import BackendError, ScenarioError
from engine.analysis import AnalysisError
from engine.breakpoints import BreakpointError
from engine.interventions import InterventionError
from engine.loading.edits import EditError
from engine.progress import LoadCancelled

BAD_INPUT = (ScenarioError, BackendError, BreakpointError, EditError, InterventionError, AnalysisError)


class OptionError(ValueError):
    """An option that cannot be used, said with its name (`--inject`, `--ids`, …)."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option



def bad_input(error: BaseException) -> str | None:
    """The one line a bad input says (a file, a breakpoint, an edit, an intervention, a reading); None otherwise."""
    return str(error) if isinstance(error, BAD_INPUT) else None


def cancelled(error: BaseException) -> bool:
    """A load stopped by the user (Esc, ctrl+c) rather than by the file."""
    return isinstance(error, LoadCancelled)
