"""A quantized weight's block (a GGUF file's, or a Hugging Face folder's MXFP4 experts') as lines of text: its type
and scales, and a window of its integer codes beside the dequantized values around the asked-for one (shared by CLI
and TUI)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinyllm_tui.presentation.numbers import format_number

if TYPE_CHECKING:  # a type only: the TUI's start loads no checkpoint library
    from engine.loading.gguf_blocks import EncodedBlock

VALUES_SHOWN = 8  # values of the block shown around the cursor's: a block holds up to 256


def block_lines(block: EncodedBlock, shown: int = VALUES_SHOWN) -> list[str]:
    """Header, the value's own sum, then codes and values of a window of the block."""
    end = block.start + len(block.values) - 1
    fields = " · ".join(f"{key} {value:.6g}" for key, value in block.fields.items())
    lines = [" · ".join(filter(None, [f"{block.kind} block at {block.tensor}[{block.row}, {block.start}–{end}]",
                                      fields]))]
    i = block.index
    if block.codes is not None:
        sub = "" if block.sub_block is None else f" (sub-block {int(block.sub_block[i])})"
        lines.append(f"value {i}{sub}: {block.scale[i]:.6g} × code {int(block.codes[i])} "
                     f"{'+' if block.offset[i] >= 0 else '−'} {abs(block.offset[i]):.6g} = {format_number(block.values[i])}")
    first = max(0, min(i - shown // 2, len(block.values) - shown))
    window = range(first, min(first + shown, len(block.values)))
    mark = lambda k, text: f"[{text}]" if k == i else text  # noqa: E731
    if block.codes is not None:
        lines.append("codes   " + " ".join(mark(k, f"{int(block.codes[k])}") for k in window))
    else:
        lines.append(f"codes   (not decoded for {block.kind}: its values only)")
    lines.append("values  " + " ".join(mark(k, format_number(block.values[k])) for k in window))
    return lines
