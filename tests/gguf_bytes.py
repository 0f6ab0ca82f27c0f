"""GGUF files as editable structures, for tests and the loader fuzzer.

`parse(data)` splits a file into its header fields, metadata, tensor infos and data; `serialize` writes
it back byte for byte (an unedited parse round-trips exactly). Written from the format's description,
with `struct` alone, so it shares nothing with the reader under test:

    magic "GGUF" · version u32 · tensor count u64 · metadata count u64
    · metadata (key string, type u32, value)… · tensor infos (name, n_dims u32, dims u64…, type u32, offset u64)…
    · padding to general.alignment · tensor data

A value is a Python int/float/bool/str for a scalar or string, and `Array(item_type, items)` for an
array; `Raw(bytes)` stands for bytes written as they are, where a test wants a value no writer makes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = 4, 5, 6, 7, 8, 9, 10, 11, 12


@dataclass
class Array:
    item: int
    items: list


@dataclass
class Raw:
    data: bytes


@dataclass
class Tensor:
    name: str | bytes
    dims: list[int]  # GGUF order: the fastest-varying dimension first
    kind: int
    offset: int  # from the start of the data section


@dataclass
class Gguf:
    fields: list[tuple[str | bytes, int, object]]  # (key, value type, value)
    tensors: list[Tensor]
    data: bytes
    version: int = 3
    counts: tuple[int | None, int | None] = (None, None)  # (tensors, fields) as the header claims; None: the true ones
    alignment: int = 32  # the padding written before the data
    extra: bytes = field(default=b"")  # written between the tensor infos and the padding

    def get(self, key: str):
        return next(value for name, _, value in self.fields if name == key)

    def set(self, key: str, kind: int, value) -> None:
        """Replace the key's value (keeping its place), or add it at the end."""
        for i, (name, _, _) in enumerate(self.fields):
            if name == key:
                self.fields[i] = (key, kind, value)
                return
        self.fields.append((key, kind, value))

    def drop(self, key: str) -> None:
        self.fields = [f for f in self.fields if f[0] != key]


def parse(data: bytes) -> Gguf:
    reader = _Reader(data)
    assert reader.take(4) == b"GGUF"
    version, n_tensors, n_fields = reader.unpack("<I"), reader.unpack("<Q"), reader.unpack("<Q")
    fields = []
    for _ in range(n_fields):
        key, kind = reader.string(), reader.unpack("<I")
        fields.append((key, kind, reader.value(kind)))
    tensors = []
    for _ in range(n_tensors):
        name, n_dims = reader.string(), reader.unpack("<I")
        dims = [reader.unpack("<Q") for _ in range(n_dims)]
        tensors.append(Tensor(name, dims, reader.unpack("<I"), reader.unpack("<Q")))
    alignment = next((value for key, _, value in fields if key == "general.alignment"), 32)
    start = -(-reader.at // alignment) * alignment
    return Gguf(fields, tensors, data[start:], version, alignment=alignment)


def serialize(gguf: Gguf) -> bytes:
    n_tensors, n_fields = (claimed if claimed is not None else len(real) for claimed, real in
                           zip(gguf.counts, (gguf.tensors, gguf.fields)))
    out = bytearray(b"GGUF" + struct.pack("<IQQ", gguf.version, n_tensors, n_fields))
    for key, kind, value in gguf.fields:
        out += _string(key) + struct.pack("<I", kind) + _value(kind, value)
    for tensor in gguf.tensors:
        out += _string(tensor.name) + struct.pack("<I", len(tensor.dims))
        out += b"".join(struct.pack("<Q", d) for d in tensor.dims) + struct.pack("<IQ", tensor.kind, tensor.offset)
    out += gguf.extra
    out += b"\0" * (-len(out) % gguf.alignment)
    return bytes(out + gguf.data)


def _string(text: str | bytes) -> bytes:
    raw = text.encode("utf-8", errors="surrogateescape") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _value(kind: int, value) -> bytes:
    if isinstance(value, Raw):
        return value.data
    if kind == STRING:
        return _string(value)
    if kind == ARRAY:
        return struct.pack("<IQ", value.item, len(value.items)) + b"".join(_value(value.item, v) for v in value.items)
    return struct.pack(SCALARS[kind], value)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        self.at += size
        return self.data[self.at - size:self.at]

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", errors="surrogateescape")

    def value(self, kind: int):
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            return Array(item, [self.value(item) for _ in range(count)])
        return self.unpack(SCALARS[kind])
