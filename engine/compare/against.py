"""Compare your own implementation's activations with the engine's, operator by operator.

A dump is a .safetensors or .npz file of arrays keyed by hook name (`blocks.0.attn.hook_pattern`)
for one prompt, in TransformerLens's layouts — with or without the batch axis of 1:
residual-like hooks [pos, d], q/k/v/z and rot_q/rot_k [pos, head, d_head] (or stacked
[pos, head·d_head]), attention scores and pattern [head, query, key]. Scores are masked with −∞.
The report gives, for each operator of the prompt's prefill, whether it agrees within a
tolerance, and the first operator and cell where the dump leaves the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.backend import Backend, to_host
from engine.loading.document import ScenarioError
from engine.scenario import Scenario
from engine.session import Session
from engine.trace import OpState

PER_HEAD_MATRICES = ("hook_attn_scores", "hook_pattern")  # [head, query, key]
HEAD_AXIS = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_rot_q", "hook_rot_k")  # [pos, head, d_head]


@dataclass(frozen=True)
class OpAgreement:
    name: str
    head: int | None
    max_abs: float  # inf where the shapes do not fit or only one side is −∞ / NaN
    tolerance: float
    cell: tuple[int, int] | None = None  # the first cell beyond the tolerance (engine layout: row, col)
    where: str = ""  # that cell's labels, or why the arrays could not be compared
    ours: float | None = None
    theirs: float | None = None

    @property
    def agrees(self) -> bool:
        return self.cell is None and not self.where

    def describe(self) -> str:
        head = "" if self.head is None else f" head {self.head}"
        if self.agrees:
            return f"✓ {self.name}{head}  max |Δ| {self.max_abs:.3e}"
        if self.cell is None:
            return f"✗ {self.name}{head}  {self.where}"
        return (f"✗ {self.name}{head}  max |Δ| {self.max_abs:.3e}; first at [{self.cell[0]}, {self.cell[1]}] "
                f"({self.where}): reference {self.ours!r}, dump {self.theirs!r}")


@dataclass(frozen=True)
class Report:
    ops: tuple[OpAgreement, ...]
    missing: tuple[str, ...]  # operators of the reference the dump has no key for
    unused: tuple[str, ...]  # dump keys that name no operator

    @property
    def first_divergence(self) -> OpAgreement | None:
        return next((op for op in self.ops if not op.agrees), None)

    def lines(self) -> list[str]:
        agree = sum(op.agrees for op in self.ops)
        first = self.first_divergence
        summary = [f"{agree} of {len(self.ops)} operators agree",
                   f"first divergence: {first.describe()[2:]}" if first else "no divergence"]
        if self.missing:
            summary.append(f"not in the dump ({len(self.missing)}): {', '.join(self.missing[:8])}"
                           + (" …" if len(self.missing) > 8 else ""))
        if self.unused:
            summary.append(f"dump keys that name no operator: {', '.join(self.unused[:8])}")
        return summary + [op.describe() for op in self.ops]


def load_dump(path: str | Path) -> dict[str, np.ndarray]:
    path = Path(path)
    if path.suffix not in (".npz", ".safetensors"):
        raise ScenarioError(str(path), None, "", "expected a .safetensors or .npz file of activations")
    try:
        if path.suffix == ".npz":
            with np.load(path) as archive:  # allow_pickle stays False
                return {key: archive[key] for key in archive.files}
        from safetensors.numpy import load_file

        return load_file(path)
    except Exception as error:  # OSError, zipfile and safetensors errors: all "cannot read it"
        raise ScenarioError(str(path), None, "", f"cannot read the activations ({error})") from None


def prefill_states(scenario: Scenario, backend: Backend | None = None) -> list[OpState]:
    """The reference side: the first request's prefill, every operator."""
    states = []
    for state in Session(scenario, backend).steps():
        if state.request != 0 or state.round != 0:
            break
        states.append(state)
    return states


