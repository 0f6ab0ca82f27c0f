"""A --against report in words (engine/compare/against.py gives facts: cells labelled by causes, numbers), from
the catalogue (tinyllm_tui.tui.i18n) in the view's language: the lines and the JSON document `check --against`
prints (English), and the first divergence `g diverged` says in the TUI."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tinyllm_tui.tui.i18n import cause_words, tr


def tolerance_words(atol: float, rtol: float, lang: str) -> str:
    """`1e-09`, or `1e-05 + 1e-05·|ref|`: |ours − theirs| may be as large as that."""
    return f"{atol:g}" if not rtol else tr("report.tolerance", lang, atol=f"{atol:g}", rtol=f"{rtol:g}")


def place_words(op, requests: int, lang: str) -> str:
    """`pass · operator · cell (its labels)` of an OpAgreement's first disagreeing cell, or why its arrays could not
    be compared (the head is among the cell's labels)."""
    place, labels = f"{op.key.label(requests)} · {op.key.name}", cause_words(op.place, lang)
    return f"{place} · {labels}" if op.index is None else f"{place} · {list(op.index)} ({labels})"


def values_words(op, lang: str) -> str:
    """`reference 0.25, dump 0.5 (|Δ| 2.500e-01 > 1e-09 + 1e-09·|ref|, float32)`; "" without a cell."""
    if op.index is None:
        return ""
    return tr("report.values", lang, ours=repr(op.ours), theirs=repr(op.theirs),
              delta=f"{abs(op.ours - op.theirs):.3e}", tolerance=tolerance_words(op.tolerance.atol, op.tolerance.rtol,
                                                                                  lang), dtype=op.dtype)


def cell_words(op, requests: int, lang: str) -> str:
    """The place of the first disagreeing cell, then its values."""
    values = values_words(op, lang)
    return f"{place_words(op, requests, lang)}: {values}" if values else place_words(op, requests, lang)


def flip_words(flip, requests: int, lang: str) -> str:
    """A RouteFlip: `decode.2 · layer 1 · token 4 · cat: reference chose [2, 7] (scores …, margin …), dump
    [3, 7]`."""
    theirs = "" if flip.their_scores is None else tr("report.their_scores", lang, scores=_scores(flip.their_scores))
    return tr("report.route_flip", lang, where=flip.key.label(requests), layer=flip.layer, token=flip.token,
              ours=list(flip.ours), scores=_scores(flip.our_scores), margin=f"{flip.margin:.2e}",
              other=cause_words(flip.other, lang),
              theirs=list(flip.theirs), their_scores=theirs)


def _scores(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.9g}" for v in values)  # a near tie needs the digits


def report_lines(report, lang: str) -> list[str]:
    """A Report as `check --against` prints it: the summary, then one line per pass and operator."""
    rows, requests = report.rows(), report.requests
    first = report.first_divergence
    passes = len({(row.key.request, row.key.pass_) for row in rows})
    lines = [tr("report.summary", lang, agree=sum(row.first is None for row in rows), rows=len(rows), passes=passes)]
    lines += [tr("report.flip", lang, flip=flip_words(report.flip, requests, lang))] if report.flip else []
    lines.append(tr("report.first", lang, cell=cell_words(first, requests, lang)) if first else tr("report.none", lang))
    if rows:
        top = max(rows, key=lambda row: row.max_abs)
        lines.append(tr("report.largest", lang, max_abs=f"{top.max_abs:.3e}",
                        where=f"{top.key.label(requests)} · {top.key.name}"))
    return lines + _left_out(report, lang) + [_row_line(row, requests, lang) for row in rows]


def _left_out(report, lang: str) -> list[str]:
    """What one side has and the other does not: missing operators, passes, unused and TransformerLens keys."""
    lines = []
    if report.missing:
        names = (name + (tr("report.missing.passes", lang, count=count) if count > 1 else "")
                 for name, count in report.missing.items())
        lines.append(tr("report.missing", lang, count=len(report.missing), names=_some(names)))
    for key, found, shown in (("report.absent", report.absent_passes, 8), ("report.beyond", report.beyond, 8),
                              ("report.unused", report.unused, 8), ("report.bridge", report.bridge, 6)):
        if found:
            lines.append(tr(key, lang, count=len(found), items=_some(found, shown)))
    return lines


def _row_line(row, requests: int, lang: str) -> str:
    mark, place = "✓" if row.first is None else "✗", f"{row.key.label(requests)}  {row.key.name}"
    if row.first is not None and row.first.index is None:
        return f"{mark} {place}  {cause_words(row.first.place, lang)}"
    return f"{mark} {place}  {tr('report.row', lang, max_abs=f'{row.max_abs:.3e}', dtype=row.dtype)}"


def _some(items: Iterable[str], shown: int = 8) -> str:
    items = list(items)
    return ", ".join(items[:shown]) + (" …" if len(items) > shown else "")


# -- the JSON documents (`check --against … --json`, `diff --json`): English, as the CLI prints ----------------------
def report_document(report) -> dict:
    """The report as `check --against … --json` prints it."""
    first, requests = report.first_divergence, report.requests
    return {"agrees": first is None,
            "first_divergence": None if first is None else _op_document(first, requests),
            "first_route_flip": None if report.flip is None else flip_document(report.flip, requests),
            "operators": [{"pass": row.key.label(requests), "operator": row.key.name,
                           "max_abs": _number(row.max_abs), "dtype": row.dtype, "agrees": row.first is None,
                           "atol": row.tolerance.atol, "rtol": row.tolerance.rtol} for row in report.rows()],
            "missing": report.missing, "absent_passes": list(report.absent_passes), "unused": list(report.unused),
            "beyond": list(report.beyond), "bridge_keys": list(report.bridge)}


def flip_document(flip, requests: int) -> dict:
    return {"pass": flip.key.label(requests), "layer": flip.layer, "token": flip.token,
            "other": cause_words(flip.other, "en"),
            "reference": list(flip.ours), "dump": list(flip.theirs), "reference_scores": list(flip.our_scores),
            "dump_scores": None if flip.their_scores is None else list(flip.their_scores),
            "margin": flip.margin, "text": flip_words(flip, requests, "en")}


def _op_document(op, requests: int) -> dict:
    return {"pass": op.key.label(requests), "operator": op.key.name, "head": op.head,
            "index": None if op.index is None else list(op.index), "where": cause_words(op.place, "en"),
            "reference": op.ours, "dump": op.theirs, "text": cell_words(op, requests, "en")}


def _number(x: float) -> float | str:
    return x if np.isfinite(x) else "inf"
