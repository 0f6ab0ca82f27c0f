"""The attention gradient check (003, A.11) and proof that it can fail."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import SCENARIOS
from typer.testing import CliRunner

from engine import Session, load_scenario, ops, to_host
from engine.compare.gradcheck import GradCheck, analytic_grad_q, check_head, head_output, numeric_grad_q
from engine.loading import open_model
from tinyllm_tui.cli import app


def test_analytic_gradient_matches_finite_differences_on_every_scenario():
    for name in ("x01", "decoder2", "eos7"):
        assert check_head(load_scenario(SCENARIOS / f"{name}.yaml")).relative_error < 1e-7, name


def test_a_wrong_backward_rule_is_caught():
    """Dropping the softmax Jacobian's row-sum term must show as a large relative error."""
    rng = np.random.default_rng(1)
    q, k, v, g = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    visible = np.tril(np.ones((3, 3), dtype=bool))
    pattern = ops.softmax(np, np.where(visible, q @ k.T / np.sqrt(2), -np.inf))
    wrong = (pattern * (g @ v.T)) @ k / np.sqrt(2)
    numeric = numeric_grad_q(q, k, v, visible, g)
    assert GradCheck(analytic_grad_q(q, k, v, visible, g), numeric).relative_error < 1e-7
    assert GradCheck(wrong, numeric).relative_error > 1e-2


FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(("fixture", "mixer"), [("deepseek_v3", "mla"), ("gemma2", "attention"),
                                                ("gpt_oss", "attention")])
def test_a_head_that_is_not_plain_softmax_attention_is_refused_in_one_located_line(fixture, mixer):
    """Issue 24: latent attention's scores read a rope query and per-head keys of other widths (NumPy's matmul
    error, exit 2 with no word of why); a soft cap (KeyError, a traceback) and sinks have no backward rule here."""
    result = CliRunner().invoke(app, ["gradcheck", str(FIXTURES / fixture), "--ids", "1,2,3"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert f"--layer: layer 0 ({mixer}): its heads are not softmax(Q·Kᵀ·scale)·V" in result.stderr


def test_the_check_differentiates_the_heads_own_scale():
    """Gemma 4 scales its scores by 1, not 1/√d_head: the check is of that head, so its function gives the
    head's recorded z and its analytic gradient is the one at the model's scale."""
    scenario = open_model(FIXTURES / "gemma4", ids=[[1, 2, 3]])
    assert scenario.model.attn_scale == 1.0
    states = {s.kind: s for s in Session(scenario).steps()
              if s.layer == 0 and s.round == 0 and s.head == 0 and s.kind in ("scores", "mix")}
    q, k = (to_host(operand.values) for operand in states["scores"].inputs)
    v, visible = to_host(states["mix"].inputs[1].values), np.isfinite(to_host(states["scores"].values))
    assert np.allclose(head_output(q, k, v, visible, 1.0), to_host(states["mix"].values), rtol=1e-12, atol=0)
    upstream = np.random.default_rng(0).normal(size=(q.shape[0], v.shape[1]))
    result = check_head(scenario)
    assert np.array_equal(result.analytic, analytic_grad_q(q, k, v, visible, upstream, 1.0))
    assert result.relative_error < 1e-7
