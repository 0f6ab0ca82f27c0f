"""A GGUF file's metadata and tensor table, read straight from a memory map.

gguf-py's GGUFReader builds several Python objects per metadata array entry (3.7 s for a
49 152-token vocabulary, up to 10 s at 151 936); this reader decodes string arrays in one loop
into plain `str`s and number arrays as NumPy views of the map, and leaves every tensor's bytes
in the map until `tensor_bytes` is asked for them. Layout (little-endian): magic `GGUF`, version,
tensor count, key/value count; each key/value; each tensor's name, dims, type and offset; then,
aligned to `general.alignment`, the tensor data.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from engine.causes import Cause, cause
from engine.loading.gguf_checks import MAX_NESTING, alignment_problem


class LayoutError(ValueError):
    """The file is not a sound GGUF (at `key`); engine.loading.gguf_checks then says more precisely
    where a truncated or damaged layout goes wrong."""

    def __init__(self, key: str, message: Cause):
        super().__init__(f"{key}: {message}" if key else str(message))
        self.key, self.message = key, message


SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
U32, U64 = struct.Struct("<I"), struct.Struct("<Q")
MAX_DIMS = 4


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # NumPy order: rows first, the GGUF dims reversed
    kind: GGMLQuantizationType
    offset: int  # from the start of the file
    nbytes: int


class GGUFFile:
    """`meta` (key -> int, float, bool, str, list of str or a NumPy array) and `tensors` (name -> TensorInfo)."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as file:
            self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        self._pos = 4
        if self._map[:4] != b"GGUF":
            raise self.error("", cause("gguf.not_gguf"))
        version = self._read(U32)
        if version not in (2, 3):
            raise self.error("", cause("gguf.unsupported_version", version=version))
        n_tensors, n_keys = self._read(U64), self._read(U64)
        self.meta: dict[str, object] = {}
        for _ in range(n_keys):
            key = self._string("metadata key")
            if key in self.meta:
                raise self.error(key, cause("gguf.key_twice"))
            self.meta[key] = self._value(self._read(U32, key), key)
        infos = [self._tensor_info() for _ in range(n_tensors)]
        alignment = self.meta.get("general.alignment", 32)
        if alignment_problem(alignment):
            raise self.error("general.alignment", alignment_problem(alignment))
        start = -(-self._pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, kind, offset in infos:
            if name in self.tensors:
                raise self.error(f"tensor {name}", cause("gguf.tensor_twice"))
            if offset % alignment:
                raise self.error(f"tensor {name}", cause("gguf.offset_alignment", offset=offset, alignment=alignment))
            self.tensors[name] = self._place(name, shape, kind, start + offset)
        self._check_overlaps()

    def error(self, key: str, message: Cause) -> LayoutError:
        return LayoutError(key, message)

    def tensor_bytes(self, info: TensorInfo) -> np.ndarray:
        """The tensor's raw bytes as uint8 rows (rows, bytes per row): a read-only view of the map."""
        data = np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.offset)
        return data.reshape(*info.shape[:-1], -1) if info.shape else data

    # -- parsing -----------------------------------------------------------------------------
    def _take(self, size: int, what: str) -> int:
        start = self._pos
        if size < 0 or start + size > len(self._map):
            raise self.error(what, cause("gguf.header_cut"))
        self._pos += size
        return start

    def _read(self, form: struct.Struct, what: str = ""):
        return form.unpack_from(self._map, self._take(form.size, what))[0]

    def _string(self, what: str = "") -> str:
        size = self._read(U64, what)
        start = self._take(size, what)
        return self._map[start:start + size].decode("utf-8", errors="replace")

    def _value(self, kind: int, key: str, depth: int = 0):
        if kind == STRING:
            return self._string(key)
        if kind in SCALARS:
            form = struct.Struct(SCALARS[kind])
            return self._read(form, key)
        if kind != ARRAY:
            raise self.error(key, cause("gguf.unknown_value_type", kind=kind))
        if depth == MAX_NESTING:
            raise self.error(key, cause("gguf.nested", limit=MAX_NESTING))
        item, count = self._read(U32, key), self._read(U64, key)
        if item == STRING:
            return self._strings(count, key)
        if item in SCALARS:
            dtype = np.dtype(SCALARS[item])
            start = self._take(count * dtype.itemsize, key)
            return np.frombuffer(self._map, dtype=dtype, count=count, offset=start)
        self._room(count, 12, key)  # an array item takes at least its type and count
        return [self._value(item, key, depth + 1) for _ in range(count)]

    def _room(self, count: int, smallest: int, key: str) -> None:
        """Refuse a count of items the rest of the file cannot hold, before anything is made for them."""
        room = (len(self._map) - self._pos) // smallest
        if count > room:
            raise self.error(key, cause("gguf.claims", count=count, remaining=len(self._map) - self._pos, room=room))

    def _strings(self, count: int, key: str) -> list[str]:
        """One tight loop over length-prefixed strings: no object but the `str` per entry."""
        self._room(count, 8, key)  # each string takes at least its 8-byte length
        data, pos, end, size_of = self._map, self._pos, len(self._map), U64.unpack_from
        out = [""] * count
        for i in range(count):
            if pos + 8 > end:
                raise self.error(key, cause("gguf.array_cut"))
            size = size_of(data, pos)[0]
            pos += 8
            out[i] = data[pos:pos + size].decode("utf-8", errors="replace")
            pos += size
        if pos > end:
            raise self.error(key, cause("gguf.array_cut"))
        self._pos = pos
        return out

    def _tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self._string("tensor table")
        n_dims = self._read(U32, name)
        if n_dims > MAX_DIMS:
            raise self.error(name, cause("gguf.too_many_dims", n_dims=n_dims, limit=MAX_DIMS))
        dims = [self._read(U64, name) for _ in range(n_dims)]
        kind, offset = self._read(U32, name), self._read(U64, name)
        return name, tuple(reversed(dims)), kind, offset

    def _place(self, name: str, shape: tuple[int, ...], kind: int, offset: int) -> TensorInfo:
        try:
            kind = GGMLQuantizationType(kind)
        except ValueError:
            raise self.error(name, cause("gguf.unknown_tensor_type", kind=kind)) from None
        block, size = GGML_QUANT_SIZES[kind]
        row = shape[-1] if shape else 1
        if row % block:
            raise self.error(name, cause("gguf.rows_blocks", row=row, name=kind.name, block=block))
        nbytes = math.prod(shape[:-1]) * (row // block) * size  # Python ints: dims claimed near 2^64 do not wrap
        if offset + nbytes > len(self._map):
            raise self.error(name, cause("gguf.past_end", nbytes=nbytes, offset=offset, size=len(self._map)))
        return TensorInfo(name, shape, kind, offset, nbytes)

    def _check_overlaps(self) -> None:
        """Two tensors sharing bytes would read each other's data (garbage, or NaN from scales)."""
        placed = sorted((info for info in self.tensors.values() if info.nbytes), key=lambda info: info.offset)
        for before, after in zip(placed, placed[1:]):
            if after.offset < before.offset + before.nbytes:
                raise self.error(f"tensor {after.name}", cause("gguf.overlap", start=after.offset, name=before.name,
                                                               first=before.offset,
                                                               last=before.offset + before.nbytes - 1))
