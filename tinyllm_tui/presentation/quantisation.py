"""A quantized weight's block (a GGUF file's, or a Hugging Face folder's MXFP4 experts') as lines of text in a
language of the catalogue: its type and scales, and a window of its integer codes beside the dequantized values around
the asked-for one (the weights browser's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinyllm_tui.presentation.numbers import format_number, left_aligned
from tinyllm_tui.tui.i18n import tr

if TYPE_CHECKING:  # a type only: the TUI's start loads no checkpoint library
    from engine.loading.gguf_blocks import EncodedBlock

VALUES_SHOWN = 8  # values of the block shown around the cursor's: a block holds up to 256
LABEL = 8  # the codes' and values' labels, padded to one width


def block_lines(block: EncodedBlock, lang: str = "en", shown: int = VALUES_SHOWN) -> list[str]:
    """Header, the value's own sum, then codes and values of a window of the block, in `lang`."""
    end = block.start + len(block.values) - 1
    fields = " · ".join(f"{key} {value:.6g}" for key, value in block.fields.items())
    header = tr("quant.block", lang, kind=block.kind, tensor=block.tensor, row=block.row, first=block.start, last=end)
    lines = [" · ".join(filter(None, [header, fields]))]
    i = block.index
    if block.codes is not None:
        sub = "" if block.sub_block is None else tr("quant.sub_block", lang, sub=int(block.sub_block[i]))
        lines.append(tr("quant.value", lang, index=i, sub=sub, scale=f"{block.scale[i]:.6g}", code=int(block.codes[i]),
                        sign="+" if block.offset[i] >= 0 else "−", offset=f"{abs(block.offset[i]):.6g}",
                        value=format_number(block.values[i])))
    first = max(0, min(i - shown // 2, len(block.values) - shown))
    window = range(first, min(first + shown, len(block.values)))
    mark = lambda k, text: f"[{text}]" if k == i else text  # noqa: E731
    codes = left_aligned(tr("quant.codes", lang), LABEL)
    if block.codes is not None:
        lines.append(codes + " ".join(mark(k, f"{int(block.codes[k])}") for k in window))
    else:
        lines.append(codes + tr("quant.not_decoded", lang, kind=block.kind))
    lines.append(left_aligned(tr("quant.values", lang), LABEL) + " ".join(mark(k, format_number(block.values[k]))
                                                                           for k in window))
    return lines
