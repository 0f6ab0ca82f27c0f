"""NumPy 2 as the NumPy backend's array API namespace, without array_api_compat's copy of NumPy.

NumPy ≥ 2 implements the standard in its own namespace (`numpy.__array_api_version__`), except that its
sort and argsort take no `descending` and are not stable by default; those two are array_api_compat's own
functions, bound to NumPy as its `array_api_compat.numpy` binds them. Every other name is NumPy's.
`array_api_compat.numpy` itself reads every NumPy attribute when it is imported, which imports numpy.f2py,
testing, ma and random: a tenth of a second of every start (issue 24).
"""

import functools

import numpy
from array_api_compat.common import _aliases

sort = functools.partial(_aliases.sort, xp=numpy)
argsort = functools.partial(_aliases.argsort, xp=numpy)


def __getattr__(name: str):
    return getattr(numpy, name)
