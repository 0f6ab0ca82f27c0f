"""A mixture-of-experts layer's routing as text: tokens down, experts across, the chosen cells holding their
weights, each token's margin (its k-th score less the best one not chosen) and the tokens each expert got; and
the experts at a glance: every sparse layer of the pass down, the tokens each expert got across, and the
layer's least margin with its token (the counterpart of the attention heads at a glance).

Plain text lines, windowed: the tokens and experts that fit the width and height asked for, from `first_row`
and `first_expert` on, worded in `lang` (tinyllm_tui.tui.i18n's routing.* keys). Shared by the TUI's routing
screen and tests.
"""

from __future__ import annotations

from tinyllm_tui.debugger.readings import Routing
from tinyllm_tui.presentation.numbers import display_width, fit_cells, left_aligned, right_aligned
from tinyllm_tui.tui.i18n import tr

LABEL = 12  # the token column: "12 · token" cut to fit
EXPERT_CELL = 6  # one expert's column: a weight as 0.630, or · where the token did not choose it
MARGIN = 10  # the margin column
NEAR_TIE = 1e-3  # a margin below this is marked: a float32 or quantized run may choose otherwise


def routing_lines(routing: Routing, *, width: int, height: int, first_row: int = 0,
                  first_expert: int = 0, lang: str = "en") -> list[str]:
    """The window of `routing` that fits `width` × `height`, starting at token `first_row` and expert
    `first_expert` (each clamped so that the window is full where it can be)."""
    tokens = len(routing.labels)
    shown = max((width - LABEL - MARGIN) // EXPERT_CELL, 1)
    first_expert = min(max(first_expert, 0), max(routing.n_experts - shown, 0))
    experts = range(first_expert, min(first_expert + shown, routing.n_experts))
    rows = max(height - 3, 1)  # the title, the experts' names and the counts
    first_row = min(max(first_row, 0), max(tokens - rows, 0))
    window = range(first_row, min(first_row + rows, tokens))
    lines = [tr("routing.where", lang, layer=routing.layer, positions=_positions(routing.positions, window, lang),
                first_expert=experts.start, last_expert=experts.stop - 1, experts=routing.n_experts),
             " " * LABEL + "".join(f"{f'e{e}':>{EXPERT_CELL}}" for e in experts)
             + right_aligned(tr("routing.margin", lang), MARGIN)]
    for row in window:
        weight = dict(zip(routing.chosen[row].tolist(), routing.weights[row].tolist()))
        cells = "".join(f"{weight[e]:>{EXPERT_CELL}.3f}" if e in weight else f"{'·':>{EXPERT_CELL}}" for e in experts)
        margin = routing.margins[row]
        flag = "⚠" if margin < NEAR_TIE else " "
        lines.append(f"{_label(routing.labels[row])}{cells}{margin:>{MARGIN - 1}.1e}{flag}")
    counts = routing.counts
    lines.append(left_aligned(tr("routing.tokens", lang), LABEL)
                 + "".join(f"{int(counts[e]):>{EXPERT_CELL}}" for e in experts))
    return [fit_cells(line.rstrip(), width) for line in lines]


def _positions(at: tuple[int, ...], window: range, lang: str) -> str:
    """The positions of the tokens shown: `position 3` (one row), `positions 10–12` (all of them), else which
    part of how many: `positions 11–12 (2 of 3)`."""
    first, last = at[window.start], at[window.stop - 1]
    shown = tr("routing.position", lang, first=first) if len(window) == 1 else \
        tr("routing.positions", lang, first=first, last=last)
    return shown if len(window) == len(at) else tr("routing.part", lang, shown=shown, count=len(window),
                                                    tokens=len(at))


def _label(label: str) -> str:
    """The label in LABEL terminal cells, cut with … where longer (a CJK character takes two)."""
    if display_width(label) >= LABEL:
        while display_width(label) > LABEL - 2:
            label = label[:-1]
        label += "…"
    return label + " " * (LABEL - display_width(label))


LAYER = 7  # the glance's layer column


def experts_glance_lines(routings: list[Routing], *, width: int, height: int, first_row: int = 0,
                 first_expert: int = 0, lang: str = "en") -> list[str]:
    """Every sparse layer's tokens per expert (· for none) and least margin, the window of layers from `first_row`
    and experts from `first_expert` that fits `width` × `height` (each clamped so that the window is full)."""
    n_experts, tokens = routings[0].n_experts, len(routings[0].labels)
    shown = max((width - LAYER - MARGIN - LABEL) // EXPERT_CELL, 1)
    first_expert = min(max(first_expert, 0), max(n_experts - shown, 0))
    experts = range(first_expert, min(first_expert + shown, n_experts))
    rows = max(height - 2, 1)
    first_row = min(max(first_row, 0), max(len(routings) - rows, 0))
    lines = [tr("routing.glance", lang, count=len(routings), first=experts.start, last=experts.stop - 1,
                experts=n_experts, tokens=tokens),
             left_aligned(tr("routing.layer", lang), LAYER) + "".join(f"{f'e{e}':>{EXPERT_CELL}}" for e in experts)
             + right_aligned(tr("routing.least", lang), MARGIN + 3)]
    for routing in routings[first_row:first_row + rows]:
        counts = routing.counts
        cells = "".join(f"{int(counts[e]):>{EXPERT_CELL}}" if counts[e] else f"{'·':>{EXPERT_CELL}}" for e in experts)
        least = int(routing.margins.argmin())
        margin = routing.margins[least]
        flag = "⚠" if margin < NEAR_TIE else " "
        lines.append(f"{routing.layer:<{LAYER}}{cells}{margin:>{MARGIN + 2}.1e}{flag} {_label(routing.labels[least])}")
    return [fit_cells(line.rstrip(), width) for line in lines]
