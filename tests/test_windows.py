"""Nothing on screen is sized by the model: a 7×50 000 matrix renders only the cells that fit."""

from __future__ import annotations

import numpy as np
from textual.app import App

from tinyllm_tui.tui.widgets.matrix import CELL_WIDTH, Labels, MatrixData, MatrixWindow


class OneMatrix(App):
    def compose(self):
        yield MatrixWindow()


async def test_a_7_by_50000_logits_matrix_renders_only_what_is_visible():
    made: list[int] = []  # every column label built

    def column(j: int) -> str:
        made.append(j)
        return f"{j} · t{j}"

    values = np.random.default_rng(0).normal(size=(7, 50_000))
    app = OneMatrix()
    async with app.run_test(size=(100, 20)) as pilot:
        window = app.query_one(MatrixWindow)
        window.data = MatrixData("unembed.hook_out", values, Labels(7, lambda i: f"{i} · p{i}"),
                                 Labels(50_000, column), kind="logits")
        await pilot.pause()
        rows, cols = window.window()
        lines = [line.text if hasattr(line, "text") else line.plain for line in window.text_lines()]
        assert len(lines) <= 20 and len(cols) == (100 - window._label_width()) // CELL_WIDTH < 10
        assert "cols 0–" in lines[1] and "of 50000" in lines[1] and "top 5:" in lines[2]
        assert len(set(made)) <= len(cols) + 5  # the visible columns and the top 5 tokens, not 50 000 labels
        window.scroll_cols(1)
        await pilot.pause()
        assert window.window()[1][0] == len(cols)
