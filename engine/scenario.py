"""A scenario: what one debugging session computes — vocabulary, model, weights, requests, decode rule.

Loaded from a YAML file or a checkpoint by `engine.loading`; the same dataclass either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engine.caches import CacheSpec
from engine.lazy_weights import LazyWeights
from engine.spec import DecodeRule, ModelSpec, Request, Vocab

if TYPE_CHECKING:
    from engine.interventions import Intervention


class WeightOrigin(Protocol):
    """The file a scenario's weights were read from (engine.loading.weightfile.WeightSource): what identifies
    them, and the arrays as read, so that an edited one is told apart."""

    identity: str
    arrays: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Scenario:
    path: str
    title: str
    vocab: Vocab
    model: ModelSpec
    weights: Mapping[str, np.ndarray]  # a dict, or LazyWeights read from a checkpoint on first use
    requests: tuple[Request, ...]
    decode: DecodeRule
    expect: tuple = ()  # the expect: tables as read (engine.compare.expect.Expectation: the numerics never read them)
    breakpoints: tuple[str, ...] = ()  # each one parses with breakpoints.parse_breakpoint
    cache: CacheSpec = CacheSpec()  # the KV-cache layout every session of this scenario uses
    batch: bool = False  # run the requests as one left-padded batch instead of one after another
    interventions: tuple[Intervention, ...] = ()  # applied to activations as they are produced (engine.interventions)
    document: str | None = field(repr=False, compare=False, default=None)  # the YAML text as read
    weights_source: WeightOrigin | None = field(repr=False, compare=False, default=None)  # weights: {file: …}

    @cached_property
    def fingerprint(self) -> str:
        """Identity of the weights: a KV cache is only valid for the weights it came from.

        Weights from a file are known by the file's identity plus the bytes of the arrays
        edited since (an unedited array is the very object that was loaded).
        """
        digest = hashlib.sha256()
        if isinstance(self.weights, LazyWeights):  # a checkpoint: its file's identity plus the edits
            digest.update(self.weights.identity.encode())
            for name, array in self.weights.edited.items():
                digest.update(f"{name}:{array.dtype.str}".encode())
                digest.update(np.ascontiguousarray(array))
            return digest.hexdigest()[:16]
        source = self.weights_source
        if source is not None:
            digest.update(source.identity.encode())
        for name, array in self.weights.items():
            if source is None:
                digest.update(name.encode())
                digest.update(np.ascontiguousarray(array, dtype=np.float64))  # hashed in place, no bytes copy
            elif source.arrays.get(name) is not array:  # edited: its own dtype, not widened
                digest.update(f"{name}:{array.dtype.str}".encode())
                digest.update(np.ascontiguousarray(array))
        return digest.hexdigest()[:16]
