"""The headless debugger: a session of debugging that the TUI and the CLI both drive (no UI import)."""

from tinyllm_tui.debugger.comparisons import DiffCancelled
from tinyllm_tui.debugger.debugger import Debugger

__all__ = ["Debugger", "DiffCancelled"]
