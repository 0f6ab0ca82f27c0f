"""The `tinyllm-tui` command line: open (the TUI), run, diff, check, gradcheck, convert.

`tinyllm-tui FILE` opens the TUI: a first argument that is not a sub-command is
routed to `open`. `open`, `run`, `diff` and `check` drive the same `Debugger`, so
`--set`, `--break` and `--inject` mean the same in each; the options they share are
declared once, in `Options`. Every bad input ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib.resources import files
from itertools import takewhile
from pathlib import Path
from typing import Annotated, Any, Optional, get_type_hints

import typer
from typer._click.exceptions import ClickException, UsageError  # Typer >= 0.26 bundles its own Click
from typer.core import TyperGroup

from engine import Backend, BackendError, Scenario, ScenarioError, Session, load_scenario, make_backend, to_host
from engine.breakpoints import BreakpointError, misnamed, parse_breakpoint
from engine.compare.against import compare_generation
from engine.compare.dump import Dump, load_dump, save_dump
from engine.compare.layout import Passes
from engine.caches import Quantize
from engine.compare.exact import against_exact
from engine.compare.diff import OpDiff, first_divergence
from engine.compare.expect import Outcome
from engine.compare.gradcheck import check_head
from engine.export import ActivationDump, json_number, json_text, record, requests_record, trace_document
from engine.faults import FAULTS
from engine.gctuning import tune_for_tracing
from engine.analysis import AnalysisError, attribution, decisions, logit_lens, passes
from engine.interventions import (InterventionError, check_intervention, check_operator, parse_ablation,
                                  parse_intervention)
from engine.loading import open_model
from engine.loading.budget import DEFAULT_BUDGET, parse_size, weight_bytes
from engine.loading.edits import CellEdit, EditError, convert_scenario, parse_set
from engine.progress import Cancelled, listening
from engine.session import INJECTIONS
from engine.trace import OpKind, OpState
from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.presentation.lens import attribution_lines, lens_json, lens_lines
from tinyllm_tui.presentation.numbers import text_table
from tinyllm_tui.presentation.summaries import (diff_summary, expect_summary, loading_progress, matrix_summary,
                                                request_results, token_text, where)

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
            if args and not Path(args[0]).exists():
                guess = difflib.get_close_matches(args[0], list(self.commands), n=1)
                if guess:  # `tinyllm-tui rnu x.yaml`: a typo of a command, not a file to open
                    raise UsageError(f"no command {args[0]!r} (did you mean {guess[0]!r}?)")
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `tinyllm-tui run FILE | head`: the reader has what it wanted; stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the unwritten rest goes nowhere
            return 0

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:
        extra["standalone_mode"] = False
        showwarning, warnings.showwarning = warnings.showwarning, _warning_line
        _DEFERRED.clear()
        try:
            code = super().main(args=args, prog_name=prog_name or "tinyllm-tui", **extra)
        except ClickException as error:
            _fail(error.format_message(), error.exit_code)
        except typer.Abort:
            _fail("aborted", 1)
        except (ScenarioError, BackendError, BreakpointError, EditError, InterventionError, AnalysisError) as error:
            _fail(str(error), EXIT_BAD_INPUT)
        finally:
            warnings.showwarning = showwarning
            for line in _DEFERRED:
                print(line, file=sys.stderr)
        sys.exit(code or 0)


_DEFERRED: list[str] = []  # warnings raised while the TUI held the terminal, said when it has let it go


def _warning_line(message, category, *where, **_) -> None:
    """A warning (a loader's, or NumPy's on a checkpoint's NaN weights) as one line, without the source line."""
    line = f"tinyllm-tui: warning: {' '.join(str(message).split())}"
    if getattr(sys.stderr, "__module__", "").startswith("textual"):  # the app's capture of stderr, shown nowhere
        _DEFERRED.append(line)
    else:
        print(line, file=sys.stderr)


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
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the result as one JSON document.")]


@dataclasses.dataclass(frozen=True)
class Options:
    """The options several commands take, each declared once here; `@shared(...)` names which a command takes."""

    backend: Annotated[str, typer.Option("--backend", help="Array library: numpy, cupy or array_api_strict.")] = "numpy"
    dtype: Annotated[str, typer.Option("--dtype", help="float64 (default) or float32.")] = "float64"
    inject: Annotated[Optional[str], typer.Option(
        "--inject", help=f"Switch on one deliberate cache bug: {', '.join(INJECTIONS)}.", show_default=False)] = None
    sets: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Edit one weight, e.g. 'blocks.0.attn.wk[0,1]=0.5' (repeatable); an unsaved edit in the TUI.",
        show_default=False)] = None
    max_memory: Annotated[Optional[str], typer.Option(
        "--max-memory", help="Memory budget, e.g. 8G (default: half the RAM); bigger models are refused.",
        show_default=False)] = None
    prompt: Annotated[Optional[list[str]], typer.Option(
        "--prompt", help="Checkpoints: the text to feed, tokenized by the model's own tokenizer (repeatable: one "
        "request each).", show_default=False)] = None
    ids: Annotated[Optional[list[str]], typer.Option(
        "--ids", help="Checkpoints: token ids to feed instead of a prompt, e.g. 1,2,3 (repeatable: one request each).",
        show_default=False)] = None
    batch: Annotated[bool, typer.Option(
        "--batch", help="Run the requests as one left-padded batch; diff: the batch against each request alone.")] = False
    max_new_tokens: Annotated[Optional[int], typer.Option(
        "--max-new-tokens", min=1, help="Checkpoints: how many tokens to generate (default 1).",
        show_default=False)] = None
    patches: Annotated[Optional[list[str]], typer.Option(
        "--patch", help="Change an activation as it is produced: 'HOOK[row,col]=VALUE', 'HOOK[row,:]=[v, …]', "
        "'HOOK[row,:]*=FACTOR', 'HOOK[row,:]=from:REQUEST' (its value in that request); rows are token positions; "
        "' head H' after a per-head hook; ' @prefill', ' @decode.N', ' @request.N' limit it (repeatable).",
        show_default=False)] = None
    ablations: Annotated[Optional[list[str]], typer.Option(
        "--ablate", help="Zero one head's output before the output projection: 'blocks.L.attn head H' (repeatable).",
        show_default=False)] = None
    breakpoints: Annotated[Optional[list[str]], typer.Option(
        "--break", help="Breakpoint (repeatable): operator glob, kind, or condition; where the TUI's continue stops "
        "and the only operators `run` prints.", show_default=False)] = None
    against: Annotated[Optional[Path], typer.Option(
        "--against", help="Activations of your own implementation (.safetensors/.npz keyed by pass and hook name, "
        "see the README) to compare with this reference over the whole generation.", show_default=False)] = None
    tolerance: Annotated[Optional[float], typer.Option(
        "--tolerance", help="With --against: largest |Δ| that agrees (default per dtype: float64 1e-9, float32 1e-5, "
        "float16 1e-3, bfloat16 1e-2, each plus the same relative part).", show_default=False)] = None
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", help="With --against: relative part of the tolerance, |Δ| ≤ tolerance + rtol·|reference|.",
        show_default=False)] = None


