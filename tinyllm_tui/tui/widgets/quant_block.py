"""Beside the weights browser's grid: the quantisation block under the cursor of a GGUF checkpoint, or of a
Hugging Face folder's MXFP4 experts (its type, d/dmin or the e8m0 scale byte, and a window of integer codes beside
the dequantized values); hidden for weights that are stored unquantized or come from another kind of file."""

from __future__ import annotations

from textual.widgets import Static

from tinyllm_tui.presentation.quantisation import block_lines


class QuantBlock(Static):
    DEFAULT_CSS = "QuantBlock { height: auto; max-height: 5; }"

    def show(self, block, lang: str) -> None:
        """`block`: what the Debugger's browser.block found under the cursor (None: nothing to show), worded in `lang`."""
        self.display = block is not None
        if block is not None:
            self.update("\n".join(block_lines(block, lang)))
