"""What a refused input says in the CLI's English: the engine's error carries a cause (a code and its facts),
which the catalogue words (tinyllm_tui.tui.i18n.cause_words)."""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest

from tinyllm_tui.tui.i18n import cause_words


@contextmanager
def refused(kind: type[Exception], match: str):
    """As pytest.raises(kind, match=…), with `match` searched in the error's cause worded in English."""
    with pytest.raises(kind) as caught:
        yield caught
    said = cause_words(caught.value.cause, "en")
    assert re.search(match, said), f"{match!r} not in {said!r}"
