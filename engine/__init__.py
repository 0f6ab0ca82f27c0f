"""The numerics of tinyllm-tui: scenarios, operators, sessions and their traces.

Never imports the UI stack (textual, rich, typer); tests enforce it.
"""

from engine.backend import Backend, BackendError, make_backend
from engine.arrays import to_host
from engine.loading.document import ScenarioError
from engine.loading import load_scenario, load_scenario_text
from engine.scenario import Scenario
from engine.session import Session
from engine.state import LayerState
from engine.trace import Labelled, OpState, RequestResult, Status, TokenState

__all__ = [
    "Backend", "BackendError", "LayerState", "Labelled", "OpState", "RequestResult", "Scenario",
    "ScenarioError", "Session", "Status", "TokenState", "load_scenario", "load_scenario_text",
    "make_backend", "to_host",
]
