"""Every K/V cache layout keeps the LayerState protocol (engine.state): views over its row positions, deltas
that restore it bit for bit, dump items, and a compare that finds the row a dump changed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import X01

from engine import Session, load_scenario, to_host
from engine.caches import CacheSpec, Layout, Quantize
from engine.state import tokens_held

LAYOUTS = {"contiguous": CacheSpec(), "ring": CacheSpec(Layout.RING, window=3, sinks=1),
           "paged": CacheSpec(Layout.PAGED, block_size=2), "int8": CacheSpec(quantize=Quantize.INT8)}


def round_ends(layout: str):
    """Each layer's state at the end of every round of X01 (window 3 for the ring)."""
    scenario = load_scenario(X01)
    model = dataclasses.replace(scenario.model, sliding_window=3) if layout == "ring" else scenario.model
    scenario = dataclasses.replace(scenario, cache=LAYOUTS[layout], model=model)
    ends = {}
    for state in Session(scenario).steps():
        ends[(state.request, state.round)] = state.caches
    return list(ends.values())


def same(a, b) -> bool:
    return all(np.array_equal(to_host(x.values), to_host(y.values)) for x, y in zip(a.views(), b.views(), strict=True))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_views_span_the_rows_a_state_holds_and_its_dump_items_are_its_arrays(layout):
    for states in round_ends(layout):
        for state in states:
            views = state.views()
            assert [view.name for view in views] == ["K", "V"]
            assert all(view.values.shape[0] == len(state.row_positions) for view in views)
            assert sum(p >= 0 for p in state.row_positions) == state.length <= state.seen
            items = state.dump_items()
            assert set(items) == {"cache_k", "cache_v"} and state.module == "attn"
        assert tokens_held(states) == max(s.length for s in states)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_chain_of_deltas_restores_every_state_bit_for_bit(layout):
    ends = round_ends(layout)
    previous, deltas = None, []
    for states in ends:
        deltas.append([state.delta(None if previous is None else previous[i]) for i, state in enumerate(states)])
        previous = states
    for r, states in enumerate(ends):
        for layer, state in enumerate(states):
            start = max(i for i in range(r + 1) if deltas[i][layer].whole)  # back to the last whole one
            restored = deltas[r][layer].restore([deltas[i][layer] for i in range(start, r)])
            assert same(restored, state) and restored.length == state.length
    if layout == "contiguous":  # a decode round stores only the rows it appended
        assert not deltas[1][0].whole and deltas[1][0].nbytes < ends[1][0].nbytes


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_compare_finds_the_position_whose_row_a_dump_changed(layout):
    state = round_ends(layout)[-1][0]
    theirs = {name: np.array(to_host(values), dtype=np.float64) for name, values in state.dump_items().items()}

    def beyond(name, ours, other):
        return np.abs(ours - other) > 1e-9

    assert state.differing(theirs, beyond) == frozenset()
    row = next(i for i, p in enumerate(state.row_positions) if p >= 0)
    theirs["cache_v"][row, 0] += 1.0
    assert state.differing(theirs, beyond) == frozenset({state.row_positions[row]})
    assert state.differing({}, beyond) == frozenset()  # nothing of it in the dump: nothing compared
