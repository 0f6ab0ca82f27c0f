"""Weights in a binary file that a scenario names: `weights: {file: model.safetensors}` (or .npz).

Parameter names are the scenario's own (`blocks.0.attn.wq`, matrices [in, out]). safetensors
files are checked with the `safetensors` library and their tensors memory-mapped read-only
(an edit copies the one array it changes); npz files are read with `allow_pickle=False`.
Every problem is one ScenarioError naming the weight file and the tensor.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.causes import Cause, cause
from engine.loading.document import ScenarioError, joined, library_text
from engine.parameters import Shape, format_shape
from engine.progress import WEIGHTS, report

SUFFIXES = (".safetensors", ".npz")
SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}  # bf16: read as bits, widened
SAMPLE = 1 << 16  # bytes at each end of the file that go into its identity
ITEMSIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
             "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}  # the safetensors format's dtypes
MAX_HEADER = 100 << 20  # the safetensors library's own limit on a header's size


@dataclass(frozen=True)
class WeightSource:
    """Where a scenario's weights came from: arrays identical (`is`) to `arrays` are unedited."""

    file: Path
    identity: str  # hash of size, mtime and the file's first and last bytes, not of every byte
    arrays: dict[str, np.ndarray]


def read_weights(path: Path, shapes: dict[str, Shape]) -> WeightSource:
    """Every parameter of `shapes` from `path`, checked for presence, floating dtype and shape."""
    if path.suffix not in SUFFIXES:
        raise ScenarioError(str(path), None, "", cause("weightfile.suffix", suffixes=joined(SUFFIXES, "doc.or")))
    read = _read_safetensors if path.suffix == ".safetensors" else _read_npz
    try:
        arrays = read(path, shapes)
        identity = file_identity(path)
    except OSError as error:
        raise ScenarioError(str(path), None, "", cause("doc.unreadable", why=error.strerror or str(error))) from None
    return WeightSource(path, identity, arrays)


def file_identity(path: Path) -> str:
    info = path.stat()
    digest = hashlib.sha256(f"{info.st_size}:{info.st_mtime_ns}".encode())
    with path.open("rb") as file:
        digest.update(file.read(SAMPLE))
        file.seek(max(0, info.st_size - SAMPLE))
        digest.update(file.read(SAMPLE))
    return digest.hexdigest()


def _check_names(path: Path, names: list[str], shapes: dict[str, Shape]) -> None:
    missing = [name for name in shapes if name not in names]
    if missing:
        why = cause("weightfile.missing_more",
                    more=len(missing) - 1) if len(missing) > 1 else cause("weightfile.missing")
        raise ScenarioError(str(path), None, missing[0], why)
    extra = [name for name in names if name not in shapes]
    if extra:
        raise ScenarioError(str(path), None, extra[0], cause("weightfile.extra", count=len(shapes),
                                                                  like=next(iter(shapes))))


def _not_float(path: Path, name: str, kind: str) -> ScenarioError:
    return ScenarioError(str(path), None, name, cause("weightfile.not_float", kind=kind))


def _check_shape(path: Path, name: str, shape: Shape, expected: Shape) -> None:
    if tuple(shape) != expected:
        raise ScenarioError(str(path), None, name, cause("scenario.tensor_shape", expected=format_shape(expected),
                                                         got=format_shape(shape)))


def _read_safetensors(path: Path, shapes: dict[str, Shape]) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError, safe_open  # loads only for a .safetensors file (the X01 start has none)

    try:
        with safe_open(str(path), framework="numpy") as file:  # validates the header and the offsets
            names = list(file.keys())
            _check_names(path, names, shapes)
            for name in names:
                tensor = file.get_slice(name)
                kind = tensor.get_dtype()
                if kind not in SAFETENSORS_DTYPES:
                    raise _not_float(path, name, kind)
                _check_shape(path, name, tensor.get_shape(), shapes[name])
    except SafetensorError as error:
        raise safetensors_refusal(path, error) from None
    return map_safetensors(path, shapes)


def safetensors_refusal(path: Path, error: Exception) -> ScenarioError:
    """Why `safetensors` refused the file: the header entry at fault, named, or else the library's own words."""
    return safetensors_damage(path) or ScenarioError(str(path), None, "", cause("weightfile.unreadable",
                                                                                   why=library_text(error)))


