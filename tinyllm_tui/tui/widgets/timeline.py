"""The token timeline (A.9 of 003): a window of tokens around the one being fed, and the rounds so far."""

from __future__ import annotations

from dataclasses import replace

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from tinyllm_tui.debugger.frame import BatchLine, ChatLine, TimelineFrame
from tinyllm_tui.tui.i18n import tr, where

# A glyph per status as well as a colour, so that monochrome terminals keep the meaning.
STYLES = {
    "processed": ("✓", "green", "timeline.processed"),
    "current": ("▶", "bold black on yellow", "timeline.current"),
    "selected": ("★", "bold magenta", "timeline.selected"),
    "pending": ("…", "dim", "timeline.pending"),
}
UNCACHED = {"timeline.processed": "timeline.processed.uncached"}  # an encoder's words: nothing is cached
ROUND_SEPARATOR = " │ "
MESSAGE_ROOM = 20  # cells each chat message keeps when the line is short of room


def token_window(data: TimelineFrame | BatchLine, width: int, control: frozenset[int] = frozenset()) -> Text:
    """As many tokens around the focus as fit in `width` cells, with counts of the hidden ones;
    the positions in `control` (a chat template's special tokens) underlined."""
    pieces = [(f"{STYLES[status][0]}{position}:{text}", STYLES[status][1] + (" underline" * (position in control)))
              for position, text, status in data.tokens]
    if not pieces:
        return Text("")
    first = last = data.focus
    used = cell_len(pieces[first][0]) + 1
    reserve = 2 * len("‹ 9999 ")  # room for the hidden counts
    while True:
        grew = False
        for side in (1, -1):
            index = last + 1 if side == 1 else first - 1
            if 0 <= index < len(pieces) and used + cell_len(pieces[index][0]) + 1 + reserve <= width:
                used += cell_len(pieces[index][0]) + 1
                first, last = (first, index) if side == 1 else (index, last)
                grew = True
        if not grew:
            break
    text = Text(no_wrap=True, overflow="ellipsis")
    if first:
        text.append(f"‹ {first} ", style="dim")
    for piece, style in pieces[first : last + 1]:
        text.append(piece, style=style)
        text.append(" ")
    if last < len(pieces) - 1:
        text.append(f"{len(pieces) - 1 - last} ›", style="dim")
    return text


def mark(agrees: bool) -> str:
    return "✓" if agrees else "✗"


def round_line(rounds, lang: str, marks: dict[int, bool] | None = None) -> str:
    """The A.9 table on one line: "prefill: fed 我 爱 学习 → cache 3 → chose 爱 │ decode 1: …";
    `marks` (round -> your dump agrees) put ✓/✗ after a round's name."""
    parts = []
    for r in rounds:
        name = where(r.phase, r.round, lang) + (f" {mark(marks[r.round])}" if marks and r.round in marks else "")
        text = tr("timeline.round", lang, where=name, fed=" ".join(r.fed), length=r.cache_length)
        text += "" if r.chosen is None else tr("timeline.chose", lang, token=r.chosen)
        parts.append(text + (f" ({r.stop})" if r.stop else ""))
    return ROUND_SEPARATOR.join(parts)


def chat_text(chat: ChatLine, lang: str, width: int) -> Text:
    """The first stage, on one line: 'chat: system 1–17 "You are…" · user 24–30 "What is…" → 37 tokens,
    8 control · ends at <|im_end|>'. The messages share the room; where there is too little,
    they keep at least a few words each and the counts after them are cut."""
    head = tr("timeline.chat", lang)
    tail = " → " + tr("timeline.chat.tokens", lang, tokens=chat.tokens, control=len(chat.control))
    tail += "" if chat.end_of_turn is None else " · " + tr("timeline.chat.end", lang, token=chat.end_of_turn)
    labels = [f"{' · ' if i else ' '}{turn.role} " + ("{}–{} ".format(*turn.positions) if turn.positions else "")
              for i, turn in enumerate(chat.turns)]
    contents = [" ".join(turn.content.split()) for turn in chat.turns]
    left = width - cell_len(head) - sum(map(cell_len, labels))
    total = max(left - cell_len(tail), min(MESSAGE_ROOM * len(labels), left))
    rooms = shares([cell_len(c) + 2 for c in contents], total)
    text = Text(head, style="bold", no_wrap=True, overflow="ellipsis")
    for content, label, room in zip(contents, labels, rooms):
        text.append(label, style="bold")
        text.append(quoted(content, max(room, 4)))
    text.append(tail, style="dim")
    text.truncate(width, overflow="ellipsis")
    return text


