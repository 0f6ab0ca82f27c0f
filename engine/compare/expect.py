"""Expectations: tables printed in a text, checked cell by cell against the computation.

A scenario's `expect:` entries name an operator (and request, round, head), hold the
numbers as printed, and may pick a sub-block (rows by absolute position, columns by
index). A cell agrees when |computed − printed| is within half a unit of the printed
last decimal, unless the entry sets its own tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.arrays import to_host
from engine.causes import Cause, cause
from engine.hooks import Hook, HookError
from yaml.nodes import SequenceNode

from engine.loading.document import MAX_SCENARIO_VALUES, Node, ScenarioError
from engine.spec import Mode, ModelSpec, Request
from engine.trace import OpState

EXPECT_KEYS = {"op", "request", "round", "head", "run", "rows", "cols", "tolerance", "values", "note"}
MINUS_INFINITY = ("-inf", "−∞", "-∞")


@dataclass(frozen=True)
class Expectation:
    op: str
    request: int
    round: int
    head: int | None
    run: Mode  # which computation the text printed: the cached one or the full recompute
    rows: tuple[int, ...] | None  # absolute positions; None: every row
    cols: tuple[int, ...] | None  # column indices; None: every column
    printed: tuple[tuple[float, ...], ...]
    tolerances: tuple[tuple[float, ...], ...]
    note: str
    line: int | None
    index: int = 0  # its place in the expect: list (the path `expect[index]` of messages)

    @property
    def key(self) -> tuple:
        return (self.request, self.round, self.op, self.head)

    @property
    def title(self) -> Cause:
        """Which operator the table is about (`request 0 prefill blocks.0.attn.hook_pattern head 0`), for a view to
        word: each part that may be missing is a cause of its own (part.none where it is)."""
        return Cause("expect.table", {
            "request": self.request, "op": self.op,
            "where": Cause("part.prefill") if self.round == 0 else Cause("part.decode", {"round": self.round}),
            "head": Cause("part.none") if self.head is None else Cause("part.head", {"head": self.head}),
            "full": Cause("part.full") if self.run == Mode.FULL else Cause("part.none")})


@dataclass(frozen=True)
class Cell:
    position: int
    col: int
    row_label: str
    col_label: str
    printed: float
    computed: float
    tolerance: float

    @property
    def agrees(self) -> bool:
        if math.isinf(self.printed) or math.isinf(self.computed):
            return self.printed == self.computed
        return abs(self.computed - self.printed) <= self.tolerance


@dataclass(frozen=True)
class Outcome:
    expectation: Expectation
    cells: tuple[Cell, ...]
    problem: Cause | None = None  # set when the table could not be compared at all

    @property
    def agreeing(self) -> int:
        return sum(cell.agrees for cell in self.cells)

    @property
    def passed(self) -> bool:
        return self.problem is None and self.agreeing == len(self.cells)

    def error(self, file: str) -> ScenarioError:
        """The problem of a table that could not be compared, located: a bad table, not a disagreement."""
        return ScenarioError(file, self.expectation.line, f"expect[{self.expectation.index}]", self.problem)


# -- reading ----------------------------------------------------------------------------
def parse_expectations(node: Node, requests: Sequence[Request] = (), model: ModelSpec | None = None,
                       ) -> tuple[Expectation, ...]:
    """The `expect:` tables; with the requests and model, each must name a request, round, head,
    layer and positions that the run computes (else a ScenarioError at that key, never a disagreement)."""
    expectations = tuple(_expectation(item, i) for i, item in enumerate(node.items()))
    if model is not None:
        for item, expectation in zip(node.items(), expectations):
            _check_reachable(item, expectation, requests, model)
    return expectations


def _check_reachable(node: Node, e: Expectation, requests: Sequence[Request], model: ModelSpec) -> None:
    if e.request >= len(requests):
        raise node.get("request").error(cause("expect.request", request=e.request, requests=len(requests)))
    request = requests[e.request]
    last_round = request.max_new_tokens - 1 if model.lm_head else 0
    if e.round > last_round:
        raise node.get("round").error(cause("expect.round", round=e.round, request=e.request, last_round=last_round))
    if e.head is not None and e.head >= model.n_heads:
        raise node.get("head").error(cause("expect.head", head=e.head, heads=model.n_heads))
    try:
        layer = Hook.parse(e.op).layer
    except HookError as error:  # no operator is named so: say it where the name stands
        raise node.get("op").error(cause("expect.hook", text=error.text)) from None
    if layer is not None and layer >= model.n_layers:
        raise node.get("op").error(cause("expect.layer", layer=layer, layers=model.n_layers))
    n = len(request.tokens)
    positions = range(n) if e.round == 0 else range(n + e.round - 1, n + e.round)
    where = (cause("expect.in_prefill", last=n - 1) if e.round == 0 else
             cause("expect.in_decode", round=e.round, position=positions[0]))
    for i, position in enumerate(e.rows or ()):
        if position not in positions:
            raise node.get("rows").items()[i].error(cause("expect.position", position=position, where=where))
    if e.rows is None and len(e.printed) > len(positions):
        raise node.get("values").error(cause("expect.row_count", rows=len(e.printed), where=where,
                                             computed=len(positions)))


def _expectation(node: Node, index: int) -> Expectation:
    node.mapping(EXPECT_KEYS, {"op", "values"})
    rows = node.get("values").items()
    cells = sum(len(row.raw.value) for row in rows if isinstance(row.raw, SequenceNode))
    if cells > MAX_SCENARIO_VALUES:  # rows that are aliases of one long row: never walk them
        raise node.get("values").error(cause("expect.cells", cells=cells, limit=MAX_SCENARIO_VALUES))
    printed, tolerances = [], []
    for row in rows:
        cells = row.items()
        printed.append(tuple(_printed(cell) for cell in cells))
        tolerances.append(tuple(_half_unit(cell) for cell in cells))
    if not printed or len({len(r) for r in printed}) != 1:
        raise node.get("values").error(cause("expect.ragged"))
    if node.has("tolerance"):
        tolerance = node.get("tolerance").number()
        if tolerance <= 0:
            raise node.get("tolerance").error(cause("expect.tolerance", tolerance=f"{tolerance:g}"))
        tolerances = [tuple(tolerance for _ in row) for row in printed]
    picked = {key: _indices(node.get(key)) if node.has(key) else None for key in ("rows", "cols")}
    if picked["rows"] is not None and len(picked["rows"]) != len(printed):
        raise node.get("rows").error(cause("expect.named_rows", named=len(picked["rows"]), rows=len(printed)))
    if picked["cols"] is not None and len(picked["cols"]) != len(printed[0]):
        raise node.get("cols").error(cause("expect.named_columns", named=len(picked["cols"]), columns=len(printed[0])))
    return Expectation(
        op=node.get("op").text(),
        request=node.get("request").integer(minimum=0) if node.has("request") else 0,
        round=node.get("round").integer(minimum=0) if node.has("round") else 0,
        head=node.get("head").integer(minimum=0) if node.has("head") else None,
        run=Mode(node.get("run").choice(tuple(Mode))) if node.has("run") else Mode.CACHED,
        rows=picked["rows"],
        cols=picked["cols"],
        printed=tuple(printed),
        tolerances=tuple(tolerances),
        note=node.get("note").text() if node.has("note") else "",
        line=node.line,
        index=index,
    )


def _printed(cell: Node) -> float:
    if isinstance(cell.value, str) and cell.value.strip() in MINUS_INFINITY:
        return -math.inf
    if isinstance(cell.value, float) and cell.value == -math.inf:
        return -math.inf
    return cell.number()


def _half_unit(cell: Node) -> float:
    """Half a unit of the last decimal as printed: 3.0638 -> 0.00005, 2 -> 0.5, 1.5e-3 -> 0.00005."""
    value = cell.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    if isinstance(value, int):
        return 0.5
    mantissa, _, exponent = cell.printed.replace("_", "").lower().partition("e")
    digits = exponent.lstrip("+-").lstrip("0")  # `0e395964` is a number too: keep 10.0 ** x in range
    shift = (int(digits or 0) if len(digits) < 4 else 999) * (-1 if exponent.startswith("-") else 1)
    decimals = len(mantissa.partition(".")[2]) - shift
    if decimals < -300:  # a last digit worth more than any float: every value agrees
        return math.inf
    return 0.5 * 10.0 ** -min(decimals, 400) + 1e-12


def _indices(node: Node) -> tuple[int, ...]:
    return tuple(item.integer(minimum=0) for item in node.items())


# -- checking ----------------------------------------------------------------------------
def check(expectations: Iterable[Expectation], cached: Iterable[OpState], full: Iterable[OpState] | None) -> list[Outcome]:
    """Compare every expectation with the run it names (the full recompute only if needed)."""
    expectations = list(expectations)
    runs = {Mode.CACHED: _rows_by_key(cached, expectations)}
    if full is not None and any(e.run == Mode.FULL for e in expectations):
        runs[Mode.FULL] = _rows_by_key(full, expectations)
    return [_compare(e, runs.get(e.run, {})) for e in expectations]


def _rows_by_key(states: Iterable[OpState], expectations: list[Expectation]) -> dict:
    """(request, round, name, head) -> {position: (output, row index, values)}, for the keys asked."""
    wanted = {e.key for e in expectations}
    table: dict = {}
    for state in states:
        key = (state.request, state.round, state.name, state.head)
        if key not in wanted:
            continue
        values = to_host(state.values)
        rows = table.setdefault(key, {})
        for i, position in enumerate(state.positions):
            rows[position] = (state.output, i, values[i])
    return table


def _compare(expectation: Expectation, run: dict) -> Outcome:
    rows = run.get(expectation.key)
    if not rows:
        return Outcome(expectation, (), Cause("expect.no_operator", {"table": expectation.title}))
    positions = expectation.rows or tuple(sorted(rows))
    missing = [p for p in positions if p not in rows]
    if missing or len(positions) != len(expectation.printed):
        return Outcome(expectation, (), Cause("expect.rows", {"rows": sorted(rows), "table": list(positions)}))
    width = len(next(iter(rows.values()))[2])
    cols = expectation.cols or tuple(range(width))
    if len(cols) != len(expectation.printed[0]) or max(cols) >= width:
        return Outcome(expectation, (), Cause("expect.columns", {"width": width, "table": len(expectation.printed[0])}))
    cells = []
    for position, printed_row, tolerance_row in zip(positions, expectation.printed, expectation.tolerances):
        output, i, values = rows[position]
        for j, printed, tolerance in zip(cols, printed_row, tolerance_row):
            cells.append(Cell(position, j, output.rows[i], output.cols[j], printed, float(values[j]), tolerance))
    return Outcome(expectation, tuple(cells))
