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

from engine.loading.document import ScenarioError

VERSIONS = (2, 3)
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32
MAX_NESTING = 8  # arrays of arrays: real files nest none; Python's recursion would end near 500
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
SMALLEST = {"metadata field": 8 + 4 + 1, "tensor info": 8 + 4 + 4 + 8}  # bytes each takes at the least


class Damage(Exception):
    def __init__(self, where: str, message: str):
        super().__init__(message)
        self.where, self.message = where, message


class _Reader:
    """Reads the file front to back; every read names what it reads, for the message when it cannot."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, size: int, where: str) -> bytes:
        if self.at + size > len(self.data):
            raise Damage(where, f"expected {size} bytes at byte {self.at}, the file ends at byte {len(self.data)} "
                         f"(truncated?)")
        self.at += size
        return self.data[self.at - size : self.at]

    def scalar(self, kind: int, where: str):
        fmt = SCALARS[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), where))[0]

    def string(self, where: str) -> str:
        size = self.scalar(10, f"{where} (its length)")
        raw = self.take(size, f"{where} (a string of {size} bytes)")
        return raw.decode("utf-8", errors="replace")

    def count(self, what: str, where: str, smallest: int) -> int:
        """A count the file claims, checked against what the rest of the file could hold."""
        count = self.scalar(10, where)
        room = (len(self.data) - self.at) // smallest
        if count > room:
            raise Damage(where, f"the file claims {count} {what}s, but its remaining {len(self.data) - self.at} "
                         f"bytes hold at most {room} (truncated, or a damaged count?)")
        return count

    def value(self, kind: int, where: str, depth: int = 0):
        if kind in SCALARS:
            return self.scalar(kind, where)
        if kind == STRING:
            return self.string(where)
        if kind == ARRAY:
            if depth == MAX_NESTING:
                raise Damage(where, f"arrays nested more than {MAX_NESTING} deep")
            item = self.scalar(4, f"{where} (its item type)")
            if item not in SCALARS and item not in (STRING, ARRAY):
                raise Damage(where, f"expected an item type 0..12, the file holds {item}")
            smallest = struct.calcsize(SCALARS[item]) if item in SCALARS else 8
            for i in range(self.count("item", f"{where} (its length)", smallest)):
                self.value(item, f"{where}[{i}]", depth + 1)
            return None
        raise Damage(where, f"expected a value type 0..12, the file holds {kind}")


def alignment_problem(alignment) -> str:
    """What is wrong with a `general.alignment` value ("" if nothing): llama.cpp takes only powers of two."""
    if isinstance(alignment, bool) or not isinstance(alignment, int):
        held = repr(alignment) if isinstance(alignment, (str, float, bool)) else "an array"
        return f"expected an integer, a power of two, got {held}"
    if alignment < 1 or alignment & (alignment - 1):
        return f"expected a power of two, got {alignment}"
    return ""


def gguf_damage(path: str | Path) -> ScenarioError | None:
    """The first thing wrong with the GGUF file at `path`, as a ScenarioError; None if its layout is sound."""
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _walk(_Reader(data))
    except Damage as damage:
        return ScenarioError(str(path), None, damage.where, damage.message)
    except (OSError, ValueError) as error:  # unreadable, or empty (mmap refuses a 0-byte file)
        return ScenarioError(str(path), None, "", f"cannot read the file ({error})")
    return None


def _walk(reader: _Reader) -> None:
    magic = reader.take(4, "header.magic")
    if magic != b"GGUF":
        raise Damage("header.magic", f"expected the bytes 'GGUF', the file starts with {bytes(magic)!r}")
    version = reader.scalar(4, "header.version")
    if version not in VERSIONS:
        raise Damage("header.version", f"expected version {' or '.join(map(str, VERSIONS))}, the file holds {version}")
    tensors = reader.scalar(10, "header.tensor_count")
    fields = reader.count("metadata field", "header.kv_count", SMALLEST["metadata field"])
    alignment = DEFAULT_ALIGNMENT
    for i in range(fields):
        key = reader.string(f"metadata[{i}].key")
        value = reader.value(reader.scalar(4, f"{key} (its type)"), key)
        if key == "general.alignment":
            if alignment_problem(value):
                raise Damage(key, alignment_problem(value))
            alignment = value
    if tensors * SMALLEST["tensor info"] > len(reader.data) - reader.at:
        raise Damage("header.tensor_count", f"the file claims {tensors} tensors, but its remaining "
                     f"{len(reader.data) - reader.at} bytes hold the infos of at most "
                     f"{(len(reader.data) - reader.at) // SMALLEST['tensor info']}")
    infos = [_tensor_info(reader, i) for i in range(tensors)]
    start = -(-reader.at // alignment) * alignment
    for name, dims, kind, offset in infos:
        _check_extent(name, dims, kind, start + offset, len(reader.data))


def _tensor_info(reader: _Reader, index: int) -> tuple[str, list[int], GGMLQuantizationType, int]:
    name = reader.string(f"tensor[{index}].name")
    n_dims = reader.scalar(4, f"tensor {name} (its number of dimensions)")
    if not 1 <= n_dims <= MAX_DIMS:
        raise Damage(f"tensor {name}", f"expected 1..{MAX_DIMS} dimensions, the file holds {n_dims}")
    dims = [reader.scalar(10, f"tensor {name} (dimension {d})") for d in range(n_dims)]
    code = reader.scalar(4, f"tensor {name} (its type)")
    try:
        kind = GGMLQuantizationType(code)
    except ValueError:
        raise Damage(f"tensor {name}", f"expected a ggml type, the file holds type code {code}") from None
    return name, dims, kind, reader.scalar(10, f"tensor {name} (its offset)")


def _check_extent(name: str, dims: list[int], kind: GGMLQuantizationType, start: int, size: int) -> None:
    block, block_bytes = GGML_QUANT_SIZES[kind]
    count = math.prod(dims)
    shape = "×".join(map(str, dims))
    if count % block:
        raise Damage(f"tensor {name}", f"{shape} = {count} numbers are not whole {kind.name} blocks of {block}")
    need = count // block * block_bytes
    if start + need > size:
        held = max(size - start, 0)
        raise Damage(f"tensor {name}", f"expected {need} bytes ({kind.name} {shape}) from byte {start}, the file holds "
                     f"{held} there (it ends at byte {size}: truncated?)")
