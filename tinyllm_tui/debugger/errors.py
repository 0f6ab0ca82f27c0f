"""What stops a command before or while it runs, as the front ends tell it: a bad input (one line, exit 2 on the
CLI), a bad option (named), a load cancelled. The front ends ask here instead of naming the engine's errors."""

from __future__ import annotations

from collections.abc import Callable

from engine import BackendError, ScenarioError
from engine.analysis import AnalysisError
from engine.breakpoints import BreakpointError
from engine.causes import Cause, CausedError, cause
from engine.interventions import InterventionError
from engine.loading.document import LoaderWarning, located
from engine.loading.edits import EditError
from engine.progress import LoadCancelled

BAD_INPUT = (ScenarioError, BackendError, BreakpointError, EditError, InterventionError, AnalysisError)


class OptionError(ValueError):
    """An option that cannot be used, said with its name (`--inject`, `--ids`, …) and why, as a cause (a code and
    its facts, engine.causes) that the front end words; `str(error)` is that cause, unworded."""

    def __init__(self, option: str, why: Cause):
        super().__init__(str(why))
        self.option, self.cause = option, why


def bad_input(error: BaseException, word: Callable[[Cause], str]) -> str | None:
    """The one line a bad input says (a file, a breakpoint, an edit, an intervention, a reading), its cause in the
    words `word` gives it (the front end's catalogue); None for an error that is not a bad input."""
    if isinstance(error, ScenarioError):  # a file's refusal, located
        return located(error.file, error.line, error.path, word(error.message))
    if isinstance(error, CausedError):
        return word(error.cause)
    return str(error) if isinstance(error, BAD_INPUT) else None


def warning_words(warning: Warning, word: Callable[[Cause], str]) -> str:
    """A warning as one line: a loader's located, its cause in the words `word` gives it; any other as it says."""
    if isinstance(warning, LoaderWarning):
        return located(warning.file, None, warning.path, word(warning.cause))
    return str(warning)


def file_error(file: str, path: str, code: str, **facts) -> ScenarioError:
    """A front end's refusal of a file, located as the loaders locate theirs (`path`: where in the document)."""
    return ScenarioError(file, None, path, cause(code, **facts))


def cancelled(error: BaseException) -> bool:
    """A load stopped by the user (Esc, ctrl+c) rather than by the file."""
    return isinstance(error, LoadCancelled)
