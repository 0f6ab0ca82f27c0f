"""The quantisation behind one weight of a GGUF file: its block's type, scales/mins and integer codes.

Every value of a decoded block is `scale · code + offset`: `code` is the integer stored for it
(already shifted where the type centres it: Q4_0 stores q and means q − 8), `scale` the product of
the block's float16 `d` and the value's sub-block scale, `offset` the block's min (Q4_1, Q5_1) or
−dmin times the sub-block min (K-quants). Layouts are llama.cpp's (ggml-quants.c); the tests check
every decoded type against gguf-py's dequantization. MXFP4 (gpt-oss's experts, in a GGUF file or repacked from a
Hugging Face folder: hf_mxfp4.py) fits the same sum: its e8m0 byte `e` gives the scale 2^(e − 128) and each FP4
e2m1 value is a code of ggml's doubled table (−12…12), so scale · code is the value. Other types (IQ*, TQ*…) show
their dequantized values only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import gguf.quants
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize


@dataclass(frozen=True)
class EncodedBlock:
    tensor: str  # the GGUF tensor's name
    kind: str  # its type, e.g. "Q4_K"
    row: int  # in the tensor ([out, in] for a matrix; merged experts: expert · rows + row)
    start: int  # the block's first column in that row
    index: int  # the asked-for value's place in the block
    values: np.ndarray  # the block dequantized (gguf-py)
    fields: dict[str, float]  # the block's own numbers: d, dmin (or m); MXFP4: its e8m0 byte, d
    codes: np.ndarray | None = None  # one integer per value; None for a type not decoded here
    scale: np.ndarray | None = None  # per value
    offset: np.ndarray | None = None  # per value
    sub_block: np.ndarray | None = None  # K-quants: which sub-block (its own scale and min) each value is in


def f16(raw: np.ndarray, at: int) -> float:
    return float(raw[at:at + 2].view("<f2")[0])


def nibbles(qs: np.ndarray) -> np.ndarray:
    """Low nibbles then high nibbles: the order of Q4_0/Q4_1/Q5_0/Q5_1 values."""
    return np.concatenate([qs & 0xF, qs >> 4]).astype(np.int64)


def high_bits(qh: np.ndarray, count: int) -> np.ndarray:
    return (int(qh.view("<u4")[0]) >> np.arange(count)) & 1


def legacy(raw: np.ndarray, kind: str):
    """Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 values, one scale): (fields, codes, scale, offset, no sub-blocks)."""
    d = f16(raw, 0)
    fields = {"d": d}
    if kind == "Q8_0":
        codes = raw[2:34].view(np.int8).astype(np.int64)
        return fields, codes, np.full(32, d), np.zeros(32), None
    has_min = kind in ("Q4_1", "Q5_1")
    m = f16(raw, 2) if has_min else 0.0
    if has_min:
        fields["m"] = m
    at = 4 if has_min else 2
    if kind.startswith("Q5"):
        codes = nibbles(raw[at + 4:at + 20]) | (high_bits(raw[at:at + 4], 32) << 4)
        centre = 0 if has_min else 16
    else:
        codes = nibbles(raw[at:at + 16])
        centre = 0 if has_min else 8
    return fields, codes - centre, np.full(32, d), np.full(32, m), None


def k4_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins of Q4_K/Q5_K (llama.cpp's get_scale_min_k4)."""
    s = scales.astype(np.int64)
    low = np.concatenate([s[0:4] & 63, (s[8:12] & 0xF) | ((s[0:4] >> 6) << 4)])
    mins = np.concatenate([s[4:8] & 63, (s[8:12] >> 4) | ((s[4:8] >> 6) << 4)])
    return low, mins


