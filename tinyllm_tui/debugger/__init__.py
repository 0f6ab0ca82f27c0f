"""The headless debugger: a session of debugging that the TUI and the CLI both drive (no UI import)."""

from tinyllm_tui.debugger.debugger import BUSY, Busy, Cancelled, Debugger, SearchError, View

__all__ = ["BUSY", "Busy", "Cancelled", "Debugger", "SearchError", "View"]
