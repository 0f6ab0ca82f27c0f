"""Plain-text summaries that the command line and the TUI both print, so they say the same thing.

Requests are numbered from 0; tokens are shown as text, never as float ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from engine.arrays import to_host
from engine.loading.budget import format_size
from engine.compare.diff import RELATIVE_STEPS, TOLERANCE, OpDiff, first_divergence
from engine.compare.expect import Outcome
from engine.labels import resolve_some
from engine.progress import READING
from engine.spec import Request, Vocab
from engine.trace import Labelled, OpKind, RequestResult
from tinyllm_tui.debugger.frame import VOCAB_KINDS, top_tokens
from tinyllm_tui.debugger.results import DiffLine
from tinyllm_tui.tui.i18n import cause_words, tr

ROWS_SUMMARISED = 4  # argmax lines for the first and last rows of a large matrix


def shape_text(shape: Sequence[int]) -> str:
    """"3×4"."""
    return "×".join(str(n) for n in shape)


def token_text(vocab: Vocab, ids: Iterable[int]) -> str:
    """The tokens' texts, separated by spaces: "我 爱 学习"."""
    return " ".join(vocab.shown(int(t)) for t in ids)


def diff_summary(diffs: Sequence[DiffLine | OpDiff], inject: str | None, batch: bool = False,
                 lang: str = "en") -> str:
    """One line: every operator agrees, or where the cached run first leaves the full recompute
    (with `batch`: where the batch first leaves a request run alone)."""
    injected = tr("diff.injected_mark", lang, name=inject) if inject else ""
    first = first_divergence(diffs)
    if first is None and batch:
        return tr("diff.batch_agrees", lang, tolerance=TOLERANCE, steps=RELATIVE_STEPS) + injected
    if first is None:
        return tr("diff.agrees", lang, tolerance=diffs[0].tolerance if diffs else TOLERANCE) + injected
    return tr("diff.first", lang, where=divergence_place(first, lang)) + injected


def diff_cell(d: DiffLine | OpDiff, lang: str = "en") -> str:
    """The number a diff table shows for one operator, as measured (as the CLI prints it); `shape` where the
    runs' rows or key columns do not meet (OpDiff.mismatch says how)."""
    return f"{d.max_abs:.3e}" if d.mismatch is None else tr("diff.shape", lang)


def expect_summary(outcomes: list[Outcome], lang: str = "en") -> str:
    """"45/45 tables agree fully; 332/332 printed cells agree", in `lang` (the CLI's: English)."""
    return tr("expect.summary", lang, passed=sum(o.passed for o in outcomes), tables=len(outcomes),
              agreeing=sum(o.agreeing for o in outcomes), cells=sum(len(o.cells) for o in outcomes))


def request_results(results: list[RequestResult], vocab: Vocab) -> str:
    """"request 0 generated 爱 爱 (max_new_tokens); request 1 generated 你 (max_new_tokens)"."""
    return "; ".join(
        f"request {i} generated {token_text(vocab, r.generated) if r.generated else 'nothing'} ({r.stop})"
        for i, r in enumerate(results)
    )


def chat_replies(requests: Sequence[Request], results: list[RequestResult], vocab: Vocab) -> list[str]:
    """"request 0 · assistant: The capital of France is Paris." for each request made from a chat: the reply
    decoded (each token's text, as the TUI shows it), without the end-of-turn token that closed it."""
    lines = []
    for i, (request, result) in enumerate(zip(requests, results)):
        if request.chat is not None:
            reply = result.generated
            if reply and reply[-1] == request.chat.end_of_turn:
                reply = reply[:-1]
            lines.append(f"request {i} · assistant: {''.join(vocab.tokens[t] for t in reply)}")
    return lines


def matrix_summary(matrix: Labelled, kind: str) -> list[str]:
    """A large matrix in a few lines: shape and range, each end row's argmax, and for
    logits and probabilities the last row's top tokens with their probabilities."""
    values = to_host(matrix.values)
    flat = values.reshape(-1)
    low, high = flat.min(initial=np.inf), flat.max(initial=-np.inf)  # both finite: every entry is (no mask to make)
    finite = flat
    if not (math.isfinite(low) and math.isfinite(high)):
        finite = values[np.isfinite(values)]
        low, high = finite.min(initial=np.inf), finite.max(initial=-np.inf)
    lines = [f"shape {shape_text(values.shape)} · min {low:.6f} · "
             f"max {high:.6f} · mean {finite.mean() if finite.size else np.nan:.6f}"
             + (f" · {values.size - finite.size} entries not finite" if finite.size < values.size else "")]
    n = values.shape[0]
    rows = sorted({*range(min(ROWS_SUMMARISED, n)), *range(max(n - ROWS_SUMMARISED, 0), n)})
    best = values.take(rows, 0).argmax(1).tolist()
    names = zip(resolve_some(matrix.row_axis, rows), resolve_some(matrix.col_axis, best))
    lines.append("argmax per row: " + ", ".join(f"{row} → {col}" for row, col in names))
    if kind in VOCAB_KINDS:
        lines.append(_top_tokens(matrix, n - 1, values[-1], probabilities=kind == OpKind.PROBS))
    return lines


def _top_tokens(matrix: Labelled, index: int, row: np.ndarray, probabilities: bool) -> str:
    top = top_tokens(row, probabilities)
    names = resolve_some(matrix.col_axis, [t for t, _ in top])
    label = resolve_some(matrix.row_axis, [index])[0]
    return f"top {len(top)} of row {label}: " + ", ".join(f"{n} p={p:.6f}" for n, (_, p) in zip(names, top))


def divergence_place(d: DiffLine | OpDiff, lang: str = "en") -> str:
    """`request 0 prefill round 0 blocks.0.attn.hook_attn_scores head 0 (max |Δ| = 1.250e-01)`, or how the
    shapes differ, in `lang` (the CLI's: English)."""
    head = "" if d.head is None else tr("diff.head", lang, head=d.head)
    return tr("diff.at", lang, request=d.request, phase=tr(f"phase.{d.phase}", lang), round=d.round, name=d.name,
              head=head, measured=diff_measured(d, lang))


def diff_measured(d: DiffLine | OpDiff, lang: str = "en") -> str:
    """`max |Δ| = 2.220e-16`, or how the runs' rows or key columns do not meet (OpDiff.mismatch), in `lang`."""
    return f"max |Δ| = {d.max_abs:.3e}" if d.mismatch is None else cause_words(d.mismatch, lang)


def size_text(nbytes: int) -> str:
    """A number of bytes as the views show it (1.5 GiB)."""
    return format_size(nbytes)


def loading_progress(stage: str, done: int, total: int) -> str:
    """An engine.progress report in words."""
    if stage == READING:
        return f"reading the YAML: {format_size(done)} of {format_size(total)}"
    return f"converting the weights: tensor {done} of {total}"
