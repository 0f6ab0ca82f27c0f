"""The `tinyllm-tui` command line: open (the TUI), run, diff.

`tinyllm-tui FILE` opens the TUI: a first argument that is not a sub-command is
routed to `open`. Every bad input ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer._click import ClickException  # Typer >= 0.26 bundles its own Click
from typer.core import TyperGroup

from engine import BackendError, Scenario, ScenarioError, Session, load_scenario, make_backend, to_host
from engine.breakpoints import BreakpointError, parse_breakpoint
from engine.compare.check import check_scenario
from engine.caches import Quantize
from engine.compare.diff import diff_batch, diff_scenario, first_divergence
from engine.compare.exact import against_exact
from engine.compare.expect import Outcome
from engine.loading.budget import DEFAULT_BUDGET, parse_size, weight_bytes
from engine.loading import open_model
from engine.compare.against import compare_activations, load_dump, prefill_states, save_activations
from engine.loading.edits import CellEdit, EditError, apply_edit, convert_scenario, parse_set, with_weights
from engine.export import json_number, record, requests_record, trace_document
from engine.faults import FAULTS
from engine.gctuning import tune_for_tracing
from engine.compare.gradcheck import check_head
from engine.progress import Cancelled, listening
from engine.session import INJECTIONS
from tinyllm_tui.presentation.summaries import (diff_cell, diff_summary, expect_summary, loading_progress, matrix_summary,
                              request_results, token_text, where)
from engine.trace import OpKind, OpState

from tinyllm_tui.presentation.numbers import text_table

DEFAULT_COMMAND = "open"
EXIT_BAD_INPUT = 2
EXIT_CANCELLED = 130  # as a shell reports a command stopped by ctrl+c: not a bad file (2), not a failure (1)
HISTORY_FLOOR = 256 * 2**20  # the TUI keeps at least this much history, however large the weights
GRADCHECK_TOLERANCE = 1e-6  # central differences with step 1e-6 agree to ~1e-9 in float64
BIG_ROWS, BIG_COLS = 64, 32  # `run` summarises a larger matrix (its lines would pass ~350 columns)
CORNER = 4  # a summarised matrix shows its first and last 4 rows and columns


class OpenByDefault(TyperGroup):
    """Routes `tinyllm-tui FILE` (or no argument) to `open`, and turns errors into one line."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and not args[0].startswith("-")):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:
        extra["standalone_mode"] = False
        try:
            code = super().main(args=args, prog_name=prog_name or "tinyllm-tui", **extra)
        except ClickException as error:
            _fail(error.format_message(), error.exit_code)
        except typer.Abort:
            _fail("aborted", 1)
        except (ScenarioError, BackendError, BreakpointError, EditError) as error:
            _fail(str(error), EXIT_BAD_INPUT)
        except BrokenPipeError:  # `tinyllm-tui run FILE | head`: stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        sys.exit(code or 0)


def _fail(message: str, code: int) -> None:
    print(f"tinyllm-tui: error: {message}", file=sys.stderr)
    sys.exit(code)


app = typer.Typer(
    cls=OpenByDefault,
    add_completion=False,
    no_args_is_help=False,
    help="A terminal step debugger for small transformer language models.",
)

ScenarioFile = Annotated[Path, typer.Argument(
    help="Scenario YAML file, or a checkpoint: a .gguf file or a Hugging Face folder (config.json).",
    show_default=False)]
BackendOption = Annotated[str, typer.Option("--backend", help="Array library: numpy, cupy or array_api_strict.")]
DtypeOption = Annotated[str, typer.Option("--dtype", help="float64 (default) or float32.")]
SetOption = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Edit one weight, e.g. 'blocks.0.attn.wk[0,1]=0.5' (repeatable).", show_default=False),
]
InjectOption = Annotated[
    Optional[str],
    typer.Option("--inject", help=f"Switch on one deliberate cache bug: {', '.join(INJECTIONS)}.", show_default=False),
]
MaxMemoryOption = Annotated[
    Optional[str],
    typer.Option("--max-memory", help="Memory budget, e.g. 8G (default: half the RAM); bigger models are refused.",
                 show_default=False),
]
PromptOption = Annotated[Optional[list[str]], typer.Option(
    "--prompt", help="Checkpoints: the text to feed, tokenized by the model's own tokenizer; repeat it for "
    "more requests.", show_default=False)]