def compare_activations(scenario: Scenario, dump_path: str | Path, tolerance: float = 1e-6,
                        backend: Backend | None = None) -> Report:
    dump = load_dump(dump_path)
    ops, missing, used = [], [], set()
    for state in prefill_states(scenario, backend):
        if state.name not in dump:
            missing.append(state.name)
            continue
        used.add(state.name)
        ops.append(_compare(state, dump[state.name], tolerance))
    unused = tuple(key for key in dump if key not in used)
    return Report(tuple(ops), tuple(dict.fromkeys(missing)), unused)


def _compare(state: OpState, theirs: np.ndarray, tolerance: float) -> OpAgreement:
    ours = np.asarray(to_host(state.values), dtype=np.float64)
    aligned = align(theirs, state, ours.shape)
    if aligned is None:
        return OpAgreement(state.name, state.head, float("inf"), tolerance,
                           where=f"dump shape {tuple(theirs.shape)} does not fit {tuple(ours.shape)}")
    aligned = aligned.astype(np.float64)
    same = (ours == aligned) | (np.isnan(ours) & np.isnan(aligned))  # equal −∞ (masked) counts as agreement
    with np.errstate(invalid="ignore"):  # −∞ − −∞ where both are masked: `same` covers those
        delta = np.where(same, 0.0, np.abs(ours - aligned))
    delta = np.where(np.isnan(delta), np.inf, delta)
    beyond = np.argwhere(delta > tolerance)
    if not len(beyond):
        return OpAgreement(state.name, state.head, float(delta.max(initial=0.0)), tolerance)
    row, col = (int(i) for i in beyond[0])
    labels = f"row {state.output.rows[row]}, col {state.output.cols[col]}"
    return OpAgreement(state.name, state.head, float(delta.max()), tolerance, (row, col), labels,
                       float(ours[row, col]), float(aligned[row, col]))


def align(theirs: np.ndarray, state: OpState, shape: tuple[int, ...]) -> np.ndarray | None:
    """The dump's array in the engine's layout for this operator (and head), or None."""
    candidates = [theirs] + ([theirs[0]] if theirs.ndim >= 2 and theirs.shape[0] == 1 else [])
    suffix = state.name.rsplit(".", 1)[-1]
    for array in candidates:
        if state.head is not None and suffix in PER_HEAD_MATRICES and array.ndim == 3:
            array = array[state.head] if state.head < array.shape[0] else array
        elif state.head is not None and array.ndim == 3:  # hook_z: [pos, head, d_head]
            array = array[:, state.head] if state.head < array.shape[1] else array
        elif state.head is not None and array.ndim == 2 and array.shape[1] > shape[1]:  # stacked heads
            width = shape[1]
            array = array[:, state.head * width:(state.head + 1) * width]
        elif suffix in HEAD_AXIS and array.ndim == 3:
            array = array.reshape(array.shape[0], -1)
        if tuple(array.shape) == tuple(shape):
            return array
    return None


# -- the reference side -----------------------------------------------------------------------
def save_activations(states: list[OpState], path: str | Path) -> None:
    """Write one prompt's prefill in TransformerLens's layouts (batch axis of 1): per-head matrices
    stacked as [1, head, query, key], q/k/v/z as [1, pos, head, d_head], the rest [1, pos, width]."""
    per_head: dict[str, list[np.ndarray]] = {}
    arrays: dict[str, np.ndarray] = {}
    d_head = next((s.values.shape[1] for s in states if s.name.endswith("hook_z")), None)
    for state in states:
        values = np.ascontiguousarray(to_host(state.values), dtype=np.float64)
        if state.head is not None:
            per_head.setdefault(state.name, []).append(values)
        elif state.name.rsplit(".", 1)[-1] in HEAD_AXIS and d_head:
            arrays[state.name] = values.reshape(1, values.shape[0], -1, d_head)
        else:
            arrays[state.name] = values[None]
    for name, heads in per_head.items():
        axis = 0 if name.rsplit(".", 1)[-1] in PER_HEAD_MATRICES else 1
        arrays[name] = np.stack(heads, axis=axis)[None]
    path = Path(path)
    if path.suffix == ".npz":
        np.savez(path, **arrays)
    else:
        from safetensors.numpy import save_file

        save_file({name: np.ascontiguousarray(a) for name, a in arrays.items()}, path)  # it writes raw memory
