"""`python -m tinyllm_tui`: the `tinyllm-tui` command (how `serve` starts each learner's app, without a shell)."""

from tinyllm_tui.cli import main

main()
