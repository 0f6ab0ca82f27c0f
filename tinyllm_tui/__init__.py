"""tinyllm-tui: a terminal step debugger for small transformer language models.

`from tinyllm_tui import Recorder` gives the recorder of your own implementation's activations
(NumPy only: importing the package loads no UI library)."""

from tinyllm_tui.recorder import Recorder, record_hf

__all__ = ["Recorder", "record_hf"]