MODEL_OPTIONS = ("backend", "dtype", "inject", "sets", "max_memory", "prompt", "ids", "max_new_tokens", "batch",
                 "patches", "ablations")


def shared(*names: str) -> Callable[[Callable], Callable]:
    """Give a command the shared `Options` fields `names` as its own options; it receives them as `options`."""
    hints = get_type_hints(Options, include_extras=True)
    defaults = {field.name: field.default for field in dataclasses.fields(Options)}
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[name], default=defaults[name])
             for name in names]

    def add(command: Callable) -> Callable:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "options"]

        @functools.wraps(command)
        def with_options(**values: Any) -> Any:
            return command(options=Options(**{name: values.pop(name) for name in names}), **values)

        with_options.__signature__ = inspect.Signature([*own, *added])  # what Typer reads
        return with_options

    return add


def history_budget(scenario: Scenario, dtype: str, max_memory: int | None) -> int:
    """What the history may keep: the memory budget less the weights (at least HISTORY_FLOOR)."""
    total = DEFAULT_BUDGET if max_memory is None else max_memory
    return max(total - weight_bytes(scenario.model, len(scenario.vocab), dtype), HISTORY_FLOOR)


def bundled_x01() -> Path:
    return Path(str(files("tinyllm_tui.scenarios") / "x01.yaml"))


def _load(file: Path, options: Options) -> Scenario:
    """A scenario file or a checkpoint (with --prompt/--ids/--max-new-tokens), with --patch and --ablate
    after the scenario's own interventions, as one batch with --batch."""
    ids = None if options.ids is None else [_ids(text) for text in options.ids]
    scenario = open_model(file, prompt=options.prompt, ids=ids, max_new_tokens=options.max_new_tokens,
                          dtype=options.dtype, max_memory=_max_memory(options.max_memory))
    scenario = dataclasses.replace(scenario, batch=True) if options.batch else scenario
    return with_interventions(scenario, options.patches, options.ablations)


