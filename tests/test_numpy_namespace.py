"""The NumPy backend computes in NumPy's own namespace (engine.numpy_namespace), not array_api_compat's copy of
NumPy: what the array API asks beyond NumPy (descending, stable sorts) still holds, and the arrays are the same."""

import array_api_compat.numpy as compat
import numpy as np
import pytest

from engine import make_backend
from engine.arrays import namespace

TIES = np.array([[3.0, 1.0, 3.0, -0.0, 0.0, 2.0, 3.0, 1.0], [0.5, 0.5, 0.5, 0.5, -1.0, 7.0, 7.0, 0.5]])


def test_the_numpy_backend_uses_numpy_s_own_functions():
    xp = make_backend("numpy").xp
    assert xp.concat is np.concat and xp.exp is np.exp and xp.float64 is np.float64
    assert namespace(np.zeros(2), np.ones(1)) is xp


@pytest.mark.parametrize("descending", [False, True])
def test_sorts_are_the_array_api_s_stable_ones(descending):
    """Ties keep their order (argsort), also descending, where np.argsort's default quicksort need not."""
    xp = make_backend("numpy").xp
    for axis in (0, 1):
        order = xp.argsort(TIES, axis=axis, descending=descending)
        assert np.array_equal(order, compat.argsort(TIES, axis=axis, descending=descending))
        assert np.array_equal(order, _stable_order(TIES, axis, descending))
        assert np.array_equal(xp.sort(TIES, axis=axis, descending=descending),
                              np.take_along_axis(TIES, order, axis=axis))


def _stable_order(values, axis, descending):
    """Each line's indices by value, ties in index order: Python's own stable sort."""
    lines = np.moveaxis(values, axis, -1)
    order = [sorted(range(len(line)), key=lambda i: -line[i] if descending else line[i]) for line in lines]
    return np.moveaxis(np.array(order), -1, axis)
