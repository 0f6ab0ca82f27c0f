"""Beside the weights browser's grid: the quantisation block under the cursor of a GGUF checkpoint
(its type, d/dmin, and a window of integer codes beside the dequantized values); hidden for weights
that are stored unquantized or come from another kind of file."""

from __future__ import annotations

from collections.abc import Mapping

from textual.widgets import Static

from tinyllm_tui.presentation.quantisation import block_lines


def kind_of(weights: Mapping, name: str) -> str | None:
    """The parameter's GGUF tensor type (for the browser's title), or None."""
    quantisation = getattr(weights, "quantisation", None)
    return None if quantisation is None else quantisation.kind(name)


class QuantBlock(Static):
    DEFAULT_CSS = "QuantBlock { height: auto; max-height: 5; }"

    def show(self, weights: Mapping, name: str, index: tuple[int, ...]) -> None:
        quantisation = getattr(weights, "quantisation", None)
        block = None if quantisation is None else quantisation.block(name, index)
        self.display = block is not None
        if block is not None:
            self.update("\n".join(block_lines(block)))