def with_interventions(scenario: Scenario, patches: list[str] | None, ablations: list[str] | None) -> Scenario:
    """The scenario with the --patch and --ablate interventions after its own; a bad one raises InterventionError."""
    added = [*(parse_intervention(text) for text in patches or []), *(parse_ablation(text) for text in ablations or [])]
    for intervention in added:
        check_intervention(intervention, scenario.model, len(scenario.requests), len(scenario.vocab))
    return dataclasses.replace(scenario, interventions=(*scenario.interventions, *added)) if added else scenario


def _loaded(file: Path, options: Options) -> Scenario:
    """`_load`, saying on a terminal's stderr how far it has got."""
    progress = _Progress()
    with listening(lambda stage, done, total: progress.show(f"loading {file}: {loading_progress(stage, done, total)}")):
        scenario = _load(file, options)
    progress.done()
    return scenario


def _debugger_args(scenario: Scenario, options: Options) -> dict[str, Any]:
    """What a Debugger on `scenario` opens with, the same for the TUI and the CLI: the scenario's breakpoints then
    every --break, every --set as an unsaved edit, and the history's budget. A bug that cannot run is refused."""
    _check_inject_runs(options.inject, scenario)
    return {"breakpoints": [*scenario.breakpoints, *(options.breakpoints or [])],
            "edits": _edits(scenario, options.sets),
            "budget": history_budget(scenario, options.dtype, _max_memory(options.max_memory))}


def _check_flags(options: Options) -> Backend:
    """The flags that need no file, checked before any loading; returns the backend."""
    _check_inject(options.inject)
    for text in options.breakpoints or []:
        parse_breakpoint(text)  # a bad --break is reported before anything loads
    _max_memory(options.max_memory)
    return make_backend(options.backend, options.dtype)


def _debugger(file: Path, options: Options) -> Debugger:
    """The Debugger `run`, `diff` and `check` drive: what the TUI would open on `file` with these options."""
    backend = _check_flags(options)
    scenario = _loaded(file, options)
    debugger = Debugger(scenario, backend, inject=options.inject, **_debugger_args(scenario, options))
    _refuse_unknown_operators(scenario, debugger.history.round_states)
    return debugger


def _refuse_unknown_operators(scenario: Scenario, first_round: Callable[[], Iterable[OpState]]) -> None:
    """A misspelt hook in an intervention is refused before anything shows: every hook runs in the first round,
    which is computed for this only when the scenario has interventions."""
    if scenario.interventions:
        operators = {(s.name, s.head) for s in first_round()}
        for intervention in scenario.interventions:
            check_operator(intervention, operators)


def _dump(options: Options) -> tuple[Dump | None, Options]:
    """The --against dump, and the options with a checkpoint's --max-new-tokens defaulting to as many
    decode rounds as the dump holds."""
    if options.against is None:
        return None, options
    dump = load_dump(options.against)
    if options.max_new_tokens is None and (options.prompt is not None or options.ids is not None):
        options = dataclasses.replace(options, max_new_tokens=dump.new_tokens())
    return dump, options


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


def _on_a_terminal() -> bool:
    return sys.stdout.isatty() and sys.stderr.isatty()


