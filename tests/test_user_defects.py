"""The defects a new user found (issue 27, "Defects found by a new user"), tested headlessly against the
engine, the Debugger and the CLI; what only the views do is in test_tui_defects.py."""

from __future__ import annotations

import sys

import numpy as np
from conftest import ROOT, X01

from engine import load_scenario
from engine.compare.diff import diff_batch, first_divergence
from engine.parameters import parameter_shapes
from engine.scenario import Scenario
from engine.spec import DecodeRule, ModelSpec, NormSpec, Request, Vocab
from tinyllm_tui.debugger import Debugger
from tinyllm_tui.debugger.readings import round_lens
from tinyllm_tui.debugger.results import Reason, Refused
from tinyllm_tui.tui.i18n import describe

ENCODER = ROOT / "scenarios" / "encoder004.yaml"


def loud_residual_batch() -> Scenario:
    """Two prompts of a random Llama-like model whose residual stream holds values near 3e4, as SmolLM2's does:
    a rounding step there is 7.3e-12, so a batch's other summation order moves it past an absolute 1e-12."""
    model = ModelSpec(d_model=128, n_layers=4, n_heads=2, d_head=64, d_ff=512, norm=NormSpec(kind="rmsnorm"),
                      final_norm=True, ffn="gated_silu", positions="rope")
    vocab = Vocab(tuple(f"t{i}" for i in range(50)))
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(0, 1 / np.sqrt(shape[0]), shape)
               for name, shape in parameter_shapes(model, len(vocab)).items()}
    weights["embed"] = weights["embed"] * 3e4
    requests = tuple(Request(tuple(int(t) for t in rng.integers(0, 50, n)), 2) for n in (9, 3))
    return Scenario("loud.yaml", "loud", vocab, model, weights, requests, DecodeRule(max_new_tokens=2))


def test_a_batch_meets_each_request_alone_within_a_tolerance_that_follows_magnitude_and_depth():
    """Defect 3: every token identical, yet an absolute 1e-12 called round-off at 3e4 a divergence."""
    diffs = diff_batch(loud_residual_batch())
    moved = [d for d in diffs if d.max_abs > 1e-12]
    assert moved  # the batch does move numbers by more than an absolute 1e-12 ...
    assert first_divergence(diffs) is None  # ... each within its rounding steps
    assert all(1e-12 < d.tolerance < 1e-8 for d in moved)  # rounding steps of values up to ~1e5, not a blanket
    choices = [d for d in diffs if d.name == "sample.hook_choice"]
    assert choices and all(d.tolerance == 1e-12 for d in choices)  # token ids must be equal


def test_the_logit_lens_of_an_encoder_is_refused_with_the_command_lines_reason():
    """Defect 1: `l` on encoder004 raised AnalysisError into the TUI, which crashed."""
    from typer.testing import CliRunner

    from tinyllm_tui.cli import app

    debugger = Debugger(load_scenario(ENCODER))
    refused = round_lens(debugger.session.model, debugger.history.round_states())
    assert isinstance(refused, Refused) and refused.reason is Reason.NO_LENS
    cli = CliRunner().invoke(app, ["run", str(ENCODER), "--lens"])
    assert cli.exit_code == 2
    assert cli.output.strip().endswith(f"error: {refused.args[0]}")  # the same reason, worded once
    assert describe(refused, "en") == f"no logit lens: {refused.args[0]}"


CRASHING = """
import sys
from tinyllm_tui.tui.main_screen import DebuggerScreen
def crash(self):
    raise RuntimeError("a defect of the app")
DebuggerScreen.action_help = crash
from tinyllm_tui.cli import main
sys.argv = ["tinyllm-tui", sys.argv[1]]
main()
"""


def test_a_crash_of_the_app_ends_the_command_with_a_failure_status():
    """Defect 1: a crash printed Textual's traceback and the process still exited 0 (a script saw success)."""
    import os
    import pty
    import select
    import time

    pid, terminal = pty.fork()
    if pid == 0:  # the child: the TUI on a terminal, with a key that raises
        os.execv(sys.executable, [sys.executable, "-c", CRASHING, str(X01)])
    seen, deadline, sent = b"", time.monotonic() + 60, False
    while time.monotonic() < deadline:
        if select.select([terminal], [], [], 0.2)[0]:
            try:
                seen += os.read(terminal, 65536)
            except OSError:  # the child has gone: its side of the terminal is closed
                break
        if not sent and b"Step" in seen:  # the footer is drawn: the main screen takes keys
            os.write(terminal, b"?")
            sent = True
    _, status = os.waitpid(pid, 0)
    assert sent and os.waitstatus_to_exitcode(status) == 1
    assert b"a defect of the app" in seen
