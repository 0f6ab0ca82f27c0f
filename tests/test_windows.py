"""Nothing on screen is sized by the model: a 7×50 000 matrix renders only the cells that fit."""

from __future__ import annotations

import numpy as np
from textual.app import App

from tinyllm_tui.debugger.frame import Labels, matrix_frame
from tinyllm_tui.tui.widgets.matrix import CELL_WIDTH, MatrixWindow


class OneMatrix(App):
    def compose(self):
        yield MatrixWindow()


def lines_of(window: MatrixWindow) -> list[str]:
    return [line.text if hasattr(line, "text") else line.plain for line in window.text_lines()]


async def test_a_7_by_50000_logits_matrix_renders_only_what_is_visible():
    made: list[int] = []  # every column label built

    def column(j: int) -> str:
        made.append(j)
        return f"{j} · t{j}"

    values = np.random.default_rng(0).normal(size=(7, 50_000))
    app = OneMatrix()
    async with app.run_test(size=(100, 20)) as pilot:
        window = app.query_one(MatrixWindow)
        window.show(matrix_frame("unembed.hook_out", values, Labels(7, lambda i: f"{i} · p{i}"),
                                 Labels(50_000, column), kind="logits"), "unembed.hook_out")
        await pilot.pause()
        rows, cols = window.window()
        lines = lines_of(window)
        assert len(lines) <= 20 and len(cols) == (100 - window._label_width()) // CELL_WIDTH < 10
        assert "cols 0–" in lines[1] and "of 50000" in lines[1] and "top 5:" in lines[2]
        assert len(set(made)) <= len(cols) + 5  # the visible columns and the top 5 tokens, not 50 000 labels
        window.scroll_cols(1)
        await pilot.pause()
        assert window.window()[1][0] == len(cols)


async def test_the_top_k_view_orders_columns_by_the_last_position_and_the_summary_holds_five():
    """Defect 11: a logits window opens on special tokens; `t` shows the most likely columns first, and the
    last position's top-5 line keeps all five entries at 80 columns."""
    values = np.random.default_rng(1).normal(size=(3, 1000))
    tokens = [f"w{j}" for j in range(1000)]
    app = OneMatrix()
    async with app.run_test(size=(60, 12)) as pilot:
        window = app.query_one(MatrixWindow)
        window.show(matrix_frame("unembed.hook_out", values, Labels(3, lambda i: f"{i} · p{i}"),
                                 Labels(1000, lambda j: f"{j} · {tokens[j]}"), kind="logits",
                                 names=tokens.__getitem__), "logits")
        window.sorted_view = True
        await pilot.pause()
        best = np.argsort(-values[-1])  # an independent ranking of the last position
        header = lines_of(window)[3].split()
        assert header[:6] == f"{best[0]} · {tokens[best[0]]} {best[1]} · {tokens[best[1]]}".split()
        summary = lines_of(window)[2]
        assert summary.startswith("2 · p2") and all(tokens[j] in summary for j in best[:5])