@app.command("open")
@shared(*MODEL_OPTIONS, "breakpoints", "against", "tolerance", "rtol")
def open_tui(
    file: Annotated[Optional[Path], typer.Argument(help="Scenario YAML file (default: the bundled X01).")] = None,
    lang: Annotated[Optional[str], typer.Option("--lang", help="Explanations in en or zh.")] = None,
    *, options: Options,
) -> None:
    """Open the step debugger on a scenario or a checkpoint; with --against, your own activations are
    marked ✓/✗ cell by cell in every pass the dump holds, and `g diverged` goes to the first divergence."""
    if lang not in (None, "en", "zh"):
        raise typer.BadParameter(f"expected en or zh, got {lang!r}", param_hint="--lang")
    array_backend = _check_flags(options)
    dump, options = _dump(options)
    dump = None if dump is None else (dump, options.tolerance, options.rtol)
    path = file or bundled_x01()
    from tinyllm_tui.tui.app import launch  # the UI stack loads only when a TUI is wanted
    from tinyllm_tui.tui.loading_screen import Loading, Opening

    def load() -> Opening:  # in the loading screen's thread: a big scenario takes seconds
        scenario = _load(path, options)
        _refuse_unknown_operators(scenario, lambda: takewhile(lambda state: state.round == 0,
                                                              Session(scenario, array_backend).steps()))
        return Opening(scenario, **_debugger_args(scenario, options))  # --set edits start unsaved: shown, undoable

    # output redirected: load first, so that a bad file's error line comes alone, before any escape code of the app
    opening = None if _on_a_terminal() else load()
    try:
        status = launch(Loading(str(path), load if opening is None else lambda: opening), array_backend, lang=lang,
                        inject=options.inject, against=dump)
    except Cancelled:
        print("tinyllm-tui: loading cancelled", file=sys.stderr)
        raise typer.Exit(EXIT_CANCELLED) from None
    if status:  # the app crashed: its traceback is on the terminal, and a script must see the failure
        raise typer.Exit(status)


RUN_HELP = f"""Print every operator's labelled table in execution order, as it is computed.

A matrix with more than {BIG_ROWS} rows or {BIG_COLS} columns prints as a summary (shape, range, argmax per row; \
for logits and probabilities the last row's top tokens) and its corner cells, unless --full.
"""


@app.command(help=RUN_HELP)
@shared(*MODEL_OPTIONS, "breakpoints")
def run(
    file: ScenarioFile,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole trace as one JSON document.")] = False,
    as_jsonl: Annotated[bool, typer.Option(
        "--jsonl", help="Stream one JSON record per operator, then a final {\"requests\": …} record.")] = False,
    full: Annotated[bool, typer.Option(
        "--full", help=f"Print every cell, also of matrices over {BIG_ROWS} rows or {BIG_COLS} columns.")] = False,
    save: Annotated[Optional[Path], typer.Option(
        "--save-activations", help="Also write every pass's activations and KV caches, keyed by pass and hook "
        "name in TransformerLens's layouts (.safetensors or .npz; see the README).", show_default=False)] = None,
    lens: Annotated[bool, typer.Option(
        "--lens", help="Instead of every operator, print each pass's logit lens (every residual stream through the "
        "final norm and unembedding) and the chosen token's direct logit attribution.")] = False,
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="With --lens: tokens per position.")] = 5,
    *, options: Options,
) -> None:
    debugger = _debugger(file, options)
    _warn_misnamed(debugger)
    if lens:
        _print_lens(debugger, as_json, top_k)
        return
    dump = None if save is None else ActivationDump(Passes(debugger.scenario))
    try:
        _print_run(debugger, _printed(debugger, bool(options.breakpoints), dump), as_json, as_jsonl, full, options)
    finally:
        if dump is not None:
            save_dump(dump.arrays(), save)
            print(f"wrote the activations of every pass to {save}", file=sys.stderr)


def _print_run(debugger: Debugger, printed, as_json: bool, as_jsonl: bool, full: bool, options: Options) -> None:
    scenario = debugger.scenario
    if as_json:
        _print_json(trace_document(debugger.session, (state for state, _ in printed)))
        return
    if as_jsonl:
        for state, _ in printed:
            _print_json(record(state))
        _print_json(requests_record(debugger.session.results))
        return
    vocab, group, clean = scenario.vocab, None, _clean_decisions(debugger)
    for state, hits in printed:
        if (state.request, state.round) != group:
            group = (state.request, state.round)
            prompt = token_text(vocab, scenario.requests[state.request].tokens)
            print(f"── request {state.request} · {prompt} · {where(state.phase, state.round)} ──")
        if hits:
            print(f"⚑ breakpoint: {', '.join(hits)}")
        print(state_text(state, vocab, full) + _without(clean, state.request, state.round, state.kind, vocab),
              end="\n\n")
    if options.breakpoints and group is None:
        print(f"no operator hits a breakpoint ({', '.join(b.text for b in debugger.breakpoints)})")
    print(request_results(debugger.session.results, vocab))
    _warn_unused(debugger.session)


def _clean_decisions(debugger: Debugger) -> dict | None:
    """What each pass chose without the scenario's interventions (None when it has none)."""
    if not debugger.scenario.interventions:
        return None
    clean = dataclasses.replace(debugger.scenario, interventions=())
    return decisions(Session(clean, debugger.backend, inject=debugger.inject).steps())


