"""The floor the start-up goal is measured against: Textual itself with a header, an empty table and a
footer (benchmarks/tui_latency.py times it in-process and as a command, `python benchmarks/bare_app.py`)."""

from textual.app import App
from textual.widgets import DataTable, Footer, Header


class BareApp(App):
    def compose(self):
        yield Header()
        yield DataTable()
        yield Footer()


if __name__ == "__main__":
    BareApp().run()
