"""The array namespace a session computes with, and the few things the Array API lacks.

Everything NumPy-only (erf; host conversion, in engine.arrays) lives here so that the operators stay
portable across NumPy, CuPy and array_api_strict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from engine.arrays import namespace, to_host
from engine.causes import CausedError

BACKENDS = ("numpy", "cupy", "array_api_strict")
DTYPES = ("float64", "float32")


class BackendError(CausedError):
    """A backend or dtype that cannot be used on this machine (a cause: engine.causes)."""


@dataclass(frozen=True)
class Backend:
    """An array namespace plus the float dtype every tensor of a session uses."""

    name: str
    xp: ModuleType
    dtype_name: str

    @property
    def dtype(self) -> Any:
        return getattr(self.xp, self.dtype_name)

    def asarray(self, values: Any) -> Any:
        """`values` in this backend's dtype; a host array already of that dtype is not copied
        (memory-mapped float32 weights stay mapped in a float32 session)."""
        return self.xp.asarray(np.asarray(values), dtype=self.dtype)

    def erf(self, x: Any) -> Any:
        """Elementwise erf; the Array API has none, so each library supplies its own."""
        if self.name == "cupy":
            from cupyx.scipy.special import erf

            return erf(x)
        host = np.frompyfunc(math.erf, 1, 1)(to_host(x)).astype(np.float64)
        return self.asarray(host)


def make_backend(name: str = "numpy", dtype: str = "float64") -> Backend:
    """Return the backend called `name` computing in `dtype`.

    Args:
        name: one of BACKENDS.
        dtype: "float64" (default, exact enough to match printed tables) or "float32".
    """
    if name not in BACKENDS:
        raise BackendError("backend.unknown", name=name, names=", ".join(BACKENDS))
    if dtype not in DTYPES:
        raise BackendError("backend.dtype", dtype=dtype, names=", ".join(DTYPES))
    try:
        module = __import__(name)
    except ImportError as error:
        raise BackendError("backend.missing", name=name, error=str(error)) from None
    xp = namespace(module.asarray([0.0]))
    if name == "cupy":
        _require_gpu(module)
    return Backend(name=name, xp=xp, dtype_name=dtype)


def _require_gpu(cupy: ModuleType) -> None:
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CuPy raises its own runtime error types
        raise BackendError("backend.no_gpu", error=str(error)) from None
