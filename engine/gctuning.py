"""Python's garbage collector, set for a process that records every operator.

A traced decode round of a GPT-2-sized model keeps some 2 000 small objects (an OpState,
its Op, the tuple of operands it read, a head's slices). With CPython's default young-generation
threshold of 700 allocations the collector then runs several times a round and walks the
growing history each time: 1.5 ms of a 27 ms token (benchmarks/engine_speed.py). The objects
are freed by reference counting when the history drops them (they form no cycles), so
collecting less often costs little memory.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # allocations between young-generation collections (CPython's default: 700)


def tune_for_tracing() -> None:
    """Collect the young generation every YOUNG_THRESHOLD allocations; the older generations as before."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
