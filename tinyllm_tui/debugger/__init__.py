"""The headless debugger: a session of debugging that the TUI and the CLI both drive (no UI import)."""

from tinyllm_tui.debugger.debugger import Busy, Debugger, DiffCancelled, View
from tinyllm_tui.debugger.frame import Frame

__all__ = ["Busy", "Debugger", "DiffCancelled", "Frame", "View"]