IdsOption = Annotated[Optional[list[str]], typer.Option(
    "--ids", help="Checkpoints: token ids to feed instead of a prompt, e.g. 1,2,3; repeat it for more requests.",
    show_default=False)]
BatchOption = Annotated[bool, typer.Option(
    "--batch", help="Run the requests as one left-padded batch (diff: the batch against each request alone).")]
MaxNewTokensOption = Annotated[Optional[int], typer.Option(
    "--max-new-tokens", min=1, help="Checkpoints: how many tokens to generate (default 1).", show_default=False)]


AgainstOption = Annotated[Optional[Path], typer.Option(
    "--against", help="Activations of your own implementation (.safetensors/.npz keyed by hook name) to "
    "compare operator by operator with this reference.", show_default=False)]
ToleranceOption = Annotated[float, typer.Option("--tolerance", help="With --against: largest |Δ| that agrees.")]


def history_budget(scenario: Scenario, dtype: str, max_memory: int | None) -> int:
    """What the TUI's history may keep: the memory budget less the weights (at least HISTORY_FLOOR)."""
    total = DEFAULT_BUDGET if max_memory is None else max_memory
    return max(total - weight_bytes(scenario.model, len(scenario.vocab), dtype), HISTORY_FLOOR)


def bundled_x01() -> Path:
    return Path(str(files("tinyllm_tui.scenarios") / "x01.yaml"))


def _prepare(file: Path, backend: str, dtype: str, inject: str | None = None,
             sets: list[str] | None = None, max_memory: str | None = None,
             request: tuple = (None, None, None)) -> tuple[Scenario, Any]:
    """The scenario with every --set applied, and the backend; bad input raises before any work.

    request: a checkpoint's (--prompt, --ids, --max-new-tokens)."""
    _check_inject(inject)
    progress = _Progress()
    with listening(lambda stage, done, total: progress.show(f"loading {file}: {loading_progress(stage, done, total)}")):
        scenario = _load(file, request, dtype, max_memory)
    progress.done()
    _check_inject_runs(inject, scenario)
    weights = scenario.weights
    for edit in _edits(scenario, sets):
        weights = apply_edit(weights, edit)
    return with_weights(scenario, weights), make_backend(backend, dtype)


def _load(file: Path, request: tuple, dtype: str = "float64", max_memory: str | None = None) -> Scenario:
    """A scenario file or a checkpoint; request is (--prompt, --ids, --max-new-tokens[, --batch])."""
    prompt, ids, max_new_tokens, *batch = request
    scenario = open_model(file, prompt=prompt, ids=None if ids is None else [_ids(each) for each in ids],
                          max_new_tokens=max_new_tokens, dtype=dtype, max_memory=_max_memory(max_memory))
    return dataclasses.replace(scenario, batch=True) if any(batch) else scenario


def _ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected token ids like 1,2,3, got {text!r}", param_hint="--ids") from None


