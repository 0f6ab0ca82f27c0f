"""Reading and writing dumps of activations (.safetensors or .npz), in the layout of engine.layout.

NumPy has no bfloat16: a BF16 tensor of a safetensors file is read as its bits widened to float32,
and its dtype is remembered as "bfloat16" so that the comparison allows for its precision. An
ml_dtypes bfloat16 array is written as BF16 (safetensors knows it by its dtype name).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.causes import Cause, cause
from engine.layout import Key, parse_key
from engine.loading.document import ScenarioError
from engine.loading.weightfile import map_safetensors  # widens raw BF16 bits, as the weight loader does

SUFFIXES = (".safetensors", ".npz")
LLAMA_CPP = "llama.cpp:"  # the path of a dump made by llama.cpp's evaluation of the GGUF file after it


@dataclass(frozen=True)
class Dump:
    """A dump's arrays keyed by (request, pass, hook name), with the dtype each was stored in."""

    path: str
    arrays: dict[Key, np.ndarray]
    dtypes: dict[Key, str]

    def get(self, key: Key) -> np.ndarray | None:
        return self.arrays.get(key)

    @property
    def side(self) -> Cause:
        """What it is beside the reference (a front end words it)."""
        return Cause("side.llama_cpp" if self.path.startswith(LLAMA_CPP) else "side.dump")

    @property
    def passes(self) -> set[tuple[int, str]]:
        return {(key.request, key.pass_) for key in self.arrays}

    def new_tokens(self) -> int:
        """How many tokens the dumped run generated: its last decode round's number + 1."""
        rounds = [int(pass_.split(".")[1]) for _, pass_ in self.passes if pass_.startswith("decode.")]
        return max(rounds, default=0) + 1


def load_dump(path: str | Path) -> Dump:
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ScenarioError(str(path), None, "", cause("dump.suffix"))
    try:
        named = _read_npz(path) if path.suffix == ".npz" else _read_safetensors(path)
    except ScenarioError:
        raise
    except Exception as error:  # OSError, zipfile and safetensors errors: all "cannot read it"
        raise ScenarioError(str(path), None, "", cause("dump.unreadable", why=str(error))) from None
    arrays, dtypes = {}, {}
    for text, (array, dtype) in named.items():
        key = parse_key(text)
        if key in arrays:
            raise ScenarioError(str(path), None, text, cause("dump.same_activation", other=key.text()))
        arrays[key], dtypes[key] = array, dtype
    return Dump(str(path), arrays, dtypes)


def _read_npz(path: Path) -> dict[str, tuple[np.ndarray, str]]:
    with np.load(path) as archive:  # allow_pickle stays False
        return {key: _checked(path, key, archive[key], archive[key].dtype.name) for key in archive.files}


def _read_safetensors(path: Path) -> dict[str, tuple[np.ndarray, str]]:
    from safetensors import safe_open  # loads only for a .safetensors dump

    named = {}
    with safe_open(str(path), framework="numpy") as file:
        for key in file.keys():
            kind = file.get_slice(key).get_dtype()
            if kind == "BF16":
                shape = tuple(file.get_slice(key).get_shape())
                named[key] = (map_safetensors(path, {key: shape})[key], "bfloat16")
            else:
                array = file.get_tensor(key)
                named[key] = _checked(path, key, array, array.dtype.name)
    return named


def _checked(path: Path, key: str, array: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    if not np.issubdtype(array.dtype, np.floating) and not np.issubdtype(array.dtype, np.integer):
        raise ScenarioError(str(path), None, key, cause("dump.not_numbers", dtype=str(array.dtype)))
    return array, dtype


def save_dump(arrays: dict[str, np.ndarray], path: str | Path) -> None:
    """Write arrays keyed by their full names (`decode.2.blocks.0.attn.hook_k`) as .safetensors or .npz."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ScenarioError(str(path), None, "", cause("dump.name"))
    if path.suffix == ".npz":
        np.savez(path, **arrays)
        return
    from safetensors.numpy import save_file  # it takes ml_dtypes' bfloat16 by its dtype name

    save_file({name: np.ascontiguousarray(a) for name, a in arrays.items()}, path)  # it writes raw memory
