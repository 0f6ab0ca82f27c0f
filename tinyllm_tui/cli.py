"""The `tinyllm-tui` command line: open (the TUI), run, diff, check, gradcheck, convert, serve.

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
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Optional, get_type_hints

import typer
from typer._click.exceptions import ClickException, UsageError  # Typer >= 0.26 bundles its own Click
from typer.core import TyperGroup

from tinyllm_tui.debugger import Debugger
from tinyllm_tui.debugger.errors import OptionError, bad_input, cancelled, warning_words
from tinyllm_tui.debugger.opening import (ModelOptions, Opening, check_options, fault_names, load,
                                          opening, prepare_process)
from tinyllm_tui.debugger.standalone import convert as convert_weights
from tinyllm_tui.debugger.standalone import gradcheck as check_gradient
from tinyllm_tui.debugger.standalone import read_dump
from tinyllm_tui.presentation.against_words import flip_document, flip_words, report_document, report_lines
from tinyllm_tui.presentation.lens import attribution_lines, lens_json, lens_lines
from tinyllm_tui.presentation.printed import (BIG_COLS, BIG_ROWS, chat_replies, diff_json, diff_line,
                                              disagreement_lines, exact_json, exact_line, json_line, outcome_json,
                                              outcome_lines, request_results, state_text, state_without_text,
                                              without_text)
from tinyllm_tui.presentation.summaries import diff_summary, expect_summary, loading_progress, token_text
from tinyllm_tui.tui.result_words import misnamed_words
from tinyllm_tui.tui.i18n import cause_words, tr, where  # the catalogue's English: the faults' descriptions, the causes

DEFAULT_COMMAND = "open"
EXIT_BAD_INPUT = 2
EXIT_CANCELLED = 130  # as a shell reports a command stopped by ctrl+c: not a bad file (2), not a failure (1)
GRADCHECK_TOLERANCE = 1e-6  # central differences with step 1e-6 agree to ~1e-9 in float64


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
        except Exception as error:
            _refuse(error, "en")
        finally:
            warnings.showwarning = showwarning
            for line in _DEFERRED:
                print(line, file=sys.stderr)
        sys.exit(code or 0)


_DEFERRED: list[str] = []  # warnings raised while the TUI held the terminal, said when it has let it go


def _warning_line(message, category, *where, lang: str = "en", **_) -> None:
    """A warning (a loader's, or NumPy's on a checkpoint's NaN weights) as one line, without the source line, its
    cause in `lang`'s words."""
    line = f"tinyllm-tui: warning: {' '.join(warning_words(message, lambda cause: cause_words(cause, lang)).split())}"
    if getattr(sys.stderr, "__module__", "").startswith("textual"):  # the app's capture of stderr, shown nowhere
        _DEFERRED.append(line)
    else:
        print(line, file=sys.stderr)


def _refuse(error: BaseException, lang: str) -> None:
    """A bad option or input said in one line, its causes in `lang`, exit 2; any other error goes on up."""
    if isinstance(error, OptionError):  # as Click says a bad value, in `lang`
        why = cause_words(error.cause, lang)
        _fail(tr("cli.invalid", lang, option=error.option, why=why) if error.option else
              tr("cli.invalid_value", lang, why=why), EXIT_BAD_INPUT)
    message = bad_input(error, lambda cause: cause_words(cause, lang))
    if message is None:
        raise error
    _fail(message, EXIT_BAD_INPUT)


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
        "--inject", help=f"Switch on one deliberate cache bug: {', '.join(fault_names())}.", show_default=False)] = None
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
    chat: Annotated[Optional[list[str]], typer.Option(
        "--chat", help="Checkpoints: a user message, rendered by the model's own chat template and tokenized; "
        "generation stops at the template's end of turn (repeatable: one conversation each).",
        show_default=False)] = None
    system: Annotated[Optional[str], typer.Option(
        "--system", help="With --chat: the system message that starts each conversation.", show_default=False)] = None
    mla: Annotated[Optional[str], typer.Option(
        "--mla", help="Latent attention (DeepSeek's MLA): 'naive' (expand the latent per head, as transformers; the "
        "default) or 'absorbed' (W_UK folded into the query, W_UV after the mix, as serving engines).",
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


MODEL_OPTIONS = ("backend", "dtype", "inject", "sets", "max_memory", "prompt", "ids", "chat", "system",
                 "max_new_tokens", "batch", "patches", "ablations", "mla")


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


def bundled_x01() -> Path:
    return Path(str(files("tinyllm_tui.scenarios") / "x01.yaml"))


def _model(options: Options) -> ModelOptions:
    """The options about the model and its run, as the debugger's opening takes them."""
    return ModelOptions(**{f.name: getattr(options, f.name) for f in dataclasses.fields(ModelOptions)})


def _loaded(file: Path, options: Options):
    """The scenario (or checkpoint) `file` with these options, saying on a terminal's stderr how far it has got."""
    progress = _Progress()
    scenario = load(file, _model(options),
                    lambda stage, done, total: progress.show(f"loading {file}: {loading_progress(stage, done, total)}"))
    progress.done()
    return scenario


def _debugger(file: Path, options: Options, against: tuple | None = None) -> Debugger:
    """The Debugger `run`, `diff` and `check` drive: what the TUI would open on `file` with these options."""
    backend = check_options(_model(options))
    found = opening(_loaded(file, options), _model(options))
    return Debugger(found.scenario, backend, inject=options.inject, breakpoints=found.breakpoints, edits=found.edits,
                    budget=found.budget, against=against)


def _dump(options: Options) -> tuple[tuple | None, Options]:
    """The --against dump with its tolerances, and the options with a checkpoint's --max-new-tokens defaulting to
    as many decode rounds as the dump holds."""
    if options.against is None:
        return None, options
    dump, new_tokens = read_dump(options.against)
    requests = (options.prompt, options.ids, options.chat)  # a checkpoint's, whose length the dump then sets
    if options.max_new_tokens is None and any(given is not None for given in requests):
        options = dataclasses.replace(options, max_new_tokens=new_tokens)
    return (dump, options.tolerance, options.rtol), options


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
    from tinyllm_tui.tui.app import launch  # the UI stack loads only when a TUI is wanted
    from tinyllm_tui.tui.explanations import default_language
    from tinyllm_tui.tui.loading_screen import Loading

    def opened() -> Opening:  # in the loading screen's thread: a big scenario takes seconds
        return opening(load(path, _model(options)), _model(options))  # --set edits start unsaved: shown, undoable

    path = file or bundled_x01()
    warnings.showwarning = functools.partial(_warning_line, lang=lang or default_language())  # main() puts it back
    try:
        array_backend = check_options(_model(options))
        dump, options = _dump(options)
        ready = None if _on_a_terminal() else opened()  # output redirected: a bad file's error line comes alone,
        # before any escape code of the app
        status = launch(Loading(str(path), opened if ready is None else lambda: ready), array_backend, lang=lang,
                        inject=options.inject, against=dump)
    except BaseException as error:  # a cancel (LoadCancelled) is no Exception
        if not cancelled(error):
            _refuse(error, lang or default_language())  # in the language the debugger was to speak
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
    _warn_misnamed(debugger.misnamed_breakpoints())  # from the model's hook registry: nothing computed
    trace = debugger.trace(save)
    if lens:
        _print_lens(debugger.scenario, trace, as_json, top_k)
        return
    try:
        _print_run(debugger, trace, _printed(trace, bool(options.breakpoints)), as_json, as_jsonl, full, options)
    finally:
        if save is not None:
            print(f"wrote the activations of every pass to {save}", file=sys.stderr)


def _print_run(debugger: Debugger, trace, printed, as_json: bool, as_jsonl: bool, full: bool,
               options: Options) -> None:
    scenario = debugger.scenario
    if as_json:
        _print_json(trace.document(state for state, _ in printed))
        return
    if as_jsonl:
        for state, _ in printed:
            _print_json(trace.record(state))
        _print_json(trace.requests_record())
        return
    vocab, group, clean = scenario.vocab, None, trace.clean_decisions()
    for state, hits in printed:
        if (state.request, state.round) != group:
            group = (state.request, state.round)
            prompt = token_text(vocab, scenario.requests[state.request].tokens)
            print(f"── request {state.request} · {prompt} · {where(state.phase, state.round, 'en')} ──")
        if hits:
            print(f"⚑ breakpoint: {', '.join(hits)}")
        print(state_text(state, vocab, full) + state_without_text(clean, state, vocab, trace.route_without(state)),
              end="\n\n")
    if options.breakpoints and group is None:
        print(f"no operator hits a breakpoint ({', '.join(b.text for b in debugger.breakpoints)})")
    print(request_results(trace.results, vocab))
    for line in chat_replies(scenario.requests, trace.results, vocab):
        print(line)
    _warn_unused(trace)


def _print_lens(scenario, trace, as_json: bool, top_k: int) -> None:
    """Each pass's logit lens and the chosen token's direct logit attribution, as text or one JSON document."""
    documents, clean = [], trace.clean_decisions()
    for run, rows, dla in trace.lenses(top_k):
        if as_json:
            documents.append(lens_json(rows, dla, run, scenario.vocab))
            continue
        token = run.choice
        print(f"── request {run.request} · {where('prefill' if run.round == 0 else 'decode', run.round, 'en')} · logit lens ──")
        print(f"chose {token_text(scenario.vocab, [token])} (token id {token}, "
              f"p {run.probability(token):.6f})"
              + without_text(clean, run.request, run.round, scenario.vocab))
        print("\n".join(lens_lines(rows, run, run.context, scenario.vocab)))
        if dla is not None:
            print("\n".join(attribution_lines(dla, scenario.vocab)))
        print()
    if as_json:
        _print_json({"passes": documents, "interventions": [i.text for i in scenario.interventions]})
    else:
        print(request_results(trace.results, scenario.vocab))
    _warn_unused(trace)


def _warn_misnamed(misnamed) -> None:
    """Each breakpoint's operator name that no operator has."""
    for name in misnamed:
        print(f"tinyllm-tui: warning: {misnamed_words(name, 'en')}", file=sys.stderr)


def _warn_unused(trace) -> None:
    for text, expert in trace.unused_interventions():
        why = ("no operator of that name, head, rows and pass ran" if expert is None else
               f"no token at those positions and passes was routed to expert {expert[1]} of layer {expert[0]}")
        print(f"tinyllm-tui: warning: {text!r} changed nothing: {why}", file=sys.stderr)


def _printed(trace, only_hits: bool) -> Iterator[tuple]:
    """The operators `run` prints, with the breakpoints that hit each: every one, or with --break only
    those where a breakpoint hits (where the TUI's continue stops). Says `step N` on a terminal's stderr."""
    progress = _Progress()
    for state, hits in trace:
        progress.show(f"step {state.step}")
        if hits or not only_hits:
            yield state, hits
    progress.done()


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
    lossy = debugger.exact_cache_error()
    report = debugger.compare(alone=options.batch)
    diffs, requests = list(report.diffs), report.requests
    if as_json:
        flip = {} if report.flip is None else {"first_route_flip": flip_document(report.flip, requests)}
        _print_json({**diff_json(diffs, options.inject), **exact_json(lossy), **flip})
    else:
        if options.inject:
            print(tr("diff.injected", "en", name=options.inject, description=tr(f"inject.{options.inject}", "en")))
        if lossy:
            print(f"{debugger.scenario.cache.quantize} cache against the exact cache (max |Δ|):")
            for row in lossy:
                print(f"  {exact_line(row)}")
        if report.flip is not None:
            print("first routing flip against the float64 exact-cache run: " + flip_words(report.flip, requests, "en"))
        for d in diffs:
            print(diff_line(d))
        print(diff_summary(diffs, options.inject, options.batch))
    if report.first is not None:
        raise typer.Exit(1)


@app.command()
@shared("backend", "dtype", "sets", "max_memory", "prompt", "ids", "chat", "system", "max_new_tokens", "patches",
        "ablations", "against", "tolerance", "rtol")
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
    debugger = _debugger(file, options, against=dump)
    if dump is not None or against_llama_cpp:
        _check_against(debugger, file, against_llama_cpp, as_json, options)
        return
    outcomes = debugger.checked_tables()
    if as_json:
        _print_json([outcome_json(o) for o in outcomes])
    else:
        for outcome in outcomes:
            print("\n".join(outcome_lines(outcome)))
        print(f"summary: {expect_summary(outcomes)}")
        if not all(o.passed for o in outcomes):
            print("\n".join(disagreement_lines(outcomes)))
    if not all(o.passed for o in outcomes):
        raise typer.Exit(1)


def _check_against(debugger: Debugger, file: Path, llama_cpp: bool, as_json: bool, options: Options) -> None:
    """Your dump (or llama.cpp's own evaluation of a GGUF) against the run, pass by pass; exit 1 on a divergence."""
    if llama_cpp:
        report = debugger.compare_llama_cpp(file, options.tolerance, options.rtol)
    else:
        report = debugger.compare_against()
    if as_json:
        _print_json(report_document(report))
    else:
        print("\n".join(report_lines(report, "en")))
    if report.first_divergence is not None:
        raise typer.Exit(1)


def _print_json(document) -> None:
    sys.stdout.write(json_line(document) + "\n")


@app.command()
@shared("prompt", "ids", "chat", "system")
def gradcheck(
    file: ScenarioFile,
    request: Annotated[int, typer.Option(help="Request whose prefill supplies Q, K, V.")] = 0,
    layer: Annotated[int, typer.Option(help="Layer of the head.")] = 0,
    head: Annotated[int, typer.Option(help="Head to check.")] = 0,
    *, options: Options,
) -> None:
    """Check one attention head's analytic dL/dQ against central finite differences."""
    result = check_gradient(load(file, _model(options)), request, layer, head)
    error = result.relative_error
    verdict = "agree" if error < GRADCHECK_TOLERANCE else "DISAGREE"
    print(f"request {request} layer {layer} head {head}: dL/dQ {result.analytic.shape[0]}×{result.analytic.shape[1]}, "
          f"relative error {error:.3e} ({verdict}: tolerance {GRADCHECK_TOLERANCE:g}, step 1e-6)")
    if error >= GRADCHECK_TOLERANCE:
        raise typer.Exit(1)


@app.command()
def serve(
    files: Annotated[Optional[list[Path]], typer.Argument(
        help="Scenarios or checkpoints to offer (default: the bundled X01); several: a start page lists them.",
        show_default=False)] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (a reverse proxy's upstream).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    max_sessions: Annotated[int, typer.Option("--max-sessions", help="Learners at once; the next one is told "
                                              "the class is full.")] = 30,
    idle_timeout: Annotated[str, typer.Option("--idle-timeout", help="End a session after this long without a key "
                                              "or click, e.g. 15m, 90s.")] = "15m",
    max_memory: Annotated[str, typer.Option("--max-memory", help="Each session's memory budget, e.g. 1G.")] = "1G",
    token: Annotated[Optional[str], typer.Option("--token", help="The token learners' links carry (default: a "
                                                 "random one).", show_default=False)] = None,
    no_token: Annotated[bool, typer.Option("--no-token", help="Let anyone who reaches the address in.")] = False,
    public_url: Annotated[Optional[str], typer.Option("--public-url", help="The address learners use, behind a "
                                                      "reverse proxy, e.g. https://class.example.org.",
                                                      show_default=False)] = None,
) -> None:
    """Serve the debugger to a class of browsers: one confined session per learner (needs
    the serve extra: pip install -e '.\\[serve]'). Prints the link to give the learners."""
    if token is not None and no_token:
        raise typer.BadParameter("give --token or --no-token, not both", param_hint="--no-token")
    try:
        from tinyllm_tui.serve.lessons import limits, new_token
        from tinyllm_tui.serve.server import serve as serve_class
    except ImportError as error:
        raise typer.BadParameter(f"serve needs textual-serve ({error.name} is missing): pip install -e '.[serve]'")
    try:
        chosen = limits(max_sessions, idle_timeout, max_memory)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    if public_url is None and host not in ("127.0.0.1", "localhost", "::1"):
        raise typer.BadParameter(f"{host} is not loopback: give --public-url, the address learners' browsers use "
                                 "(websockets from any other origin are refused)", param_hint="--public-url")
    try:
        serve_class(files or [bundled_x01()], chosen, None if no_token else token or new_token(), host, port,
                    public_url)
    except OSError as error:
        raise typer.BadParameter(f"cannot listen on {host}:{port} ({error.strerror})", param_hint="--port") from None


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
    written = convert_weights(file, weights, target)
    print(f"wrote {weights} and {written}, which names it")


def main() -> None:
    prepare_process()
    app()
