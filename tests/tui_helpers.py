"""Reading the debugger's screen in Pilot tests: the status line, the matrix window's cells."""

from __future__ import annotations

import io

import numpy as np

from conftest import X01
from rich.console import Console

from engine import load_scenario
from tinyllm_tui.tui.app import DebuggerApp
from tinyllm_tui.tui.widgets.matrix import CELL_WIDTH, MatrixWindow


def make_app(path=X01, **kwargs) -> DebuggerApp:
    kwargs.setdefault("lang", "en")
    return DebuggerApp(load_scenario(path), **kwargs)


def state(app):
    return app.debugger.view.state


def status(app) -> str:
    return str(app.main.query_one("#status").render())


def matrix_text(app, selector: str = "#matrix") -> list[str]:
    return [line.plain if hasattr(line, "plain") else line.text
            for line in app.screen.query_one(selector, MatrixWindow)._lines()]


def matrix_cells(app, selector: str = "#matrix") -> list[list[str]]:
    """Each visible row as [label, cell, cell, …], cells with their ✓ ✗ • marks."""
    window = app.screen.query_one(selector, MatrixWindow)
    count = len(window.window()[1])
    rows = []
    for line in matrix_text(app, selector)[window._title_lines() + 1 :]:  # after the title and the header
        start = len(line) - count * CELL_WIDTH  # cells are one character a cell wide; labels may be CJK
        cells = [line[k : k + CELL_WIDTH].strip() for k in range(start, len(line), CELL_WIDTH)]
        rows.append([line[:start].strip(), *cells])
    return rows


def screen_text(app) -> str:
    """What the terminal shows now, as plain text (spaces, not SVG entities)."""
    width, height = app.size
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None, record=True)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


async def settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def long_scenario(*, prompt: int = 64, new: int = 150, d_model: int = 16, layers: int = 2):
    """A random small model with a long prompt and many decode rounds: a continue takes seconds."""
    import numpy as np

    from engine.parameters import parameter_shapes
    from engine.scenario import Scenario
    from engine.spec import DecodeRule, ModelSpec, NormSpec, Request, Vocab

    model = ModelSpec(d_model=d_model, n_layers=layers, n_heads=2, d_head=d_model // 2, d_ff=2 * d_model,
                      norm=NormSpec(), final_norm=True, ffn="gelu_tanh", positions="sinusoidal")
    vocab = Vocab(tuple(f"t{i}" for i in range(50)))
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(0, 1 / np.sqrt(shape[0]), shape)
               for name, shape in parameter_shapes(model, len(vocab)).items()}
    tokens = tuple(int(t) for t in rng.integers(0, len(vocab), prompt))
    return Scenario("long.yaml", "long", vocab, model, weights, (Request(tokens, new),), DecodeRule(max_new_tokens=new))


def perturbed_dump(tmp_path):
    """X01's own activations with one cell of decode 1's head-0 z moved by 0.01: your implementation's bug."""
    from typer.testing import CliRunner

    from engine.compare.dump import load_dump
    from tinyllm_tui.cli import app

    reference = tmp_path / "ref.npz"
    CliRunner().invoke(app, ["run", str(X01), "--save-activations", str(reference)])
    arrays = dict(np.load(reference))
    key = "request.0.decode.1.blocks.0.attn.hook_z"
    arrays[key] = arrays[key].copy()
    arrays[key].flat[1] += 0.01
    np.savez(tmp_path / "mine.npz", **arrays)
    return load_dump(tmp_path / "mine.npz"), float(arrays[key].flat[1])
