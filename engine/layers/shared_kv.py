"""The state of a KV-shared attention layer (Gemma 4's `num_kv_shared_layers`): it keeps no K/V of its own.

Its queries attend over what an earlier layer of the same type (its source) read in the same pass; the
source hands that read over (`reading`), and the layer holds it only until the next pass. So it holds no
rows and no bytes, dumps nothing, and a kept round start stores nothing: the source's own state is what
time travel, the dump and the comparisons see. Its one fact is where it reads (`SharedFacts`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from engine.state import StateView



@dataclass(frozen=True)
class SharedFacts:
    """What a cache view shows of a KV-shared layer: the layer whose cache it reads."""

    source: int

    def words(self) -> tuple[str, dict]:
        return "cache.shared", {"source": self.source}


@dataclass(frozen=True, eq=False)
class SharedKV:
    """An engine.state.LayerState of no rows: `read` is the source's read of this pass (None before it ran)."""

    source: int
    fingerprint: str
    read: Any = None  # engine.caches.Read: the source's keys, values and their positions
    module: ClassVar[str] = "attn"

    @property
    def length(self) -> int:
        return 0

    @property
    def seen(self) -> int:
        return 0 if self.read is None else self.read.cache.seen

    @property
    def nbytes(self) -> int:
        return 0

    @property
    def row_positions(self) -> tuple[int, ...]:
        return ()

    @property
    def facts(self) -> SharedFacts:
        return SharedFacts(self.source)

    def reading(self, read) -> SharedKV:
        """This layer once its source has read `read` in the current pass."""
        return dataclasses.replace(self, read=read)

    def fresh(self, fingerprint: str) -> SharedKV:
        return SharedKV(self.source, fingerprint)

    def views(self) -> tuple[StateView, ...]:
        return ()

    def delta(self, older) -> Nothing:
        return Nothing(self.fresh(self.fingerprint))

    def dump_items(self) -> dict[str, Any]:
        return {}

    def differing(self, theirs, beyond) -> frozenset[int]:
        return frozenset()


@dataclass(frozen=True)
class Nothing:
    """A KV-shared layer at a kept round start: nothing but where it reads (its source runs first in a pass)."""

    state: SharedKV
    whole: bool = True
    nbytes: int = 0

    def after(self, earlier) -> Nothing:
        return self

    def restore(self, earlier) -> SharedKV:
        return self.state


class SharedKvOwnCache:
    """A KV-shared layer attending over its own cache in a cached round: nothing was written there but the
    chunk's rows, so it reads the new tokens' keys only (a bug of attention's `shared_read` point)."""

    def shared_read(self, read, n_new):
        if read.cache.seen == n_new:  # a prefill (or a full recompute): the source read only the chunk too
            return read
        index = tuple(read.index)[-n_new:]
        return dataclasses.replace(read, k=read.k[-n_new:, ...], v=read.v[-n_new:, ...], index=index)

    def unseen(self, scenario):
        shared = any(block.kv_source is not None for block in scenario.model.blocks)
        return None if shared else ("fault.no_shared_kv", {})


# the words of its causes and of its state's line, per language (attention, the kind it is part of, offers them
# among its own)
CAUSES = {"en": {"fault.no_shared_kv": "the model has no KV-shared layer (num_kv_shared_layers)",
                 "cache.shared": "KV-shared: reads layer {source}'s cache, holds no K/V of its own (0 B)"},
          "zh": {"fault.no_shared_kv": "模型没有共享 KV 的层（num_kv_shared_layers）",
                 "cache.shared": "KV共享：读取第{source}层的缓存，自身不存K/V（0 B）"}}
BUGS = (SharedKvOwnCache,)
