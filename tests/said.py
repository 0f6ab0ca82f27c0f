"""What a refused input says in the CLI's English: the engine's error carries a cause (a code and its facts),
which the catalogue words (tinyllm_tui.tui.i18n.cause_words); a file's error is located (`file:line: path: …`)."""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest

from tinyllm_tui.debugger.errors import bad_input, warning_words
from tinyllm_tui.tui.i18n import cause_words


def said(error: BaseException, lang: str = "en") -> str:
    """The one line the front end says for `error` (tinyllm_tui.debugger.errors.bad_input), worded in `lang`."""
    line = bad_input(error, lambda cause: cause_words(cause, lang))
    assert line is not None, f"not a bad input: {error!r}"
    return line


def warned(warning: Warning, lang: str = "en") -> str:
    """A warning's one line as the front end says it, worded in `lang`."""
    return warning_words(warning, lambda cause: cause_words(cause, lang))


@contextmanager
def refused(kind: type[Exception], match: str):
    """As pytest.raises(kind, match=…), with `match` searched in the error as the CLI words it in English."""
    with pytest.raises(kind) as caught:
        yield caught
    line = said(caught.value)
    assert re.search(match, line), f"{match!r} not in {line!r}"
