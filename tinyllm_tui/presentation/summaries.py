"""Plain-text summaries that the command line and the TUI both print, so they say the same thing, in the
language asked (the command line's English is printed.py's).

Requests are numbered from 0; tokens are shown as text, never as float ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.loading.budget import format_size
from engine.compare.diff import RELATIVE_STEPS, TOLERANCE, first_divergence
from engine.compare.expect import Outcome
from engine.spec import Vocab
from tinyllm_tui.debugger.opening import PREPARING, is_reading
from tinyllm_tui.debugger.results import DiffLine
from tinyllm_tui.tui.i18n import cause_words, tr

def shape_text(shape: Sequence[int]) -> str:
    """"3×4"."""
    return "×".join(str(n) for n in shape)


def token_text(vocab: Vocab, ids: Iterable[int]) -> str:
    """The tokens' texts, separated by spaces: "我 爱 学习"."""
    return " ".join(vocab.shown(int(t)) for t in ids)


def diff_summary(diffs: Sequence[DiffLine], inject: str | None, batch: bool = False,
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


def diff_cell(d: DiffLine, lang: str = "en") -> str:
    """The number a diff table shows for one operator, as measured (as the CLI prints it); `shape` where the
    runs' rows or key columns do not meet (OpDiff.mismatch says how)."""
    return f"{d.max_abs:.3e}" if d.mismatch is None else tr("diff.shape", lang)


def expect_summary(outcomes: list[Outcome], lang: str = "en") -> str:
    """"45/45 tables agree fully; 332/332 printed cells agree", in `lang` (the CLI's: English)."""
    return tr("expect.summary", lang, passed=sum(o.passed for o in outcomes), tables=len(outcomes),
              agreeing=sum(o.agreeing for o in outcomes), cells=sum(len(o.cells) for o in outcomes))


def divergence_place(d: DiffLine, lang: str = "en") -> str:
    """`request 0 prefill round 0 blocks.0.attn.hook_attn_scores head 0 (max |Δ| = 1.250e-01)`, or how the
    shapes differ, in `lang` (the CLI's: English)."""
    head = "" if d.head is None else tr("diff.head", lang, head=d.head)
    return tr("diff.at", lang, request=d.request, phase=tr(f"phase.{d.phase}", lang), round=d.round, name=d.name,
              head=head, measured=diff_measured(d, lang))


def diff_measured(d: DiffLine, lang: str = "en") -> str:
    """`max |Δ| = 2.220e-16`, or how the runs' rows or key columns do not meet (OpDiff.mismatch), in `lang`."""
    return f"max |Δ| = {d.max_abs:.3e}" if d.mismatch is None else cause_words(d.mismatch, lang)


def size_text(nbytes: int) -> str:
    """A number of bytes as the views show it (1.5 GiB)."""
    return format_size(nbytes)


def loading_progress(stage: str, done: int, total: int, lang: str = "en") -> str:
    """A loading report (the Debugger's first state, the YAML's bytes read, the tensors converted) in `lang`."""
    if stage == PREPARING:
        return tr("loading.preparing", lang)
    if is_reading(stage):
        return tr("loading.yaml", lang, done=size_text(done), total=size_text(total))
    return tr("loading.tensors", lang, done=done, total=total)