def _without(clean: dict | None, request: int, round_: int, kind: OpKind, vocab) -> str:
    """For a choice under interventions: what the same pass chose without them."""
    if clean is None or kind != OpKind.CHOICE or (request, round_) not in clean:
        return ""
    token, probability = clean[(request, round_)]
    return f" · without the interventions: {token_text(vocab, [token])} (token id {token}, p {probability:.6f})"


def _print_lens(debugger: Debugger, as_json: bool, top_k: int) -> None:
    """Each pass's logit lens and the chosen token's direct logit attribution, as text or one JSON document."""
    scenario, model, documents, clean = debugger.scenario, debugger.session.model, [], _clean_decisions(debugger)
    for run in passes(state for state, _ in debugger.trace()):
        rows = logit_lens(model, run, top_k)
        dla = None if model.spec.post_norms else attribution(model, run)
        if as_json:
            documents.append(lens_json(rows, dla, run, scenario.vocab))
            continue
        token = int(run.get("sample.hook_choice")[0, 0])
        print(f"── request {run.request} · {where('prefill' if run.round == 0 else 'decode', run.round)} · logit lens ──")
        print(f"chose {token_text(scenario.vocab, [token])} (token id {token}, "
              f"p {float(run.get('sample.hook_probs')[0, token]):.6f})"
              + _without(clean, run.request, run.round, OpKind.CHOICE, scenario.vocab))
        print("\n".join(lens_lines(rows, run, run.context, scenario.vocab)))
        if dla is not None:
            print("\n".join(attribution_lines(dla, scenario.vocab)))
        print()
    if as_json:
        _print_json({"passes": documents, "interventions": [i.text for i in scenario.interventions]})
    else:
        print(request_results(debugger.session.results, scenario.vocab))
    _warn_unused(debugger.session)


def _warn_misnamed(debugger: Debugger) -> None:
    """A breakpoint's operator name that no operator has (every round runs the first round's operators)."""
    for breakpoint in debugger.breakpoints:
        for name, near in misnamed(breakpoint, debugger.history.round_states()):
            hint = f" (did you mean {near!r}?)" if near else ""
            print(f"tinyllm-tui: warning: breakpoint {breakpoint.text!r}: no operator is named {name!r}{hint}",
                  file=sys.stderr)


def _warn_unused(session: Session) -> None:
    for intervention in session.patcher.unused() if session.patcher else ():
        print(f"tinyllm-tui: warning: {intervention.text!r} changed nothing: no operator of that name, head, "
              "rows and pass ran", file=sys.stderr)


def _printed(debugger: Debugger, only_hits: bool, dump: ActivationDump | None = None
             ) -> Iterator[tuple[OpState, tuple[str, ...]]]:
    """The operators `run` prints, with the breakpoints that hit each: every one, or with --break only
    those where a breakpoint hits (where the TUI's continue stops). Says `step N` on a terminal's stderr;
    `dump` sees every operator (--save-activations)."""
    progress = _Progress()
    for state, hits in debugger.trace():
        progress.show(f"step {state.step}")
        if dump is not None:
            dump.see(state)
        if hits or not only_hits:
            yield state, hits
    progress.done()


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
@shared(*MODEL_OPTIONS)
def diff(file: ScenarioFile, as_json: JsonFlag = False, *, options: Options) -> None:
    """Compare the KV-cached run with a full recompute of the whole prefix, operator by operator:
    the largest |cached − full| of each (0 when they agree exactly); exit 1 past the tolerance.
    With --batch: the requests as one batch against each request run alone. A quantized cache's
    error against the exact cache is printed first, round by round."""
    debugger = _debugger(file, options)
    lossy = against_exact(debugger.scenario, debugger.backend) if debugger.scenario.cache.quantize is not Quantize.NONE else []
    diffs = debugger.diff(alone=options.batch)
    if as_json:
        _print_json({**_diff_json(diffs, options.inject), **_exact_json(lossy)})
    else:
        if options.inject:
            print(f"injected bug {options.inject}: {INJECTIONS[options.inject]}")
        if lossy:
            print(f"{debugger.scenario.cache.quantize} cache against the exact cache (max |Δ|):")
            for row in lossy:
                print(f"  {row.describe()}")
        for d in diffs:
            print(_diff_line(d))
        print(diff_summary(diffs, options.inject, options.batch))
    if first_divergence(diffs) is not None:
        raise typer.Exit(1)


