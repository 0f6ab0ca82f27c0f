"""Weights read from a checkpoint on first use, in the compute dtype, within a memory budget.

`LazyWeights` is a read-only Mapping (parameter name -> array): an array is read (dequantized,
transposed, converted) the first time it is asked for, then kept; past the budget the least
recently used arrays are dropped from the cache (an array still referenced elsewhere, e.g. by a
kept trace, is found again instead of being read twice). `weights | {name: array}` is an edited
copy that shares the cache: only `edited` arrays differ from the file, and a fingerprint needs
only the file's identity plus those. A table read by token id (the embedding) gives its rows alone
(`rows`) until something reads it whole: a 248 320-token table is not dequantized for a 5-token prompt.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from engine.parameters import Shape


RowReader = Callable[[str, np.ndarray], np.ndarray]  # (parameter name, row indices) -> those rows


class WeightCache:
    """The arrays read so far, least recently used first; shared by a file's weights and their edits.
    `read_rows`, where given, reads some rows of the parameters named in `row_tables` without the rest."""

    def __init__(self, read: Callable[[str], np.ndarray], budget: int, read_rows: RowReader | None = None,
                 row_tables: frozenset[str] = frozenset()):
        self.read, self.budget = read, budget
        self.read_rows, self.row_tables = read_rows, row_tables
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()
        self._alive: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()
        self._bytes = 0
        self._lock = threading.Lock()  # the UI thread and a run's worker may both read

    def get(self, name: str) -> np.ndarray:
        with self._lock:
            array = self._kept.get(name)
            if array is not None:
                self._kept.move_to_end(name)
                return array
            array = self._alive.get(name)
            if array is None:
                array = self.read(name)
                array.flags.writeable = False  # shared by every edited copy: an edit copies first
                self._alive[name] = array
            self._kept[name] = array
            self._bytes += array.nbytes
            while self._bytes > self.budget and len(self._kept) > 1:
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= dropped.nbytes
            return array

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of the parameter: from its whole array once that is read (or still alive), else read alone
        (not kept: a prompt's few rows cost less to read again than to track)."""
        with self._lock:
            whole = self._kept.get(name)
            whole = self._alive.get(name) if whole is None else whole
        if whole is not None or self.read_rows is None or name not in self.row_tables:
            return np.take(self.get(name) if whole is None else whole, ids, axis=0)
        return self.read_rows(name, ids)

    def kept(self) -> list[str]:
        """Names of the cached arrays, least recently used first."""
        return list(self._kept)


class LazyWeights(Mapping):
    """`quantisation`, for a GGUF file, tells each parameter's tensor type and the block behind a value
    (engine.loading.gguf_model.Quantisation; a folder with MXFP4 experts: hf_mxfp4.Quantisation); None otherwise."""

    def __init__(self, shapes: dict[str, Shape], cache: WeightCache, identity: str,
                 edited: dict[str, np.ndarray] | None = None, quantisation: Any = None):
        self.shapes, self.cache, self.identity = shapes, cache, identity
        self.edited = edited or {}
        self.quantisation = quantisation

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.edited:
            return self.edited[name]
        if name not in self.shapes:
            raise KeyError(name)
        return self.cache.get(name)

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of parameter `name` (the same numbers as `self[name][ids]`), reading no more than those
        where the file allows it."""
        if name in self.edited:
            return np.take(self.edited[name], ids, axis=0)
        if name not in self.shapes:
            raise KeyError(name)
        return self.cache.rows(name, ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def __contains__(self, name: object) -> bool:
        return name in self.shapes

    def __or__(self, other: Mapping) -> LazyWeights:
        """Edited weights: `other`'s arrays replace these; one that is the file's own array again
        (an edit undone by "back to the file") is no longer counted as edited."""
        edited = dict(self.edited)
        for name, array in other.items():
            if name not in self.shapes:
                raise KeyError(name)
            edited.pop(name, None)
            if array is not self.cache.get(name):
                edited[name] = array
        return LazyWeights(self.shapes, self.cache, self.identity, edited, self.quantisation)


def changed_names(weights: Mapping, original: Mapping) -> list[str]:
    """Names whose arrays are not the very ones `original` holds (an edit copies only the array it
    changes); for two views of one lazily read file, found without reading any array."""
    if isinstance(weights, LazyWeights) and isinstance(original, LazyWeights) and weights.cache is original.cache:
        return [n for n in weights.shapes if weights.edited.get(n) is not original.edited.get(n)]
    return [name for name, array in weights.items() if array is not original[name]]


class RowTable:
    """A parameter read by token id, as an operator's input operand: its shape and any rows asked for (the
    inputs panel's corner) without reading it whole; `np.asarray` reads it whole."""

    def __init__(self, weights: LazyWeights, name: str):
        self.weights, self.name = weights, name
        self.shape = tuple(weights.shapes[name])
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        ids = np.arange(self.shape[0])[rows]
        found = self.weights.rows(self.name, np.atleast_1d(ids))
        return (found if np.ndim(ids) else found[0])[(slice(None), *rest) if np.ndim(ids) else rest]

    def __array__(self, dtype=None, copy=None):
        whole = self.weights[self.name]
        return whole if dtype is None else whole.astype(dtype)
