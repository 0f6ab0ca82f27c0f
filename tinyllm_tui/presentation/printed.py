"""What the command line prints about operators, comparisons and expect: tables, as text lines or JSON
documents (English: the CLI's catalogue)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from engine.arrays import to_host
from engine.compare.diff import first_divergence
from engine.compare.expect import Outcome
from engine.export import json_number, json_text
from engine.labels import resolve_some
from engine.spec import Request, Vocab
from engine.trace import Labelled, OpKind, OpState, RequestResult
from tinyllm_tui.debugger.frame import VOCAB_KINDS, top_tokens
from tinyllm_tui.debugger.results import DiffLine
from tinyllm_tui.presentation.numbers import text_table
from tinyllm_tui.presentation.summaries import diff_measured, shape_text, token_text
from tinyllm_tui.tui.i18n import cause_words, where

BIG_ROWS, BIG_COLS = 64, 32  # `run` summarises a larger matrix (its lines would pass ~350 columns)
KEPT_EDGE = 4  # a summarised matrix shows its first and last 4 rows and columns


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
    return text_table(state.output, title=summary, keep=KEPT_EDGE)


def without_text(clean: dict | None, request: int, round_: int, vocab) -> str:
    """For a pass under interventions: what it chose without them (`clean`: (request, round) -> token, p)."""
    if clean is None or (request, round_) not in clean:
        return ""
    token, probability = clean[(request, round_)]
    return f" · without the interventions: {token_text(vocab, [token])} (token id {token}, p {probability:.6f})"


def state_without_text(clean: dict | None, state: OpState, vocab, route=None) -> str:
    """`without_text` after a choice, `route_without_text` after a top-k (`route`: its RouteWithout); nothing after
    any other operator."""
    if route is not None:
        return route_without_text(route, state)
    return without_text(clean, state.request, state.round, vocab) if state.kind == OpKind.CHOICE else ""


def route_without_text(without, state: OpState) -> str:
    """Under a top-k of a run under interventions: the tokens whose experts differ without them, with those."""
    if without.chosen is None:
        return "\nwithout the interventions: this pass fed another token (an earlier pass chose otherwise)"
    ours = to_host(state.values).astype(int)
    if without.chosen.shape != ours.shape:
        return ""
    differ = [f"{state.output.rows[t]} {without.chosen[t].tolist()}" for t in range(len(ours))
              if set(ours[t].tolist()) != set(without.chosen[t].tolist())]
    return "\nwithout the interventions: " + ("; ".join(differ) + " (the other tokens as here)" if differ
                                                else "the same experts for every token")


def diff_line(d: DiffLine) -> str:
    """`✓ request 0 decode 1  blocks.0.hook_resid_post  max|Δ| 2.220e-16 (≤ 1e-12)`: the number as measured."""
    head = "" if d.head is None else f" head {d.head}"
    mark, compared = ("✓", "≤") if d.agrees else ("✗", ">")
    measured = f"max|Δ| {d.max_abs:.3e} ({compared} {d.tolerance:.2g})" if d.mismatch is None else diff_measured(d)
    return f"{mark} request {d.request} {where(d.phase, d.round, 'en')}  {d.name}{head}  {measured}"


def exact_line(row) -> str:
    """A quantized cache's error against the exact cache in one round (engine.compare.exact.RoundError), as `diff`
    prints it."""
    patterns, kv, scale = (" ".join("—" if e is None else f"{e:.3e}" for e in errors)  # —: the layer has none
                           for errors in (row.pattern_error, row.kv_error, row.kv_scale))
    return (f"request {row.request} round {row.round}: logits {row.logits_error:.3e} · pattern per layer "
            f"{patterns} · K/V per layer {kv} (largest |K|, |V| per layer {scale})")


def exact_json(rows: list) -> dict:
    """A quantized cache's error against the exact cache, per round (nothing for an exact cache)."""
    if not rows:
        return {}
    return {"against_exact_cache": [{"request": r.request, "round": r.round, "logits": json_number(r.logits_error),
                                     "pattern": [None if e is None else json_number(e) for e in r.pattern_error],
                                     "kv": [None if e is None else json_number(e) for e in r.kv_error],
                                     "same_choice": r.same_choice}
                                    for r in rows]}


def diff_json(diffs: Sequence[DiffLine], inject: str | None) -> dict:
    first = first_divergence(diffs)
    return {
        "inject": inject,
        "agrees": first is None,
        "first_divergence": None if first is None else first.step,
        "operators": [{"step": d.step, "request": d.request, "phase": d.phase.value, "round": d.round, "name": d.name,
                       "layer": d.layer, "head": d.head, "max_abs": json_number(d.max_abs),
                       "tolerance": d.tolerance, "agrees": d.agrees, "mismatch": None if d.mismatch is None else diff_measured(d),
                       "state": d.state} for d in diffs],
    }


def json_line(document) -> str:
    """A document as one line of standard JSON, ±∞ as ±1e999 and NaN as null (engine.export.json_text)."""
    return json_text(document)


def outcome_lines(outcome: Outcome) -> list[str]:
    e = outcome.expectation
    note = f"  ({e.note})" if e.note else ""
    if outcome.problem is not None:
        return [f"✗ {cause_words(e.title, 'en')}: {cause_words(outcome.problem, 'en')}{note}"]
    mark = "✓" if outcome.passed else "✗"
    return [f"{mark} {cause_words(e.title, 'en')}: {outcome.agreeing}/{len(outcome.cells)} cells agree{note}",
            *(f"    row {cell.row_label}  col {cell.col_label}: printed {cell.printed}, computed {cell.computed:.6f}  "
              f"(|Δ| {abs(cell.computed - cell.printed):.2g} > {cell.tolerance:.2g})"
              for cell in outcome.cells if not cell.agrees)]


def disagreement_lines(outcomes: list[Outcome]) -> list[str]:
    lines = ["A table that disagrees prints numbers that do not follow from the scenario's inputs and weights "
             "(computed here in float64); a table that agrees does."]
    for outcome in outcomes:
        e = outcome.expectation
        verdict = "follows from the inputs" if outcome.passed else "does not follow from the inputs"
        lines.append(f"  {verdict}: {cause_words(e.title, 'en')}" + (f"  ({e.note})" if e.note else ""))
    return lines


def outcome_json(outcome: Outcome) -> dict:
    e = outcome.expectation
    return {
        "op": e.op, "request": e.request, "round": e.round, "head": e.head, "run": e.run, "note": e.note,
        "agreeing": outcome.agreeing, "cells": len(outcome.cells), "problem": None if outcome.problem is None else cause_words(outcome.problem, "en"),
        "disagreeing": [
            {"row": c.row_label, "col": c.col_label, "printed": json_number(c.printed),
             "computed": json_number(c.computed), "tolerance": c.tolerance}
            for c in outcome.cells if not c.agrees
        ],
    }


ROWS_SUMMARISED = 4  # argmax lines for the first and last rows of a large matrix


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
