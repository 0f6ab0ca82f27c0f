"""The numerics of tinyllm-tui: scenarios, operators, sessions and their traces.

Never imports the UI stack (textual, rich, typer); tests enforce it.
"""

from .backend import Backend, BackendError, make_backend, to_host
from .document import ScenarioError
from .scenario import Scenario, load_scenario, load_scenario_text
from .session import Session
from .trace import LayerCache, Labelled, OpState, RequestResult, Status, TokenState

__all__ = [
    "Backend", "BackendError", "LayerCache", "Labelled", "OpState", "RequestResult", "Scenario",
    "ScenarioError", "Session", "Status", "TokenState", "load_scenario", "load_scenario_text",
    "make_backend", "to_host",
]