def shares(lengths: list[int], total: int) -> list[int]:
    """Each message's room out of `total` cells: an equal share, what a shorter one leaves given to the others."""
    rooms, left = [0] * len(lengths), total
    for done, i in enumerate(sorted(range(len(lengths)), key=lengths.__getitem__)):
        rooms[i] = min(lengths[i], left // (len(lengths) - done))
        left -= rooms[i]
    return rooms


def quoted(content: str, room: int) -> str:
    """"content", cut with … to `room` cells, quotes included."""
    if cell_len(content) + 2 <= room:
        return f'"{content}"'
    while content and cell_len(content) + 3 > room:
        content = content[:-1]
    return f'"{content}…"'


class Timeline(Widget):
    data: reactive[TimelineFrame | None] = reactive(None)  # redrawn only when what it draws changed
    lang = "en"
    cached = True  # False for an encoder, which keeps no KV cache: no cache length, no "K/V cached"

    def show(self, data: TimelineFrame) -> None:
        self.data = data

    def render(self) -> Text:
        if self.data is None:
            return Text("")
        data, lang, width = self.data, self.lang, max(self.size.width, 10)
        place = tr("timeline.place", lang, request=data.request, requests=data.requests,
                   where=where(data.phase, data.round, lang))
        if data.chunk is not None:
            place += tr("timeline.chunk", lang, chunk=data.chunk)
        marks = dict(data.marks)
        if data.round in marks:
            place += f" {mark(marks[data.round])}"
        place += tr("timeline.cache", lang, length=data.cache_length) if self.cached else "  "
        lines = Text(place, style="bold", no_wrap=True, overflow="ellipsis")
        if data.batch:  # one line per row of the batch, as many as the panel holds around the current one
            return self._batch(lines, width)
        chat = data.chat
        lines.append_text(token_window(data, width - cell_len(place), chat.control if chat else frozenset()))
        lines.append("\n")
        if chat is not None:
            lines.append_text(chat_text(chat, lang, width))
            lines.append("\n")
        lines.append(self._rounds(width), style="italic")
        legend = "  ".join(f"{glyph} {tr(key if self.cached else UNCACHED.get(key, key), lang)}"
                           for glyph, _, key in STYLES.values())
        legend += f"  {tr('timeline.control', lang)}" if chat is not None else ""
        lines.append("\n" + legend, style="dim")
        return lines

    def _batch(self, lines: Text, width: int) -> Text:
        data, lang, rows = self.data, self.lang, self.data.batch
        room = max(self.size.height - 1, 1)
        mine = next(i for i, row in enumerate(rows) if row.request == data.request)
        first = min(max(mine - room // 2, 0), max(len(rows) - room, 0))
        shown = tr("timeline.batch.rows", lang, first=first, last=first + room - 1) if len(rows) > room else ""
        lines.append(tr("timeline.batch", lang, count=len(rows)) + shown, style="dim")
        for row in rows[first : first + room]:
            stop = f" ⏹ {row.stop}" if row.stop else ""
            head = f"{'▸' if row.request == data.request else ' '} {tr('label.batch_row', lang, request=row.request)} {tr('timeline.pad', lang)} {row.pad}{stop}  "
            lines.append("\n" + head, style="bold" if row.request == data.request else "")
            lines.append_text(token_window(row, width - cell_len(head)))
        return lines

    def _rounds(self, width: int) -> str:
        """The latest finished rounds that fit, with how many earlier ones are hidden."""
        rounds, lang, marks = self.data.rounds, self.lang, dict(self.data.marks)
        if not rounds:
            return tr("timeline.no_round", lang)
        start = len(rounds) - 1
        while start > 0 and (cell_len(round_line(rounds[start - 1 :], lang, marks))
                             + cell_len(tr("timeline.earlier", lang, count=start)) <= width):
            start -= 1
        line = round_line(rounds[start:], lang, marks)
        line = tr("timeline.earlier", lang, count=start) + line if start else line
        return line if cell_len(line) <= width else self._shortened(rounds[-1], width, start)

    def _shortened(self, last, width: int, earlier: int) -> str:
        """The last round alone, too long for one line (a chat's prefill): its fed tokens' middle elided,
        so that what it chose still shows."""
        lang, marks, fed = self.lang, dict(self.data.marks), last.fed
        before = tr("timeline.earlier", lang, count=earlier) if earlier else ""
        for keep in range(len(fed) // 2, -1, -1):
            short = replace(last, fed=(*fed[:keep], f"‹{len(fed) - 2 * keep}›", *fed[len(fed) - keep:]))
            line = before + round_line([short], lang, marks)
            if cell_len(line) <= width or not keep:
                return line
