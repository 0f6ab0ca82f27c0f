"""gpt-oss's experts as openai/gpt-oss-20b and -120b ship them: MXFP4 in safetensors, said by config.json's
`quantization_config: {quant_method: mxfp4, ...}`.

A layer's `mlp.experts.gate_up_proj` and `mlp.experts.down_proj` are each two uint8 tensors: `…_blocks` (experts ×
rows × blocks × 16 bytes) and `…_scales` (experts × rows × blocks). A row is one output feature (gate_up: the gate's
and the up projection's interleaved, gate first); its blocks run along the inputs, 32 FP4 e2m1 values each, two per
byte, the even value in the low nibble, and one e8m0 scale byte per block, 2^(byte − 127). transformers dequantizes
them (`convert_moe_packed_tensors`) to its parameter layout, experts × in × out, which is what a key reads as here.

An expert is dequantized only when asked for (a token first uses it): its bytes are repacked into ggml's block_mxfp4
(the scale byte, then value j in the low nibble and j + 16 in the high one, as llama.cpp's converter repacks them for
a GGUF file) and decoded by the GGUF path's MXFP4 dequantization (gguf-py), so both formats share one decoder; the
weights browser's block under the cursor (`Quantisation`) is repacked the same way, one row, and read by the GGUF
path's block reader (gguf_blocks.block_of).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from engine.causes import Cause, cause
from engine.hooks import Hook
from engine.layers import hf_fused_experts, routed_expert, routed_name
from engine.loading.document import ScenarioError
from engine.parameters import format_shape, parameter_shapes
from engine.spec import ModelSpec

BLOCK, PACKED = 32, 16  # values per block, bytes of values per block


def check_config(config: dict, file: Path) -> None:
    """A quantized checkpoint is read only as gpt-oss with MXFP4 experts: anything else is refused by its key."""
    table = config.get("quantization_config")
    if table is None:
        return
    method = table.get("quant_method") if isinstance(table, dict) else None
    if not isinstance(table, dict) or not isinstance(method, str):
        raise ScenarioError(str(file), None, "quantization_config.quant_method", cause("hf.quant_method", table=table))
    if method != "mxfp4" or config.get("model_type") != "gpt_oss":
        raise ScenarioError(str(file), None, "quantization_config.quant_method",
                            cause("hf.quant_unsupported", method=method))


class Packed:
    """A folder's MXFP4 expert tensors, read through `tensors` (engine.loading.hf.Tensors: `find(key)`, `load(key)`).
    The last expert dequantized is kept: its gate and up projections are one tensor, asked for twice in a row."""

    def __init__(self, tensors):
        self.tensors = tensors
        self._last: tuple[tuple[str, int | None], np.ndarray] | None = None

    def holds(self, key: str) -> bool:
        """Whether `key` is stored as MXFP4: no tensor of that name, its `_blocks` instead."""
        return self.tensors.find(key) is None and self.tensors.find(f"{key}_blocks") is not None

    def shape(self, key: str, expert: int | None) -> tuple[int, ...]:
        """What `load(key, expert)` gives: (experts ×) inputs × rows."""
        experts, rows, blocks, _ = self.tensors.find(f"{key}_blocks")[2]["shape"]
        return (blocks * BLOCK, rows) if expert is not None else (experts, blocks * BLOCK, rows)

    def load(self, key: str, expert: int | None) -> np.ndarray:
        """One expert's (or every expert's) matrix, dequantized to float32 (MXFP4 values are exact in it)."""
        from gguf import GGMLQuantizationType  # here: opening a scenario file loads no checkpoint library

        from engine.loading.gguf_blocks import dequantize_into

        if self._last is not None and self._last[0] == (key, expert):
            return self._last[1]
        blocks, scales = (self.tensors.load(f"{key}{suffix}") for suffix in ("_blocks", "_scales"))
        if expert is not None:  # a view: only this expert's bytes are read from the map
            blocks, scales = blocks[expert], scales[expert]
        rows = ggml_blocks(blocks, scales)
        out = dequantize_into(rows.reshape(-1, rows.shape[-2] * rows.shape[-1]), GGMLQuantizationType.MXFP4,
                              np.empty((*blocks.shape[:-2], blocks.shape[-2] * BLOCK), np.float32))
        self._last = ((key, expert), np.swapaxes(out, -1, -2))
        return self._last[1]

    def stored(self) -> bool:
        """Whether the folder holds any MXFP4 pair."""
        return any(name.endswith("_blocks") for name in self.tensors.files)

    def block(self, key: str, expert: int, row: int, column: int):
        """The MXFP4 block (gguf_blocks.EncodedBlock) holding `key`'s value of `expert` at output `row`, input `column`:
        that row's bytes only, repacked as ggml's."""
        from gguf import GGMLQuantizationType  # here: opening a scenario file loads no checkpoint library

        from engine.loading.gguf_blocks import block_of

        _, name, entry = self.tensors.find(f"{key}_blocks")
        blocks, scales = (self.tensors.load(f"{key}{suffix}")[expert, row] for suffix in ("_blocks", "_scales"))
        found = block_of(name, GGMLQuantizationType.MXFP4, ggml_blocks(blocks, scales).reshape(1, -1), 0, column)
        return replace(found, row=expert * entry["shape"][1] + row)

    def check(self, spec: ModelSpec) -> None:
        """Every MXFP4 pair a parameter is read from: uint8 blocks and scales, each with the other, of the shape the
        config's parameters need (the experts × rows × inputs that their last cells lie in, by `_locate`)."""
        if not self.stored():
            return
        extents: dict[str, tuple[int, ...]] = {}
        for name, shape in parameter_shapes(spec, 0).items():  # (the vocabulary's size changes no expert's)
            found = Quantisation(self)._locate(name, tuple(n - 1 for n in shape))
            if found is not None:
                key, *last = found
                extents[key] = tuple(max(n, at + 1) for n, at in zip(extents.get(key, (0, 0, 0)), last))
        for key, (experts, rows, inputs) in extents.items():
            self._check_pair(key, (experts, rows), inputs)

    def _check_pair(self, key: str, leading: tuple[int, int], inputs: int) -> None:
        file, name, entry = self.tensors.find(f"{key}_blocks")
        if inputs % BLOCK:
            raise ScenarioError(str(file), None, name, cause("hf.packed_rows", inputs=inputs, block=BLOCK))
        expected = (*leading, inputs // BLOCK)
        _expect(file, name, entry, (*expected, PACKED), cause("hf.packed_blocks", block=BLOCK, packed=PACKED))
        scales = self.tensors.find(f"{key}_scales")
        if scales is None:
            raise ScenarioError(str(file), None, f"{name[:-len('_blocks')]}_scales", cause("hf.packed_scales"))
        _expect(*scales, expected, cause("hf.packed_scale_bytes"))


class Quantisation:
    """How a folder with MXFP4 experts stores each engine parameter (LazyWeights.quantisation, as a GGUF file's
    gguf_model.Quantisation): an expert's w_gate, w_up (the even and odd rows of gate_up_proj) and w_down are MXFP4,
    every other parameter unquantized (None)."""

    def __init__(self, packed: Packed):
        self.packed = packed

    def kind(self, name: str) -> str | None:
        return "MXFP4" if self._locate(name, (0, 0)) is not None else None

    def block(self, name: str, index: tuple[int, ...]):
        found = self._locate(name, index)
        return None if found is None else self.packed.block(*found)

    def _locate(self, name: str, index: tuple[int, ...]) -> tuple[str, int, int, int] | None:
        """(key, expert, row, column) of parameter `name`'s value at `index` ([in, out]) in an MXFP4 pair, or None:
        a routed expert's matrix in the tensor its kind reads it from, fused (engine.layers.hf_fused_experts)."""
        parameter = Hook.parse(name)  # blocks.L.mlp.experts.E.w_gate
        expert = routed_expert(parameter)
        if expert is None or len(index) != 2:
            return None
        fused = hf_fused_experts().get(routed_name(parameter))
        if fused is None:
            return None
        tensor, first, step = fused
        key = f"layers.{parameter.layer}.{tensor}"
        if not self.packed.holds(key):
            return None
        column, out = index
        return key, expert, first + step * out, column


def _expect(file: Path, name: str, entry: dict, shape: tuple[int, ...], meaning: Cause) -> None:
    if entry["dtype"] != "U8" or tuple(entry["shape"]) != shape:
        raise ScenarioError(str(file), None, name, cause("hf.packed_entry", shape=format_shape(shape), meaning=meaning,
                                                         dtype=entry["dtype"], got=format_shape(entry['shape'])))


def ggml_blocks(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Hugging Face MXFP4 (… × 16 bytes: value 2j low, 2j + 1 high; the scales beside them) as ggml's block_mxfp4
    (… × 17 bytes: the scale, then value j low and j + 16 high)."""
    values = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], BLOCK)
    return np.concatenate([scales[..., None], values[..., :PACKED] | values[..., PACKED:] << 4], axis=-1)
