"""A widget drawn line by line (tinyllm_tui/tui/widgets/textlines.py) keeps its base style between refreshes
(a step must not walk up the DOM for it at every line): that style must still follow every change of the styles,
a class on an ancestor (the screen's -narrow) as well as an inline style."""

from rich.text import Text
from textual.app import App

from tinyllm_tui.tui.widgets.textlines import TextLines


class Lines(TextLines):
    def text_lines(self):
        return [Text("abc")]


class Styled(App):
    CSS = "Lines { color: #00ff00; } .-red Lines { color: #ff0000; }"

    def compose(self):
        yield Lines()


def colour(widget: Lines) -> str:
    return widget.render_line(0)._segments[0].style.color.triplet.hex


async def test_the_base_style_follows_an_ancestors_class_and_an_inline_style():
    app = Styled()
    async with app.run_test(size=(20, 3)) as pilot:
        lines = app.query_one(Lines)
        await pilot.pause()
        assert colour(lines) == "#00ff00"
        app.screen.add_class("-red")
        await pilot.pause()
        assert colour(lines) == "#ff0000"
        lines.styles.color = "#0000ff"
        await pilot.pause()
        assert colour(lines) == "#0000ff"
