"""Every computed table of the X01 seed text, matched to 6 decimals by the engine's trace.

Expected numbers come from tests/data/x01_seed_tables.json, which
tests/data/extract_seed_tables.py extracts from the seed text itself.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from conftest import SEEDS, X01, ROOT

from engine import Session, load_scenario, to_host
from extract_seed_tables import extract
from x01_expectations import DECODE_TABLES, PREFILL_TABLES

SEED = SEEDS / "000_2a16b388d005b4f3.txt"
DATA = ROOT / "tests" / "data" / "x01_seed_tables.json"
HALF_UNIT = 0.5e-6 + 1e-12  # the seed prints 6 decimals of unrounded values

@pytest.fixture(scope="module")
def seed_tables() -> list[dict]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_data_file_is_what_the_seed_text_prints():
    if not SEED.exists():
        pytest.skip("the seed text is not beside this checkout")
    assert extract(SEED.read_text(encoding="utf-8")) == json.loads(DATA.read_text(encoding="utf-8"))


def test_seed_has_46_tables_4_of_them_parameters(seed_tables):
    assert [t["section"] for t in seed_tables].count(1) == 4
    assert len(seed_tables) == 46


def test_scenario_weights_are_the_printed_parameters(seed_tables):
    weights = load_scenario(X01).weights
    for table, name in zip(seed_tables[:4], ["embed", "blocks.0.attn.wq", "blocks.0.attn.wk", "blocks.0.attn.wv"]):
        assert [[float(x) for x in row["values"]] for row in table["rows"]] == weights[name].tolist(), name


def _index(states) -> dict:
    return {(s.request, s.round, s.name, s.head): s for s in states}


def _row(state, label: str):
    """The row of `state` the seed labels `位置2 · 学习`: same position, same token."""
    position, token = re.fullmatch(r"位置(\d+) · (.+)", label).groups()
    i = state.positions.index(int(position))
    assert state.output.rows[i] == f"{position} · {token}"
    return to_host(state.values)[i]


def _assert_close(computed, printed, where: str):
    assert len(computed) == len(printed), where
    for j, (c, p) in enumerate(zip(computed, printed)):
        if p == "-inf":
            assert c == -math.inf, f"{where} col {j}: {c} is not −∞"
        else:
            assert len(p.split(".")[1]) == 6, f"{where} col {j}: {p} is not printed to 6 decimals"
            assert abs(c - float(p)) <= HALF_UNIT, f"{where} col {j}: computed {c:.9f}, printed {p}"


def _check_prefill(states: dict, request: int, tables: list[dict]) -> int:
    for (name, head), table in zip(PREFILL_TABLES, tables, strict=True):
        where = f"request {request} {table['heading']}"
        if name == "vocab table":  # rows = vocabulary, columns = logit before filter, prob after
            logits = to_host(states[(request, 0, "unembed.hook_out", None)].values)[-1]
            probs = to_host(states[(request, 0, "sample.hook_probs", None)].values)[0]
            for v, row in enumerate(table["rows"]):
                assert row["label"] == states[(request, 0, "sample.hook_probs", None)].output.cols[v]
                _assert_close([logits[v], probs[v]], row["values"], f"{where} row {row['label']}")
            continue
        state = states[(request, 0, name, head)]
        if table["columns"][0].startswith("键"):
            assert list(state.output.cols) == [c.replace("键", "k") for c in table["columns"]], where
        for row in table["rows"]:
            _assert_close(_row(state, row["label"]), row["values"], f"{where} {row['label']}")
    return len(tables)


def test_every_computed_table_is_reproduced(seed_tables, backend):
    scenario = load_scenario(X01)
    states = _index(Session(scenario, backend).steps())
    full = _index(Session(scenario, backend, mode="full").steps())
    by_section = {s: [t for t in seed_tables if t["section"] == s] for s in (2, 3, 4)}
    matched = _check_prefill(states, 0, by_section[2]) + _check_prefill(states, 1, by_section[3])
    for name, table in zip(DECODE_TABLES, by_section[4], strict=True):
        if name == "cached vs full":
            cached_row = to_host(states[(0, 1, "blocks.0.hook_resid_post", None)].values)[0]
            full_state = full[(0, 1, "blocks.0.hook_resid_post", None)]
            full_row = to_host(full_state.values)[full_state.positions.index(3)]
            _assert_close(cached_row, table["rows"][0]["values"], "cached row")
            _assert_close(full_row, table["rows"][1]["values"], "full recompute row")
        else:
            state = states[(0, 1, name, None)]
            assert state.phase == "decode" and state.positions == (3,)
            _assert_close(to_host(state.values)[0], table["rows"][0]["values"], table["heading"])
        matched += 1
    assert matched == 42
