"""Random quantized blocks for generated GGUF files (gguf-py cannot quantize the K-quants).

The bytes are random; each block's float16 scale fields (d, and dmin where the type has one) are
set so that the weights come out with the spread asked for. The model then *is* whatever the
file decodes to.
"""

from __future__ import annotations

import gguf
import numpy as np

SCALE_FIELDS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q5_0": (0,),
                "Q8_0": (0,)}  # byte offsets of the float16 scales in a block
SAMPLE_ROWS = 64  # rows dequantized to measure the spread


def random_blocks(kind: str, shape: tuple[int, int], std: float, rng: np.random.Generator) -> np.ndarray:
    """(rows, bytes per row) of random `kind` blocks whose weights have about `std` spread."""
    qtype = gguf.GGMLQuantizationType[kind]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (shape[0], shape[1] // block, size), dtype=np.uint8)

    def set_scale(value: float) -> None:
        scale = np.array([value], dtype="<f2").view(np.uint8)
        for offset in SCALE_FIELDS[kind]:
            raw[..., offset:offset + 2] = scale

    set_scale(1.0)
    spread = gguf.quants.dequantize(raw[:SAMPLE_ROWS].reshape(min(SAMPLE_ROWS, shape[0]), -1), qtype).std()
    set_scale(std / spread)
    return raw.reshape(shape[0], -1)
