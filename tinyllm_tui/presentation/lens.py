"""The logit lens and direct logit attribution as text and JSON, shared by `run --lens` and the TUI."""

from __future__ import annotations

from engine.analysis import Attribution, LensRow, Pass
from engine.export import json_number
from engine.interventions import pass_name
from engine.spec import Vocab
from tinyllm_tui.presentation.numbers import fit_cells, left_aligned
from tinyllm_tui.tui.i18n import tr

CELL = 14  # a lens cell: a token's text cut to fit, and its probability


def short_token(vocab: Vocab, token: int, width: int = CELL - 5) -> str:
    """A token's text on one line, cut to `width` display cells (… marks a cut; 学 is two cells)."""
    return fit_cells(vocab.tokens[token].replace("\n", "\\n").replace(" ", "␣"), width)


def lens_cell(vocab: Vocab, token: int, probability: float) -> str:
    """The token and its probability, padded to CELL display cells."""
    return left_aligned(f"{short_token(vocab, token)} {probability:.2f}", CELL)


def lens_lines(rows: list[LensRow], run: Pass, context: tuple[int, ...], vocab: Vocab, *,
               first: int = 0, count: int | None = None, lang: str = "en") -> list[str]:
    """A layer × position table of each residual stream's most likely token and its probability,
    then the last position's top-k per layer; `first`, `count`: the window of the pass's positions shown. Its
    first line says the probabilities are the whole vocabulary's, not those the decode rule chose by (a lens reads
    no filter, no temperature); the words are the catalogue's in `lang` (the CLI's: English)."""
    total = rows[0].top.shape[0] if rows else 0
    shown = range(first, total if count is None else min(total, first + count))
    label = max((len(r.label) for r in rows), default=0)
    lines = [tr("lens.whole", lang), " " * label + "  " + " ".join(left_aligned(f"{run.first + i}·" + short_token(vocab, context[run.first + i],
                                                                                        CELL - 3), CELL)
                                              for i in shown)]
    for row in rows:
        cells = (lens_cell(vocab, int(row.top[i, 0]), float(row.probs[i, 0])) for i in shown)
        lines.append(f"{row.label:<{label}}  " + " ".join(cells))
    lines.append(tr("lens.top", lang, k=rows[0].top.shape[1] if rows else 0, position=run.first + total - 1))
    for row in rows:
        cells = (lens_cell(vocab, int(t), float(p)) for t, p in zip(row.top[-1], row.probs[-1]))
        lines.append(f"{row.label:<{label}}  " + " ".join(cells))
    return [line.rstrip() for line in lines]


def attribution_lines(attribution: Attribution, vocab: Vocab, count: int = 12, *, lang: str = "en") -> list[str]:
    """The largest terms of the chosen token's logit, both ways, and what they sum to, in `lang`'s words."""
    a, total = attribution, sum(value for _, value in attribution.terms)
    lines = [tr("lens.attribution", lang, token=short_token(vocab, a.token, 24), id=a.token, position=a.position,
                logit=f"{a.logit:.6f}", terms=f"{total:.6f}", bias=f"{a.bias_term:.6f}")]
    shown = a.terms if len(a.terms) <= count else a.terms[: count // 2] + a.terms[-(count - count // 2):]
    for index, (label, value) in enumerate(shown):
        if len(a.terms) > count and index == count // 2:
            lines.append(tr("lens.more", lang, count=len(a.terms) - count))
        lines.append(f"  {label:<14} {value:+.6f}")
    return lines


def lens_json(rows: list[LensRow], attribution: Attribution | None, run: Pass, vocab: Vocab) -> dict:
    positions = list(range(run.first, run.first + (rows[0].top.shape[0] if rows else 0)))
    return {
        "request": run.request, "pass": pass_name(run.round), "positions": positions,
        "lens": [{"hook": r.hook, "layer": r.layer,
                  "top": [[{"token": int(t), "text": vocab.tokens[int(t)], "probability": json_number(float(p))}
                           for t, p in zip(r.top[i], r.probs[i])] for i in range(len(positions))]}
                 for r in rows],
        "attribution": None if attribution is None else {
            "token": attribution.token, "position": attribution.position, "logit": json_number(attribution.logit),
            "final_norm_bias_term": json_number(attribution.bias_term),
            "terms": [{"term": label, "contribution": json_number(value)} for label, value in attribution.terms]},
    }
