"""Opening a file in the debugger, the same for the CLI and the TUI: the options checked before anything
loads, the file read (reporting how far through engine.progress, cancellable between reports), then what
the Debugger opens with (breakpoints, --set edits, the history's budget). The TUI runs `open_file` in its
runner; the CLI calls `open_debugger`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from engine import Scenario, Session, make_backend
from engine import layers
from engine.breakpoints import parse_breakpoint
from engine.causes import CausedError, cause
from engine.faults import FAULTS
from engine.gctuning import tune_for_tracing
from engine.interventions import check_intervention, check_operator, parse_ablation, parse_intervention
from engine.loading import open_model
from engine.loading.budget import DEFAULT_BUDGET, parse_size, weight_bytes
from engine.loading.edits import Edit, parse_set
from engine.progress import READING, Listener, LoadCancelled, listening
from engine.session import INJECTIONS
from tinyllm_tui.debugger.errors import OptionError

PREPARING = "preparing"  # the Debugger's first state: no count to show
HISTORY_FLOOR = 256 * 2**20  # the TUI keeps at least this much history, however large the weights

__all__ = ["HISTORY_FLOOR", "Loading", "ModelOptions", "Opening", "PREPARING", "is_reading", "open_file",
           "load", "opening", "check_options", "prepare_process", "fault_names"]


@dataclass(frozen=True)
class ModelOptions:
    """What the command line says about the model and its run (each is the CLI option of the same name)."""

    backend: str = "numpy"
    dtype: str = "float64"
    inject: str | None = None
    sets: list[str] | None = None
    max_memory: str | None = None
    prompt: list[str] | None = None
    ids: list[str] | None = None
    chat: list[str] | None = None
    system: str | None = None
    max_new_tokens: int | None = None
    batch: bool = False
    patches: list[str] | None = None
    ablations: list[str] | None = None
    breakpoints: list[str] | None = None
    mla: str | None = None  # a layer kind's form (engine.layers.forms): its option is declared here and in the CLI


@dataclass(frozen=True)
class Opening:
    """What the debugger opens with once the file is read: the scenario and what depends on it."""

    scenario: Scenario
    breakpoints: list[str] = ()
    edits: list[Edit] = ()
    budget: int | None = None


@dataclass(frozen=True)
class Loading:
    """A file still to load: `load()` reads it (in a thread, reporting through engine.progress)."""

    file: str
    load: Callable[[], Opening]


def fault_names() -> list[str]:
    return list(INJECTIONS)


def is_reading(stage: str) -> bool:
    """A loading report about the YAML's bytes (the others count tensors, or say PREPARING)."""
    return stage == READING


def prepare_process() -> None:
    """Set the process for recording every operator (Python's collector: engine/gctuning.py)."""
    tune_for_tracing()


def check_options(options: ModelOptions):
    """The options that need no file, checked before any loading; returns the array backend.
    Raises OptionError (or BreakpointError, BackendError) for one that cannot be used."""
    if options.inject is not None and options.inject not in INJECTIONS:
        raise OptionError("--inject", cause("option.bug", bug=options.inject, names=", ".join(INJECTIONS)))
    for name, form in _forms(options).items():
        *others, last = layers.forms()[name]
        if form not in (*others, last):
            raise OptionError(f"--{name}", cause("option.form", form=form, forms=", ".join(others), last=last))
    for text in options.breakpoints or []:
        parse_breakpoint(text)  # a bad --break is reported before anything loads
    memory_limit(options.max_memory)
    return make_backend(options.backend, options.dtype)


def load(file: str | Path, options: ModelOptions, report: Listener | None = None) -> Scenario:
    """A scenario file or a checkpoint (with --prompt/--ids/--max-new-tokens), with --patch and --ablate after the
    scenario's own interventions, as one batch with --batch. A misspelt hook is refused before anything shows.
    `report(stage, done, total)` hears how far reading has got (`is_reading(stage)`: bytes of YAML)."""
    ids = None if options.ids is None else [_ids(text) for text in options.ids]
    with listening(report) if report is not None else nullcontext():
        scenario = open_model(file, prompt=options.prompt, ids=ids, chat=_conversations(options),
                              max_new_tokens=options.max_new_tokens, dtype=options.dtype,
                              max_memory=memory_limit(options.max_memory))
    scenario = dataclasses.replace(scenario, batch=True) if options.batch else scenario
    scenario = with_forms(scenario, _forms(options))
    scenario = with_interventions(scenario, options.patches, options.ablations)
    _refuse_unknown_operators(scenario, make_backend(options.backend, options.dtype))
    return scenario


