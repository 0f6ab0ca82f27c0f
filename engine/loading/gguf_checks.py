"""What is wrong with a GGUF file that could not be read: which header field, metadata key or tensor,
what was expected there, and what the file holds.

`gguf_damage(path)` walks the layout with `struct` alone (no array is made from a size the file
claims), so it is cheap enough to run after a read has failed, and the reader stays as fast as it is:

    magic "GGUF" · version · tensor count · metadata count · metadata (key, type, value)…
    · tensor infos (name, dims, type, offset)… · padding to the alignment · tensor data…
"""

from __future__ import annotations

import math
import mmap
import struct
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from engine.causes import Cause, cause
from engine.loading.document import ScenarioError, joined

VERSIONS = (2, 3)
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32
MAX_NESTING = 8  # arrays of arrays: real files nest none; Python's recursion would end near 500
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
SMALLEST = {"metadata field": 8 + 4 + 1, "tensor info": 8 + 4 + 4 + 8}  # bytes each takes at the least


class Damage(Exception):
    def __init__(self, where: str, message: Cause):
        super().__init__(message)
        self.where, self.message = where, message


class _Reader:
    """Reads the file front to back; every read names what it reads, for the message when it cannot."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, size: int, where: str) -> bytes:
        if self.at + size > len(self.data):
            raise Damage(where, cause("gguf.ends", size=size, at=self.at, size_=len(self.data)))
        self.at += size
        return self.data[self.at - size : self.at]

    def scalar(self, kind: int, where: str):
        fmt = SCALARS[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), where))[0]

    def string(self, where: str) -> str:
        size = self.scalar(10, f"{where} (its length)")
        raw = self.take(size, f"{where} (a string of {size} bytes)")
        return raw.decode("utf-8", errors="replace")

    def count(self, what: Cause, where: str, smallest: int) -> int:
        """A count the file claims, checked against what the rest of the file could hold."""
        count = self.scalar(10, where)
        room = (len(self.data) - self.at) // smallest
        if count > room:
            raise Damage(where, cause("gguf.count", count=count, what=what, remaining=len(self.data) - self.at,
                                      room=room))
        return count

    def value(self, kind: int, where: str, depth: int = 0):
        if kind in SCALARS:
            return self.scalar(kind, where)
        if kind == STRING:
            return self.string(where)
        if kind == ARRAY:
            if depth == MAX_NESTING:
                raise Damage(where, cause("gguf.nested", limit=MAX_NESTING))
            item = self.scalar(4, f"{where} (its item type)")
            if item not in SCALARS and item not in (STRING, ARRAY):
                raise Damage(where, cause("gguf.item_type", item=item))
            smallest = struct.calcsize(SCALARS[item]) if item in SCALARS else 8
            for i in range(self.count(cause("gguf.items"), f"{where} (its length)", smallest)):
                self.value(item, f"{where}[{i}]", depth + 1)
            return None
        raise Damage(where, cause("gguf.value_type", kind=kind))


def alignment_problem(alignment) -> Cause | None:
    """What is wrong with a `general.alignment` value (None if nothing): llama.cpp takes only powers of two."""
    if isinstance(alignment, bool) or not isinstance(alignment, int):
        held = repr(alignment) if isinstance(alignment, (str, float, bool)) else cause("gguf.an_array")
        return cause("gguf.alignment_type", held=held)
    if alignment < 1 or alignment & (alignment - 1):
        return cause("gguf.alignment", alignment=alignment)
    return None


def gguf_damage(path: str | Path) -> ScenarioError | None:
    """The first thing wrong with the GGUF file at `path`, as a ScenarioError; None if its layout is sound."""
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _walk(_Reader(data))
    except Damage as damage:
        return ScenarioError(str(path), None, damage.where, damage.message)
    except (OSError, ValueError) as error:  # unreadable, or empty (mmap refuses a 0-byte file)
        return ScenarioError(str(path), None, "", cause("gguf.unreadable", why=str(error)))
    return None


def _walk(reader: _Reader) -> None:
    magic = reader.take(4, "header.magic")
    if magic != b"GGUF":
        raise Damage("header.magic", cause("gguf.magic", magic=bytes(magic)))
    version = reader.scalar(4, "header.version")
    if version not in VERSIONS:
        raise Damage("header.version", cause("gguf.version", versions=joined(VERSIONS, "doc.or"), version=version))
    tensors = reader.scalar(10, "header.tensor_count")
    fields = reader.count(cause("gguf.fields"), "header.kv_count", SMALLEST["metadata field"])
    alignment = DEFAULT_ALIGNMENT
    for i in range(fields):
        key = reader.string(f"metadata[{i}].key")
        value = reader.value(reader.scalar(4, f"{key} (its type)"), key)
        if key == "general.alignment":
            if alignment_problem(value):
                raise Damage(key, alignment_problem(value))
            alignment = value
    if tensors * SMALLEST["tensor info"] > len(reader.data) - reader.at:
        raise Damage("header.tensor_count", cause("gguf.tensor_count", tensors=tensors,
                                                  remaining=len(reader.data) - reader.at,
                                                  room=(len(reader.data) - reader.at) // SMALLEST['tensor info']))
    infos = [_tensor_info(reader, i) for i in range(tensors)]
    start = -(-reader.at // alignment) * alignment
    for name, dims, kind, offset in infos:
        _check_extent(name, dims, kind, start + offset, len(reader.data))


def _tensor_info(reader: _Reader, index: int) -> tuple[str, list[int], GGMLQuantizationType, int]:
    name = reader.string(f"tensor[{index}].name")
    n_dims = reader.scalar(4, f"tensor {name} (its number of dimensions)")
    if not 1 <= n_dims <= MAX_DIMS:
        raise Damage(f"tensor {name}", cause("gguf.dims", limit=MAX_DIMS, n_dims=n_dims))
    dims = [reader.scalar(10, f"tensor {name} (dimension {d})") for d in range(n_dims)]
    code = reader.scalar(4, f"tensor {name} (its type)")
    try:
        kind = GGMLQuantizationType(code)
    except ValueError:
        raise Damage(f"tensor {name}", cause("gguf.ggml_type", type_code=code)) from None
    return name, dims, kind, reader.scalar(10, f"tensor {name} (its offset)")


def _check_extent(name: str, dims: list[int], kind: GGMLQuantizationType, start: int, size: int) -> None:
    block, block_bytes = GGML_QUANT_SIZES[kind]
    count = math.prod(dims)
    shape = "×".join(map(str, dims))
    if count % block:
        raise Damage(f"tensor {name}", cause("gguf.blocks", shape=shape, count=count, name=kind.name, block=block))
    need = count // block * block_bytes
    if start + need > size:
        held = max(size - start, 0)
        raise Damage(f"tensor {name}", cause("gguf.extent", need=need, name=kind.name, shape=shape, start=start,
                                             held=held, size=size))
