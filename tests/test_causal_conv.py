"""The causal depthwise conv (engine/layers/causal_conv.py): its outputs against NumPy's own convolution, the
cached window against the full recompute, the window's rows and positions, its constant size, time travel,
its dump item (K−1 rows, or transformers' K) and the two window bugs."""

from __future__ import annotations

import numpy as np
import pytest

from engine.faults import FAULTS, NO_FAULT
from engine.layers.causal_conv import DUMP_ITEM, ConvWindow, convolve

K, C, T = 3, 5, 7


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((T, C)), rng.standard_normal((K, C)), rng.standard_normal(C)


def numpy_conv(x, w, b):
    """Each channel through np.convolve (which flips its kernel: the oldest tap is w[0]), cut to the causal part."""
    return np.stack([np.convolve(x[:, c], w[::-1, c])[:len(x)] for c in range(x.shape[1])], axis=1) + b


def window(fault=NO_FAULT):
    return ConvWindow.empty(np, K, C, np.float64, "weights", "conv")


def test_a_whole_sequence_is_numpys_causal_convolution(data):
    x, w, b = data
    read = window().extend(np, x, NO_FAULT)
    np.testing.assert_allclose(convolve(np, read.rows, w, b), numpy_conv(x, w, b), rtol=0, atol=1e-13)
    assert read.positions == (-1, -1, 0, 1, 2, 3, 4, 5, 6)


def test_one_token_at_a_time_and_chunks_equal_the_whole_sequence(data):
    x, w, b = data
    full = convolve(np, window().extend(np, x, NO_FAULT).rows, w, b)
    for sizes in ([1] * T, [4, 1, 2], [2, 5]):
        state, outputs, start = window(), [], 0
        for size in sizes:
            read = state.extend(np, x[start:start + size], NO_FAULT)
            outputs.append(convolve(np, read.rows, w, b))
            state, start = read.state, start + size
        np.testing.assert_allclose(np.concatenate(outputs), full, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(state.rows, x[-(K - 1):])  # the last K−1 inputs


def test_the_window_holds_the_last_inputs_with_their_positions_and_constant_bytes(data):
    x, _, _ = data
    empty = window()
    one = empty.extend(np, x[:1], NO_FAULT).state
    assert (one.length, one.seen, one.row_positions) == (1, 1, (-1, 0))
    np.testing.assert_array_equal(one.rows, np.stack([np.zeros(C), x[0]]))
    full = one.extend(np, x[1:], NO_FAULT).state
    assert (full.length, full.seen, full.row_positions) == (K - 1, T, (T - 2, T - 1))
    assert empty.nbytes == one.nbytes == full.nbytes == (K - 1) * C * 8
    (view,) = full.views()
    assert view.values is full.rows and view.name == "conv window"
    fresh = full.fresh("other")
    assert (fresh.seen, fresh.fingerprint, float(np.abs(fresh.rows).sum())) == (0, "other", 0.0)


def test_padded_inputs_are_read_as_zeros(data):
    x, w, b = data
    padded = window().extend(np, x[:4], NO_FAULT, padded=[True, True, False, False])
    alone = window().extend(np, x[2:4], NO_FAULT)
    np.testing.assert_array_equal(convolve(np, padded.rows, w, b)[2:], convolve(np, alone.rows, w, b))
    np.testing.assert_array_equal(padded.state.rows, alone.state.rows)


def test_a_kept_round_start_restores_the_window_bit_for_bit(data):
    x, _, _ = data
    state = window().extend(np, x, NO_FAULT).state
    delta = state.delta(None)
    assert delta.whole and delta.nbytes == state.nbytes
    back = delta.after(window().delta(None)).restore([])
    np.testing.assert_array_equal(back.rows, state.rows)
    assert back.seen == state.seen


def test_the_dump_item_and_its_compare_accept_transformers_k_columns(data):
    x, _, _ = data
    state = window().extend(np, x, NO_FAULT).state
    assert list(state.dump_items()) == [DUMP_ITEM]

    def beyond(item, ours, theirs):
        return np.abs(ours - theirs) > 1e-12

    # transformers' conv cache: the last K inputs, channels first; its oldest column is no longer read
    theirs_k = np.ascontiguousarray(x[-K:].T).T
    assert state.differing({DUMP_ITEM: theirs_k}, beyond) == frozenset()
    assert state.differing({DUMP_ITEM: x[-(K - 1):]}, beyond) == frozenset()
    changed = x[-K:].copy()
    changed[-1, 2] += 1.0  # the newest input, position T − 1
    assert state.differing({DUMP_ITEM: changed}, beyond) == {T - 1}
    assert state.differing({}, beyond) == frozenset()
    assert state.differing({DUMP_ITEM: np.zeros((K, C + 1))}, beyond) == {T - 2, T - 1}


@pytest.mark.parametrize("bug, expected", [
    ("conv-not-shifted", lambda old, new: np.stack([old[0], new[0]])),  # the older row stays, the newest overwritten
    ("conv-shifted-twice", lambda old, new: np.stack([np.zeros(C), new[0]])),  # the row before the newest is lost
])
def test_the_window_bugs_keep_the_wrong_rows_in_decode_but_not_after_a_prefill(data, bug, expected):
    x, _, _ = data
    fault = FAULTS[bug]
    prefill = window().extend(np, x[:4], fault).state
    np.testing.assert_array_equal(prefill.rows, x[2:4])  # a prefill longer than the window fills it right
    step = prefill.extend(np, x[4:5], fault).state
    np.testing.assert_array_equal(step.rows, expected(x[2:4], x[4:5]))
    assert not np.array_equal(step.rows, prefill.extend(np, x[4:5], NO_FAULT).state.rows)