def _forms(options: ModelOptions) -> dict[str, str]:
    """The forms the options pick, by layer kind: a kind with forms (engine.layers.forms) has an option named after
    it (`--mla`), a field of ModelOptions."""
    return {name: form for name in layers.forms() if (form := getattr(options, name, None)) is not None}


def with_forms(scenario: Scenario, forms: dict[str, str]) -> Scenario:
    """The scenario with the layers of each kind in `forms` in its form (`--mla absorbed`)."""
    model = scenario.model
    for name, form in forms.items():
        try:
            model = layers.in_form(model, name, form)
        except ValueError as error:  # the kind's code (its CAUSES)
            raise OptionError(f"--{name}", cause(error.args[0])) from None
    return dataclasses.replace(scenario, model=model)


def with_interventions(scenario: Scenario, patches: list[str] | None, ablations: list[str] | None) -> Scenario:
    """The scenario with the --patch and --ablate interventions after its own; a bad one raises InterventionError."""
    added = [*(parse_intervention(text) for text in patches or []), *(parse_ablation(text) for text in ablations or [])]
    for intervention in added:
        check_intervention(intervention, scenario.model, len(scenario.requests), len(scenario.vocab))
    return dataclasses.replace(scenario, interventions=(*scenario.interventions, *added)) if added else scenario


def _refuse_unknown_operators(scenario: Scenario, backend) -> None:
    """A misspelt hook in an intervention is refused before anything shows: the model's hook registry
    (engine.hooks) lists every hook it yields, without running it."""
    if scenario.interventions:
        hooks = Session(scenario, backend).model.hooks
        for intervention in scenario.interventions:
            check_operator(intervention, hooks)


def opening(scenario: Scenario, options: ModelOptions) -> Opening:
    """What a Debugger on `scenario` opens with, the same for the TUI and the CLI: the scenario's breakpoints then
    every --break, every --set as an unsaved edit, and the history's budget. A bug that cannot run is refused."""
    why = FAULTS[options.inject].cannot_run(scenario) if options.inject else None
    if why:
        raise OptionError("--inject", cause("option.cannot_run", bug=options.inject, path=str(scenario.path),
                                            why=why))
    return Opening(scenario, [*scenario.breakpoints, *(options.breakpoints or [])],
                   [parse_set(text, scenario.weights) for text in options.sets or []],
                   history_budget(scenario, options.dtype, memory_limit(options.max_memory)))


def history_budget(scenario: Scenario, dtype: str, max_memory: int | None) -> int:
    """What the history may keep: the memory budget less the weights (at least HISTORY_FLOOR)."""
    total = DEFAULT_BUDGET if max_memory is None else max_memory
    return max(total - weight_bytes(scenario.model, len(scenario.vocab), dtype), HISTORY_FLOOR)


def _conversations(options: ModelOptions) -> list[list[tuple[str, str]]] | None:
    """One conversation per --chat, as (role, content) messages: the --system message, then that user message."""
    if options.system is not None and not options.chat:
        raise OptionError("--system", cause("option.system"))
    system = [] if options.system is None else [("system", options.system)]
    return [[*system, ("user", text)] for text in options.chat] if options.chat else None


def _ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise OptionError("--ids", cause("option.ids", text=text)) from None


def memory_limit(text: str | None) -> int | None:
    """--max-memory's size in bytes (None: not given); OptionError for one that is not a size."""
    try:
        return None if text is None else parse_size(text)
    except CausedError as error:
        raise OptionError("--max-memory", error.cause) from None


def open_file(loading: Loading, prepare: Callable[[Opening], object], report: Listener,
              cancelled: threading.Event):
    """The prepared Debugger; raises LoadCancelled at the report after `cancelled` was set (or at the end)."""

    def listener(stage: str, done: int, total: int) -> None:
        if cancelled.is_set():
            raise LoadCancelled
        report(stage, done, total)

    with listening(listener):
        opening = loading.load()
        listener(PREPARING, 0, 0)
        debugger = prepare(opening)
    if cancelled.is_set():  # pressed while the debugger was prepared: honoured all the same
        raise LoadCancelled
    return debugger