def _max_memory(text: str | None) -> int | None:
    try:
        return None if text is None else parse_size(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--max-memory") from None


def _check_inject(inject: str | None) -> None:
    if inject is not None and inject not in INJECTIONS:
        raise typer.BadParameter(f"unknown bug {inject!r} (expected one of {', '.join(INJECTIONS)})",
                                 param_hint="--inject")


def _check_inject_runs(inject: str | None, scenario: Scenario) -> None:
    why = FAULTS[inject].cannot_run(scenario) if inject else None
    if why:
        raise typer.BadParameter(f"bug {inject!r} cannot run on {scenario.path}: {why}", param_hint="--inject")


def _edits(scenario: Scenario, sets: list[str] | None) -> list[CellEdit]:
    return [parse_set(text, scenario.weights) for text in sets or []]


@app.command("open")
def open_tui(
    file: Annotated[Optional[Path], typer.Argument(help="Scenario YAML file (default: the bundled X01).")] = None,
    backend: BackendOption = "numpy",
    dtype: DtypeOption = "float64",
    lang: Annotated[Optional[str], typer.Option("--lang", help="Explanations in en or zh.")] = None,
    breakpoints: Annotated[
        Optional[list[str]], typer.Option("--break", help="Breakpoint: operator glob, kind, or condition.")
    ] = None,
    inject: InjectOption = None,
    sets: SetOption = None,
    max_memory: MaxMemoryOption = None,
    prompt: PromptOption = None,
    ids: IdsOption = None,
    max_new_tokens: MaxNewTokensOption = None,
    batch: BatchOption = False,
    against: AgainstOption = None,
    tolerance: ToleranceOption = 1e-6,
) -> None:
    """Open the step debugger on a scenario or a checkpoint; with --against, your own activations are
    marked ✓/✗ cell by cell on the first prompt's prefill."""
    if lang not in (None, "en", "zh"):
        raise typer.BadParameter(f"expected en or zh, got {lang!r}", param_hint="--lang")
    for text in breakpoints or []:
        parse_breakpoint(text)  # a bad --break is reported before the screen is taken over
    _check_inject(inject)
    budget = _max_memory(max_memory)
    array_backend = make_backend(backend, dtype)
    dump = None if against is None else (load_dump(against), tolerance)
    path = file or bundled_x01()
    from tinyllm_tui.tui.app import launch  # the UI stack loads only when a TUI is wanted
    from tinyllm_tui.tui.loading_screen import Loading, Opening

    def load() -> Opening:  # in the loading screen's thread: a big scenario takes seconds
        scenario = _load(path, (prompt, ids, max_new_tokens, batch), dtype, max_memory)
        _check_inject_runs(inject, scenario)
        return Opening(scenario, breakpoints=[*scenario.breakpoints, *(breakpoints or [])],
                       edits=_edits(scenario, sets),  # they start as unsaved edits: the TUI can show, undo or save them
                       budget=history_budget(scenario, dtype, budget))

    try:
        launch(Loading(str(path), load), array_backend, lang=lang, inject=inject, against=dump)
    except Cancelled:
        print("tinyllm-tui: loading cancelled", file=sys.stderr)
        raise typer.Exit(EXIT_CANCELLED) from None


RUN_HELP = f"""Print every operator's labelled table in execution order, as it is computed.

A matrix with more than {BIG_ROWS} rows or {BIG_COLS} columns prints as a summary (shape, range, argmax per row; \
for logits and probabilities the last row's top tokens) and its corner cells, unless --full.
"""


@app.command(help=RUN_HELP)
def run(
    file: ScenarioFile,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole trace as one JSON document.")] = False,
    as_jsonl: Annotated[bool, typer.Option(
        "--jsonl", help="Stream one JSON record per operator, then a final {\"requests\": …} record.")] = False,
    full: Annotated[bool, typer.Option(
        "--full", help=f"Print every cell, also of matrices over {BIG_ROWS} rows or {BIG_COLS} columns.")] = False,
    backend: BackendOption = "numpy",
    dtype: DtypeOption = "float64",
    inject: InjectOption = None,
    sets: SetOption = None,
    max_memory: MaxMemoryOption = None,
    prompt: PromptOption = None,
    ids: IdsOption = None,
    max_new_tokens: MaxNewTokensOption = None,
    batch: BatchOption = False,
    save: Annotated[Optional[Path], typer.Option(
        "--save-activations", help="Also write the first request's prefill activations, keyed by hook name, "
        "in TransformerLens's layouts (.safetensors or .npz).", show_default=False)] = None,
) -> None:
    scenario, array_backend = _prepare(file, backend, dtype, inject, sets, max_memory,
                                       (prompt, ids, max_new_tokens, batch))
    if save is not None:
        save_activations(prefill_states(scenario, array_backend), save)
        print(f"wrote the prefill activations to {save}", file=sys.stderr)
    session = Session(scenario, array_backend, inject=inject)
    if as_json:
        _print_json(trace_document(session, session.steps()))
        return
    progress = _Progress()
    if as_jsonl:
        for state in session.steps():
            _print_json(record(state))
            progress.show(f"step {state.step}")
        _print_json(requests_record(session.results))
        return
    vocab, group = scenario.vocab, None
    for state in session.steps():
        if (state.request, state.round) != group:
            group = (state.request, state.round)
            prompt = token_text(vocab, scenario.requests[state.request].tokens)
            print(f"── request {state.request} · {prompt} · {where(state.phase, state.round)} ──")
        print(state_text(state, vocab, full), end="\n\n")
        progress.show(f"step {state.step}")
    progress.done()
    print(request_results(session.results, vocab))


def state_text(state: OpState, vocab, full: bool) -> str:
    """One operator as `run` prints it: plain text, so no line is ever cut to a terminal's width."""
    title = f"[{state.step}] {state.name}" + ("" if state.head is None else f" · head {state.head}")
    rows, cols = state.values.shape
    if state.kind == OpKind.CHOICE:
        token = int(to_host(state.values)[0, 0])
        return f"{title}: chose {token_text(vocab, [token])} (token id {token})"
    if full or (rows <= BIG_ROWS and cols <= BIG_COLS):
        return text_table(state.output, title=title)
    summary = "\n".join([title, *matrix_summary(state.output, state.kind)])
    return text_table(state.output, title=summary, keep=CORNER)


class _Progress:
    """One line on stderr ("step N", "loading …"), rewritten in place, only when stderr is a terminal."""

    def __init__(self):
        self.shown = sys.stderr.isatty()

    def show(self, text: str) -> None:
        if self.shown:
            sys.stderr.write(f"\r\033[K{text}")
            sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")


@app.command()
def diff(
    file: ScenarioFile,
    backend: BackendOption = "numpy",
    dtype: DtypeOption = "float64",
    inject: InjectOption = None,
    sets: SetOption = None,
    max_memory: MaxMemoryOption = None,
    prompt: PromptOption = None,
    ids: IdsOption = None,
    max_new_tokens: MaxNewTokensOption = None,
    batch: BatchOption = False,
) -> None:
    """Compare the KV-cached run with a full recompute of the whole prefix, operator by operator;
    with --batch, the requests run as one batch against each request run alone."""
    scenario, array_backend = _prepare(file, backend, dtype, inject, sets, max_memory,
                                       (prompt, ids, max_new_tokens, batch))
    if inject:
        print(f"injected bug {inject}: {INJECTIONS[inject]}")
    if scenario.cache.quantize is not Quantize.NONE:
        print(f"{scenario.cache.quantize} cache against the exact cache (max |Δ|):")
        for row in against_exact(scenario, array_backend):
            print(f"  {row.describe()}")
    diffs = (diff_batch if batch else diff_scenario)(scenario, array_backend, inject)
    for d in diffs:
        head = "" if d.head is None else f" head {d.head}"
        mark = "✓" if d.agrees else "✗"
        print(f"{mark} request {d.request} {where(d.phase, d.round)}  {d.name}{head}  max|Δ| {diff_cell(d)}")
    print(diff_summary(diffs, inject, batch))
    if first_divergence(diffs) is not None:
        raise typer.Exit(1)


@app.command()
def check(
    file: ScenarioFile,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as one JSON document.")] = False,
    backend: BackendOption = "numpy",
    dtype: DtypeOption = "float64",
    sets: SetOption = None,
    max_memory: MaxMemoryOption = None,
    prompt: PromptOption = None,
    ids: IdsOption = None,
    against: AgainstOption = None,
    tolerance: ToleranceOption = 1e-6,
) -> None:
    """Compare the scenario's expect: tables (numbers as printed) with the computation, cell by cell;
    or, with --against, a dump of activations from your own implementation."""
    scenario, array_backend = _prepare(file, backend, dtype, sets=sets, max_memory=max_memory,
                                       request=(prompt, ids, None))
    if against is not None:
        report = compare_activations(scenario, against, tolerance, array_backend)
        print("\n".join(report.lines()))
        if report.first_divergence is not None:
            raise typer.Exit(1)
        return
    if not scenario.expect:
        raise typer.BadParameter(f"{file} has no expect: section", param_hint="FILE")
    outcomes = check_scenario(scenario, array_backend)
    malformed = next((o for o in outcomes if o.problem), None)
    if malformed is not None:  # a table that names what the run never computes is a bad file, not a disagreement
        raise malformed.error(str(file))
    if as_json:
        _print_json([_outcome_json(o) for o in outcomes])
    else:
        for outcome in outcomes:
            _print_outcome(outcome)
        print(f"summary: {expect_summary(outcomes)}")
        if not all(o.passed for o in outcomes):
            _explain_disagreement(outcomes)
    if not all(o.passed for o in outcomes):
        raise typer.Exit(1)


def _print_json(document) -> None:
    json.dump(document, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


def _print_outcome(outcome: Outcome) -> None:
    e = outcome.expectation
    note = f"  ({e.note})" if e.note else ""
    if outcome.problem:
        print(f"✗ {e.describe()}: {outcome.problem}{note}")
        return
    mark = "✓" if outcome.passed else "✗"
    print(f"{mark} {e.describe()}: {outcome.agreeing}/{len(outcome.cells)} cells agree{note}")
    for cell in outcome.cells:
        if not cell.agrees:
            print(f"    row {cell.row_label}  col {cell.col_label}: printed {cell.printed}, "
                  f"computed {cell.computed:.6f}  (|Δ| {abs(cell.computed - cell.printed):.2g} > {cell.tolerance:.2g})")


def _explain_disagreement(outcomes: list[Outcome]) -> None:
    print("A table that disagrees prints numbers that do not follow from the scenario's inputs and weights "
          "(computed here in float64); a table that agrees does.")
    for outcome in outcomes:
        e = outcome.expectation
        verdict = "follows from the inputs" if outcome.passed else "does not follow from the inputs"
        print(f"  {verdict}: {e.describe()}" + (f"  ({e.note})" if e.note else ""))


def _outcome_json(outcome: Outcome) -> dict:
    e = outcome.expectation
    return {
        "op": e.op, "request": e.request, "round": e.round, "head": e.head, "run": e.run, "note": e.note,
        "agreeing": outcome.agreeing, "cells": len(outcome.cells), "problem": outcome.problem or None,
        "disagreeing": [
            {"row": c.row_label, "col": c.col_label, "printed": json_number(c.printed),
             "computed": json_number(c.computed), "tolerance": c.tolerance}
            for c in outcome.cells if not c.agrees
        ],
    }


@app.command()
def gradcheck(
    file: ScenarioFile,
    request: Annotated[int, typer.Option(help="Request whose prefill supplies Q, K, V.")] = 0,
    layer: Annotated[int, typer.Option(help="Layer of the head.")] = 0,
    head: Annotated[int, typer.Option(help="Head to check.")] = 0,
    prompt: PromptOption = None,
    ids: IdsOption = None,
) -> None:
    """Check one attention head's analytic dL/dQ against central finite differences."""
    scenario = _load(file, (prompt, ids, None))
    try:
        result = check_head(scenario, request=request, layer=layer, head=head)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    error = result.relative_error
    verdict = "agree" if error < GRADCHECK_TOLERANCE else "DISAGREE"
    print(f"request {request} layer {layer} head {head}: dL/dQ {result.analytic.shape[0]}×{result.analytic.shape[1]}, "
          f"relative error {error:.3e} ({verdict}: tolerance {GRADCHECK_TOLERANCE:g}, step 1e-6)")
    if error >= GRADCHECK_TOLERANCE:
        raise typer.Exit(1)


@app.command()
def convert(
    file: ScenarioFile,
    weights: Annotated[Path, typer.Option("--weights", help="Weight file to write: .safetensors or .npz.",
                                          show_default=False)],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="YAML to write (default: the weight "
                                                   "file's name with .yaml).", show_default=False)] = None,
) -> None:
    """Move a scenario's weights into a weight file and write a YAML that names it (comments kept)."""
    target = output or weights.with_suffix(".yaml")
    if target.resolve() == file.resolve():
        raise typer.BadParameter(f"{target} is the scenario itself: name another YAML with -o", param_hint="-o")
    try:
        written = convert_scenario(load_scenario(file), weights, target)
    except OSError as error:
        raise typer.BadParameter(f"cannot write {weights} or {target} ({error.strerror})") from None
    print(f"wrote {weights} and {written}, which names it")


def main() -> None:
    tune_for_tracing()
    app()
