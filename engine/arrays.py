"""The two things every numeric module asks of an array whatever its library: its Array API namespace, and a
copy on the host (a NumPy array). Apart from engine.backend, which chooses the library, so that the layers and the
caches need nothing of that choice (and the backend's refusals may be causes, engine.causes, which read the layer
kinds)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
from array_api_compat import array_namespace, is_cupy_array, is_numpy_array

from engine import numpy_namespace


def namespace(*arrays: Any) -> ModuleType:
    """The array API namespace `arrays` belong to: NumPy's own for NumPy arrays (engine.numpy_namespace),
    else array_api_compat's choice (its CuPy wrapper, array_api_strict itself)."""
    if arrays and all(is_numpy_array(a) for a in arrays):
        return numpy_namespace
    return array_namespace(*arrays)


def to_host(x: Any) -> np.ndarray:
    """The one place where a backend array becomes a host NumPy array."""
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)