def _diff_line(d: OpDiff) -> str:
    """`✓ request 0 decode 1  blocks.0.hook_resid_post  max|Δ| 2.220e-16 (≤ 1e-12)`: the number as measured."""
    head = "" if d.head is None else f" head {d.head}"
    mark, compared = ("✓", "≤") if d.agrees else ("✗", ">")
    measured = d.mismatch or f"max|Δ| {d.max_abs:.3e} ({compared} {d.tolerance:.2g})"
    return f"{mark} request {d.request} {where(d.phase, d.round)}  {d.name}{head}  {measured}"


def _exact_json(rows: list) -> dict:
    """A quantized cache's error against the exact cache, per round (nothing for an exact cache)."""
    if not rows:
        return {}
    return {"against_exact_cache": [{"request": r.request, "round": r.round, "logits": json_number(r.logits_error),
                                     "pattern": [json_number(e) for e in r.pattern_error],
                                     "kv": [json_number(e) for e in r.kv_error], "same_choice": r.same_choice}
                                    for r in rows]}


def _diff_json(diffs: list[OpDiff], inject: str | None) -> dict:
    first = first_divergence(diffs)
    return {
        "inject": inject,
        "agrees": first is None,
        "first_divergence": None if first is None else first.step,
        "operators": [{"step": d.step, "request": d.request, "phase": d.phase.value, "round": d.round, "name": d.name,
                       "layer": d.layer, "head": d.head, "max_abs": json_number(d.max_abs),
                       "tolerance": d.tolerance, "agrees": d.agrees, "mismatch": d.mismatch or None} for d in diffs],
    }


@app.command()
@shared("backend", "dtype", "sets", "max_memory", "prompt", "ids", "max_new_tokens", "patches", "ablations", "against",
        "tolerance", "rtol")
def check(
    file: ScenarioFile,
    as_json: JsonFlag = False,
    against_llama_cpp: Annotated[bool, typer.Option(
        "--against-llama-cpp", help="A GGUF file: run it through llama.cpp itself (needs llama-cpp-python) and "
        "report how far its quantized kernels drift from this reference, per pass and operator.")] = False,
    *, options: Options,
) -> None:
    """Compare the scenario's expect: tables (numbers as printed) with the computation, cell by cell;
    or, with --against, a dump of activations from your own implementation over the whole generation
    (a checkpoint generates greedily as many tokens as the dump has passes, unless --max-new-tokens)."""
    if against_llama_cpp and file.suffix != ".gguf":
        raise typer.BadParameter(f"{file} is not a .gguf file", param_hint="--against-llama-cpp")
    dump, options = _dump(options)
    debugger = _debugger(file, options)
    if dump is not None or against_llama_cpp:
        _check_against(debugger, file, dump, against_llama_cpp, as_json, options)
        return
    if not debugger.scenario.expect:
        raise ScenarioError(str(file), None, "expect", "no expect: tables to check (check compares a scenario's "
                            "expect: tables; --against DUMP compares your own activations; run prints every operator)")
    outcomes = debugger.check_expectations(debugger.scenario)
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


def _check_against(debugger: Debugger, file: Path, dump: Dump | None, llama_cpp: bool, as_json: bool,
                   options: Options) -> None:
    """Your dump (or llama.cpp's own evaluation of a GGUF) against the run, pass by pass; exit 1 on a divergence."""
    if llama_cpp:
        from engine.compare.llama_cpp import compare_with_llama_cpp  # ctypes and llama.cpp only when asked

        report = compare_with_llama_cpp(debugger.scenario, file, options.tolerance, options.rtol, debugger.backend)
    else:
        report = compare_generation(debugger.scenario, dump, options.tolerance, options.rtol, debugger.backend)
    if as_json:
        _print_json(report.document())
    else:
        print("\n".join(report.lines()))
    if report.first_divergence is not None:
        raise typer.Exit(1)


def _print_json(document) -> None:
    sys.stdout.write(json_text(document) + "\n")


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
@shared("prompt", "ids")
def gradcheck(
    file: ScenarioFile,
    request: Annotated[int, typer.Option(help="Request whose prefill supplies Q, K, V.")] = 0,
    layer: Annotated[int, typer.Option(help="Layer of the head.")] = 0,
    head: Annotated[int, typer.Option(help="Head to check.")] = 0,
    *, options: Options,
) -> None:
    """Check one attention head's analytic dL/dQ against central finite differences."""
    scenario = _load(file, options)
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