def safetensors_damage(path: Path) -> ScenarioError | None:
    """The first thing wrong with a safetensors file's header, naming the tensor; None if it looks sound.
    Layout: an 8-byte little-endian header length, a JSON object {name: {dtype, shape, data_offsets}}, the data."""
    size = path.stat().st_size
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little") if size >= 8 else None
        if length is None:
            return ScenarioError(str(path), None, "header", cause("weightfile.header_length", size=size))
        if length > MAX_HEADER:
            return ScenarioError(str(path), None, "header", cause("weightfile.header_big", length=length,
                                                                           mib=MAX_HEADER >> 20))
        if length > size - 8:
            return ScenarioError(str(path), None, "header", cause("weightfile.header_cut", length=length,
                                                                           size=size - 8))
        try:
            header = json.loads(file.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            return ScenarioError(str(path), None, "header", cause("weightfile.not_json_why",
                                                                  why=str(error)))  # json's words
    if not isinstance(header, dict):
        return ScenarioError(str(path), None, "header", cause("weightfile.not_json"))
    entries = [(name, entry) for name, entry in header.items() if name != "__metadata__"]
    for name, entry in entries:
        problem = _entry_problem(entry, size - 8 - length)
        if problem:
            return ScenarioError(str(path), None, name, problem)
    spans = sorted((entry["data_offsets"], name) for name, entry in entries)
    end = 0
    for (begin, stop), name in spans:
        if begin != end:
            gap = cause("weightfile.gap", begin=begin, end=end) if end else cause("weightfile.gap_start", begin=begin)
            return ScenarioError(str(path), None, name, gap)
        end = stop
    return None


def _entry_problem(entry, room: int) -> Cause | None:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        return cause("weightfile.entry")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ITEMSIZES:
        return cause("weightfile.dtype", dtype=dtype)
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        return cause("weightfile.shape", shape=shape)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        return cause("weightfile.offsets", offsets=offsets)
    need = math.prod(shape) * ITEMSIZES[dtype]
    if offsets[1] - offsets[0] != need:
        return cause("weightfile.span", dtype=dtype, shape=format_shape(shape), need=need, offsets=offsets,
                     span=offsets[1] - offsets[0])
    if offsets[1] > room:
        return cause("weightfile.data_cut", end=offsets[1], room=room)
    return None


def widen_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 numbers read as their 16 bits, as float32: NumPy has no bfloat16, whose bits are a float32's top half."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def safetensors_header(path: Path) -> tuple[int, dict]:
    """Where the data starts and each tensor's entry, from a file `safetensors` has validated; a tensor
    listed twice (JSON allows it, the library keeps one of them without a word) is refused."""
    def refuse_duplicates(pairs: list[tuple[str, object]]) -> dict:
        entries = dict(pairs)
        if len(entries) < len(pairs):
            seen: set[str] = set()
            twice = next(name for name, _ in pairs if name in seen or seen.add(name))
            raise ScenarioError(str(path), None, twice, cause("weightfile.twice"))
        return entries

    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        return 8 + length, json.loads(file.read(length), object_pairs_hook=refuse_duplicates)


def map_safetensors(path: Path, shapes: dict[str, Shape]) -> dict[str, np.ndarray]:
    """Read-only views into one memory map of the (already validated) file."""
    start, header = safetensors_header(path)
    data = np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))  # plain ndarray views of the map
    arrays = {}
    for name, shape in shapes.items():
        entry = header[name]
        begin, end = (start + offset for offset in entry["data_offsets"])
        array = data[begin:end].view(SAFETENSORS_DTYPES[entry["dtype"]]).reshape(shape)
        arrays[name] = widen_bf16(array) if entry["dtype"] == "BF16" else array
    return arrays


def _read_npz(path: Path, shapes: dict[str, Shape]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            _check_names(path, names, shapes)
            for name in shapes:
                _check_npy_header(path, archive.zip, name, shapes[name])
            arrays = {}
            for done, name in enumerate(shapes, 1):  # inflated one by one: a big archive takes seconds
                arrays[name] = archive[name]
                report(WEIGHTS, done, len(shapes))
    except ScenarioError:
        raise
    except (ValueError, KeyError, zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise ScenarioError(str(path), None, "", cause("weightfile.npz", why=str(error))) from None
    return arrays


def _check_npy_header(path: Path, archive: zipfile.ZipFile, name: str, expected: Shape) -> None:
    """dtype and shape from a member's header, before NumPy reserves the memory that shape claims."""
    with archive.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(member)
    if not np.issubdtype(dtype, np.floating):
        raise _not_float(path, name, str(dtype))
    _check_shape(path, name, shape, expected)


# -- writing -----------------------------------------------------------------------------------
def write_weights(weights: dict[str, np.ndarray], path: Path) -> Path:
    """Write every array to `path` (.safetensors or .npz, by its suffix), atomically."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ScenarioError(str(path), None, "", cause("weightfile.name", suffixes=joined(SUFFIXES, "doc.or")))
    arrays = {name: np.ascontiguousarray(array) for name, array in weights.items()}
    if path.suffix == ".safetensors":
        from safetensors.numpy import save_file

        return atomic_write(path, lambda temporary: save_file(arrays, str(temporary)))
    return atomic_write(path, lambda temporary: np.savez(temporary, **arrays))


def atomic_write(target: Path, write: Callable[[Path], object]) -> Path:
    """Let `write` fill a temporary file in the target's folder, then rename it over the target."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, target.stat().st_mode if target.exists() else 0o644)  # mkstemp makes 0600
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