def q2_k(raw: np.ndarray):
    scales, qs, d, dmin = raw[0:16].astype(np.int64), raw[16:80].astype(np.int64), f16(raw, 80), f16(raw, 82)
    shifts = np.arange(4)[None, :, None] * 2  # (half, shift, l): value half*128 + shift/2*32 + l
    codes = (qs.reshape(2, 1, 32) >> shifts) & 3
    sub = (np.arange(2)[:, None, None] * 8 + np.arange(4)[None, :, None] * 2 + np.arange(32)[None, None, :] // 16)
    codes, sub = codes.reshape(256), sub.reshape(256)
    return {"d": d, "dmin": dmin}, codes, d * (scales[sub] & 15), -dmin * (scales[sub] >> 4), sub


def q3_k(raw: np.ndarray):
    hmask, qs, d = raw[0:32].astype(np.int64), raw[32:96].astype(np.int64), f16(raw, 108)
    a = raw[96:108].view("<u4").astype(np.int64)
    m1, m2 = 0x03030303, 0x0F0F0F0F
    aux = np.array([(a[0] & m2) | ((a[2] & m1) << 4), (a[1] & m2) | (((a[2] >> 2) & m1) << 4),
                    ((a[0] >> 4) & m2) | (((a[2] >> 4) & m1) << 4), ((a[1] >> 4) & m2) | (((a[2] >> 6) & m1) << 4)],
                   dtype="<u4")
    scales = aux.view(np.uint8).astype(np.int64) - 32
    half, shift, lane = np.arange(2)[:, None, None], np.arange(4)[None, :, None], np.arange(32)[None, None, :]
    low = (qs.reshape(2, 1, 32) >> (shift * 2)) & 3
    high = (hmask[None, None, :] >> (half * 4 + shift)) & 1
    codes = (low - 4 * (1 - high)).reshape(256)
    sub = (half * 8 + shift * 2 + lane // 16).reshape(256)
    return {"d": d}, codes, d * scales[sub], np.zeros(256), sub


def q45_k(raw: np.ndarray, five: bool):
    d, dmin = f16(raw, 0), f16(raw, 2)
    scales, mins = k4_scales(raw[4:16])
    qs = raw[48:176] if five else raw[16:144]
    chunks = qs.astype(np.int64).reshape(4, 32)
    codes = np.stack([chunks & 0xF, chunks >> 4], axis=1)  # (chunk, low/high, l): sub-block 2·chunk + low/high
    if five:
        qh = raw[16:48].astype(np.int64)
        bit = np.arange(8).reshape(4, 2, 1)
        codes = codes | (((qh[None, None, :] >> bit) & 1) << 4)
    sub = np.repeat(np.arange(8), 32)
    return {"d": d, "dmin": dmin}, codes.reshape(256), d * scales[sub], -dmin * mins[sub], sub


def q6_k(raw: np.ndarray):
    ql, qh = raw[0:128].astype(np.int64).reshape(2, 64), raw[128:192].astype(np.int64).reshape(2, 32)
    scales, d = raw[192:208].view(np.int8).astype(np.int64), f16(raw, 208)
    low = np.stack([ql[:, :32] & 0xF, ql[:, 32:] & 0xF, ql[:, :32] >> 4, ql[:, 32:] >> 4], axis=1)  # (half, part, l)
    high = (qh[:, None, :] >> (np.arange(4)[None, :, None] * 2)) & 3
    codes = ((low | (high << 4)) - 32).reshape(256)
    sub = (np.arange(2)[:, None, None] * 8 + np.arange(4)[None, :, None] * 2 + np.arange(32)[None, None, :] // 16)
    sub = sub.reshape(256)
    return {"d": d}, codes, d * scales[sub], np.zeros(256), sub


MXFP4_CODES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12])  # e2m1, doubled (ggml's kvalues)


def mxfp4(raw: np.ndarray):
    """ggml's block_mxfp4: the e8m0 scale byte, then value j in the low nibble and j + 16 in the high one; ggml
    halves the scale (2^(e − 128)) against its doubled codes."""
    e = int(raw[0])
    d = float(np.ldexp(1.0, e - 128))
    return {"e8m0": e, "d": d}, MXFP4_CODES[nibbles(raw[1:17])], np.full(32, d), np.zeros(32), None


DECODERS = {
    "Q4_0": lambda raw: legacy(raw, "Q4_0"), "Q4_1": lambda raw: legacy(raw, "Q4_1"),
    "Q5_0": lambda raw: legacy(raw, "Q5_0"), "Q5_1": lambda raw: legacy(raw, "Q5_1"),
    "Q8_0": lambda raw: legacy(raw, "Q8_0"), "Q2_K": q2_k, "Q3_K": q3_k,
    "Q4_K": lambda raw: q45_k(raw, False), "Q5_K": lambda raw: q45_k(raw, True), "Q6_K": q6_k, "MXFP4": mxfp4,
}
PLAIN = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16, GGMLQuantizationType.F64)


def block_of(name: str, kind: GGMLQuantizationType, rows: np.ndarray, row: int, col: int) -> EncodedBlock | None:
    """The block holding [row, col] of a tensor whose raw rows are `rows`; None for an unquantized type."""
    if kind in PLAIN:
        return None
    size, nbytes = GGML_QUANT_SIZES[kind]
    number = col // size
    raw = np.ascontiguousarray(rows[row, number * nbytes:(number + 1) * nbytes])
    values = dequantize(raw[None, :], kind)[0]
    block = EncodedBlock(name, kind.name, row, number * size, col % size, values, {})
    decode = DECODERS.get(kind.name)
    if decode is None:
        return block
    fields, codes, scale, offset, sub = decode(raw)
    return EncodedBlock(name, kind.name, row, number * size, col % size, values, fields, codes, scale, offset, sub)


# values dequantized at a time: gguf-py's temporaries then stay under malloc's mmap threshold (128 KiB) and are
# reused, where at 1 << 20 each chunk's were mapped and faulted in afresh (1.5M page faults for the 0.5B file)
CHUNK = 1 << 15


def dequantize_into(rows: np.ndarray, kind: GGMLQuantizationType, out: np.ndarray) -> np.ndarray:
    """gguf-py's dequantization of uint8 `rows` of `kind`, a chunk of rows at a time, written into `out` (as many
    values as the rows hold, in their order; also the Hugging Face folders' MXFP4 experts, repacked: hf_mxfp4.py)."""
    flat = out.reshape(len(rows), -1)
    step, dequantize_rows = max(1, CHUNK // flat.shape[1]), rows_dequantizer(kind)
    for start in range(0, len(rows), step):
        flat[start:start + step] = dequantize_rows(rows[start:start + step])
    return out


def rows_dequantizer(kind: GGMLQuantizationType) -> Callable[[np.ndarray], np.ndarray]:
    """gguf-py's dequantization of whole uint8 rows of `kind`. Its `dequantize` cuts every call into
    groups of 16 rows and copies them together; its per-type `dequantize_rows` on a chunk of rows gives
    the same values at about half the cost (the 0.5B GGUF: 1.2 s against 2.3 s)."""
    quant = getattr(gguf.quants, kind.name, None)
    if quant is None or not hasattr(quant, "dequantize_rows"):  # F32 and F16, which dequantize views or casts
        return partial(dequantize, qtype=kind)
    quant.init_grid()  # the IQ types' lookup tables, built once
    return quant.dequantize_rows
