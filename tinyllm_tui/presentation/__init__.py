"""Words and numbers as people read them, shared by the CLI and the TUI."""
