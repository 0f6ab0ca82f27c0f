"""KV-cache layouts: how one layer's K/V rows are stored, and what the attention reads back.

Every layout is an immutable `LayerCache`: `extend(xp, k, v, fault)` stores a chunk's new rows
and returns a `Read` — the keys and values the chunk's queries attend over, the sequence index
of each key row, and the cache to keep for the next chunk. The forward pass never branches on
the layout; it asks the Read which keys are visible.

- LayerCache (contiguous): every row, in order (the seed walkthrough's cache).
- RingCache: a sliding window's `window − 1` earlier rows in as many slots (plus `sinks` slots
  kept forever, StreamingLLM), written round robin after the chunk read them; the read holds the
  live slots in sequence order, then the chunk's rows (a query's window is itself and the
  window − 1 before it).
- PagedCache: fixed-size blocks in a pool of physical blocks and a block table per request
  (vLLM's PagedAttention); equal blocks are stored once and copied before a write (copy on write).
- QuantizedCache: rows stored as int8 codes with a scale per head or per token, or as float8
  (e4m3 / e5m2, through ml_dtypes) with a scale per head; the read dequantizes them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np

from engine import ops
from engine.arrays import namespace, to_host
from engine.state import DumpLayout, LayerState, Phrase, Positions, Size, StateView, evicted_positions

Array = Any
K_ITEM, V_ITEM = "cache_k", "cache_v"  # a K/V cache's dump items: blocks.L.attn.cache_k


def _kv_matrix(array, shape: tuple):
    """A dumped K or V cache [kv_head, position, d_head] as the engine's rows [position, kv_head·d_head]."""
    return np.transpose(array, (1, 0, 2)).reshape(array.shape[1], -1) if array.ndim == 3 else array


# how a dump lays out a K/V cache's items: [kv_head, position, d_head] (the attention kind lists them)
DUMP_LAYOUTS = dict.fromkeys((K_ITEM, V_ITEM), DumpLayout(
    _kv_matrix, lambda row, col, d_head: (col // d_head, row, col % d_head),
    lambda values, d_head: np.transpose(values.reshape(values.shape[0], -1, d_head), (1, 0, 2))))


class Layout(StrEnum):
    CONTIGUOUS = "contiguous"
    RING = "ring"
    PAGED = "paged"


class Quantize(StrEnum):
    NONE = "none"
    INT8 = "int8"
    FLOAT8_E4M3 = "float8_e4m3"
    FLOAT8_E5M2 = "float8_e5m2"


class ScaleAxis(StrEnum):
    PER_HEAD = "per_head"  # one scale per (token, kv head)
    PER_TOKEN = "per_token"  # one scale per token, over every head
    PER_TENSOR = "per_tensor"  # one scale for the whole chunk written (only an injected bug uses it)


@dataclass(frozen=True)
class CacheSpec:
    """A scenario's `cache:` mapping."""

    layout: Layout = Layout.CONTIGUOUS
    window: int | None = None  # ring: the model's sliding window unless the scenario names one
    sinks: int = 0  # first positions every query may read whatever the window (attention sinks)
    block_size: int = 16  # paged
    quantize: Quantize = Quantize.NONE
    scale: ScaleAxis = ScaleAxis.PER_HEAD


@dataclass(frozen=True, eq=False)
class Read:
    """What one chunk's queries attend over after its rows were stored."""

    k: Array  # (S, d_kv), rows in `index` order
    v: Array
    index: range | tuple[int, ...]  # the sequence index of each key row (0 = the first token fed)
    cache: LayerCache  # the cache to keep

    @property
    def columns(self) -> str | tuple[int, ...]:
        """How the key columns are labelled: "keys" (positions 0, 1, …) or their positions."""
        return "keys" if self.index == range(len(self.index)) else tuple(self.index)

    def visible(self, xp, n_new: int, window: int | None, sinks: int = 0) -> Array:
        """(T, S) booleans: a query reads keys at or before it, within `window` (sinks always)."""
        seen = self.cache.seen
        index = self.index
        keys = xp.arange(index.start, index.stop) if isinstance(index, range) else xp.asarray(index)
        return ops.causal_mask(xp, xp.arange(seen - n_new, seen), keys, window, sinks)


@dataclass(frozen=True)
class RingFacts:
    """What a cache view shows of a ring buffer."""

    slots: ClassVar[bool] = True  # its rows are slots written round robin, not positions in order (engine.state)
    window: int
    sinks: int
    write: int  # the slot the next token goes to
    evicted: int  # fed tokens no slot holds any more
    gone: tuple[int, ...] = field(default=(), compare=False)  # which positions those are (the line spans them);
    # not compared: they follow from the cache as the count does

    def words(self) -> tuple[str, dict]:
        sinks = Phrase("cache.ring.sinks", {"count": self.sinks}) if self.sinks else ""
        return "cache.ring", {"window": self.window, "sinks": sinks, "write": self.write,
                              "evicted": Positions(self.gone)}


@dataclass(frozen=True)
class PagedFacts:
    """What a cache view shows of a paged cache: the block table and which blocks are shared."""

    block_size: int
    table: tuple[int, ...]  # logical block -> physical block
    shared: tuple[bool, ...]  # per table entry: another request's table points at it too
    blocks: int  # physical blocks in the pool

    def words(self) -> tuple[str, dict]:
        table = " ".join(f"{block}{'*' * shared}" for block, shared in zip(self.table, self.shared))
        return "cache.paged", {"size": self.block_size, "table": table, "blocks": self.blocks}


SCALE_WORDS = {ScaleAxis.PER_HEAD: "cache.scale.per_head", ScaleAxis.PER_TOKEN: "cache.scale.per_token"}


@dataclass(frozen=True)
class QuantizedFacts:
    quantize: Quantize
    scale: ScaleAxis
    nbytes: int  # codes and scales, what the cache really stores
    exact_nbytes: int  # the same rows unquantized

    def words(self) -> tuple[str, dict]:
        return "cache.quantized", {"kind": self.quantize.value, "scale": Phrase(SCALE_WORDS[self.scale]),
                                   "stored": Size(self.nbytes), "exact": Size(self.exact_nbytes)}


@dataclass(frozen=True, eq=False)
class LayerCache:
    """One layer's contiguous KV cache: K and V rows, one per position fed. An engine.state.LayerState."""

    k: Array  # (S, n_kv_heads·dh)
    v: Array  # (S, n_kv_heads·dh)
    fingerprint: str  # the weights these rows were computed with
    head_width: int = 0  # dh (0: a row is one head): the transposed-K bug and per-head scales split by it
    appends_rows: ClassVar[bool] = True  # a later cache is this one's rows and more (a kept history stores the new)
    module: ClassVar[str] = "attn"  # its dump items are the attention's: blocks.L.attn.cache_k

    @property
    def length(self) -> int:
        return int(self.k.shape[0])

    @property
    def seen(self) -> int:
        """How many tokens were fed through this cache (more than it holds once a ring evicts)."""
        return self.length

    @property
    def nbytes(self) -> int:
        return array_bytes(self.k) + array_bytes(self.v)

    @property
    def row_positions(self) -> tuple[int, ...]:
        """The sequence position of each row of k/v (−1: an empty slot)."""
        return tuple(range(self.length))

    @property
    def facts(self) -> RingFacts | PagedFacts | QuantizedFacts | None:
        """What a view shows of the layout beside the rows (None: a contiguous cache)."""
        return None

    def fresh(self, fingerprint: str) -> LayerCache:
        """An empty cache for the next request, run with the weights `fingerprint` names (a paged cache
        keeps its pool of blocks: a block is shared only where its rows are equal)."""
        return dataclasses.replace(self, k=self.k[:0, ...], v=self.v[:0, ...], fingerprint=fingerprint)

    def extend(self, xp, k: Array, v: Array, fault) -> Read:
        """Store a chunk's new K/V rows; its fault points: how K is stored (and, per layout, the ring slot,
        the block-table entry, what shares a quantization scale)."""
        k = fault.stored_k(xp, k, self.head_width or int(k.shape[1]))
        cache = dataclasses.replace(self, k=xp.concat([self.k, k], axis=0), v=xp.concat([self.v, v], axis=0))
        return Read(cache.k, cache.v, range(cache.length), cache)

    # -- the LayerState protocol (engine.state) ------------------------------------------------------
    def views(self) -> tuple[StateView, StateView]:
        width = self.head_width or int(self.k.shape[1])
        return StateView("K", self.k, width), StateView("V", self.v, width)

    def dump_items(self) -> dict[str, Array]:
        return {K_ITEM: self.k, V_ITEM: self.v}

    def cell(self, item: str, row: int, col: int, position: str) -> tuple[str, dict] | None:
        """A cell of K or V as a comparison names it, a cause code and its facts: its kv head, position and column
        within the head (None: an item of another layout's, a latent cache's)."""
        if item not in DUMP_LAYOUTS:
            return None
        width = self.head_width or int(self.k.shape[1])
        return "against.kv", {"kv_head": col // width, "position": position, "d_head": col % width}

    def differing(self, theirs, beyond) -> frozenset[int]:
        """Rows (positions) whose K or V differs from theirs, and rows theirs does not have."""
        rows: set[int] = set()
        for name, ours in self.dump_items().items():
            if name not in theirs:
                continue
            ours, other = np.asarray(to_host(ours), dtype=np.float64), theirs[name]
            if other is None:  # another width: every row differs
                rows.update(range(ours.shape[0]))
                continue
            shared = min(len(ours), len(other))
            differ = beyond(name, ours[:shared], np.asarray(other[:shared], np.float64))
            rows.update(np.flatnonzero(differ.any(axis=1)).tolist())
            rows.update(range(shared, len(ours)))
        positions = self.row_positions
        return frozenset(positions[row] for row in rows)

    def delta(self, older: LayerState | None) -> RowsDelta:
        """The rows added since `older` when it is a prefix of this cache (cached decode, bit for bit), else all
        of it; a layout that does not only append rows (ring, paged, quantized) is kept whole as it is."""
        if not self.appends_rows:
            return RowsDelta(self.k, self.v, True, self)
        xp = namespace(self.k)  # copies: a view would keep the whole newer cache alive
        empty = dataclasses.replace(self, k=xp.asarray(self.k[:0, ...], copy=True),
                                    v=xp.asarray(self.v[:0, ...], copy=True))
        n = 0 if older is None else older.length
        if not isinstance(older, LayerCache) or self.length < n or self.fingerprint != older.fingerprint or not (
                _same(self.k[:n, ...], older.k) and _same(self.v[:n, ...], older.v)):
            return RowsDelta(self.k, self.v, True, empty)
        return RowsDelta(xp.asarray(self.k[n:, ...], copy=True), xp.asarray(self.v[n:, ...], copy=True), False, empty)


@dataclass(frozen=True)
class RowsDelta:
    """A K/V cache at a kept round start: all of it, or the rows after the previous kept one's."""

    k: Array
    v: Array
    whole: bool
    empty: LayerCache  # the cache's layout and fields without its rows (or the whole cache, not only rows)

    @property
    def nbytes(self) -> int:
        return array_bytes(self.k) + array_bytes(self.v)

    def after(self, earlier: RowsDelta) -> RowsDelta:
        if self.whole:
            return self
        xp = namespace(self.k)
        return RowsDelta(xp.concat([earlier.k, self.k], axis=0), xp.concat([earlier.v, self.v], axis=0),
                         earlier.whole, self.empty)

    def restore(self, earlier: list[RowsDelta]) -> LayerCache:
        if not self.empty.appends_rows:
            return self.empty
        xp = namespace(self.k)
        parts = [*earlier, self]
        return dataclasses.replace(self.empty, k=xp.concat([p.k for p in parts], axis=0),
                                   v=xp.concat([p.v for p in parts], axis=0))


def _same(a: Array, b: Array) -> bool:
    """Bit for bit, as far as floats go: equal, and −0.0 is not 0.0 (NaN is never the same)."""
    xp = namespace(a)
    return a.shape == b.shape and bool(xp.all(a == b)) and bool(xp.all(xp.signbit(a) == xp.signbit(b)))


def array_bytes(array: Array) -> int:
    """An array's bytes in any namespace (array_api_strict's arrays have no `nbytes`)."""
    if hasattr(array, "nbytes"):
        return int(array.nbytes)
    xp = namespace(array)
    kind = xp.finfo if xp.isdtype(array.dtype, "real floating") else xp.iinfo
    return math.prod(array.shape) * kind(array.dtype).bits // 8


# -- ring buffer --------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class RingCache(LayerCache):
    """`sinks + window − 1` physical slots (at least one past the sinks): k/v are the slots in
    physical order; `slots[s]` is the sequence index slot s holds (−1: empty), `written` how many
    tokens were fed."""

    appends_rows: ClassVar[bool] = False
    window: int = 1
    sinks: int = 0
    slots: tuple[int, ...] = ()
    written: int = 0

    @property
    def seen(self) -> int:
        return self.written

    @property
    def length(self) -> int:
        return sum(index >= 0 for index in self.slots)

    @property
    def write_position(self) -> int:
        """The slot the next token goes to."""
        return ring_slot(self.written, self.sinks, len(self.slots) - self.sinks)

    @property
    def evicted(self) -> int:
        """How many fed tokens no slot holds any more."""
        return self.written - self.length

    @property
    def row_positions(self) -> tuple[int, ...]:
        return self.slots

    @property
    def facts(self) -> RingFacts:
        return RingFacts(self.window, self.sinks, self.write_position, self.evicted, evicted_positions(self))

    def row_place(self, row: int) -> tuple[str, dict]:
        """Row `row` is slot `row`; `next`: the next token is written to it."""
        return "slot", {"slot": row, "next": row == self.write_position}

    def fresh(self, fingerprint: str) -> RingCache:
        return dataclasses.replace(self, slots=(-1,) * len(self.slots), written=0, fingerprint=fingerprint)

    def extend(self, xp, k, v, fault) -> Read:
        k = fault.stored_k(xp, k, self.head_width)
        live = sorted((index, slot) for slot, index in enumerate(self.slots) if index >= 0)
        order = xp.asarray([slot for _, slot in live], dtype=xp.int64)
        new_index = range(self.written, self.written + k.shape[0])
        read_k = xp.concat([xp.take(self.k, order, axis=0), k], axis=0)
        read_v = xp.concat([xp.take(self.v, order, axis=0), v], axis=0)
        index = tuple(i for i, _ in live) + tuple(new_index)
        rows_k = [self.k[slot, ...] for slot in range(len(self.slots))]
        rows_v = [self.v[slot, ...] for slot in range(len(self.slots))]
        slots = list(self.slots)
        for row, i in enumerate(new_index):
            slot = fault.ring_slot(i, self.sinks, len(self.slots) - self.sinks)
            rows_k[slot], rows_v[slot], slots[slot] = k[row, ...], v[row, ...], i
        cache = dataclasses.replace(self, k=xp.stack(rows_k), v=xp.stack(rows_v), slots=tuple(slots),
                                    written=self.written + k.shape[0])
        return Read(read_k, read_v, index, cache)


def ring_slot(index: int, sinks: int, size: int) -> int:
    """The slot a token at sequence `index` is written to: its own sink slot, else round robin
    over the `size` slots after the sinks."""
    return index if index < sinks else sinks + (index - sinks) % size


# -- paged --------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Pool:
    """Physical blocks shared by every request of a session, one pool per layer (immutable)."""

    k: tuple[Array, ...] = ()  # (fill, d_kv) per physical block
    v: tuple[Array, ...] = ()
    digests: tuple[str, ...] = ()  # what a block holds, with the block before it in its table
    refs: tuple[int, ...] = ()  # how many block-table entries point at each block

    def put(self, block: int | None, k: Array, v: Array, digest: str) -> tuple[Pool, int]:
        """Store rows as block `block` (None: a new one); an equal block already stored is shared."""
        for other, known in enumerate(self.digests):
            if known == digest and other != block:
                pool = self if block is None else self._unref(block)
                return pool._ref(other, +1), other
        if block is None:
            return Pool(self.k + (k,), self.v + (v,), self.digests + (digest,), self.refs + (1,)), len(self.k)
        return self._set(block, k=k, v=v, digests=digest), block

    def _set(self, block: int, **fields) -> Pool:
        changes = {name: tuple(value if i == block else old for i, old in enumerate(getattr(self, name)))
                   for name, value in fields.items()}
        return dataclasses.replace(self, **changes)

    def _ref(self, block: int, delta: int) -> Pool:
        return self._set(block, refs=self.refs[block] + delta)

    def _unref(self, block: int) -> Pool:
        return self._ref(block, -1)


@dataclass(frozen=True, eq=False)
class PagedCache(LayerCache):
    """k/v hold the request's rows gathered through its block table (what the attention reads)."""

    appends_rows: ClassVar[bool] = False
    block_size: int = 16
    pool: Pool = Pool()
    table: tuple[int, ...] = ()  # logical block -> physical block

    @property
    def facts(self) -> PagedFacts:
        return PagedFacts(self.block_size, self.table, tuple(self.shared(b) for b in self.table), len(self.pool.k))

    def slot_of(self, position: int) -> tuple[int, int]:
        """(physical block, row in it) of the token at `position`."""
        logical, row = divmod(position, self.block_size)
        return self.table[logical], row

    def row_place(self, row: int) -> tuple[str, dict]:
        """Row `row` (position `row`) lies in a physical block of the pool, at a row of it."""
        block, offset = self.slot_of(row)
        return "block", {"block": block, "row": offset}

    def fresh(self, fingerprint: str) -> PagedCache:
        return dataclasses.replace(super().fresh(fingerprint), table=())

    def shared(self, block: int) -> bool:
        return self.pool.refs[block] > 1

    def extend(self, xp, k, v, fault) -> Read:
        k = fault.stored_k(xp, k, self.head_width)
        pool, table, length, size = self.pool, list(self.table), self.length, self.block_size
        start = 0
        while start < k.shape[0]:
            logical, offset = divmod(length + start, size)
            take = min(size - offset, k.shape[0] - start)
            chunk_k, chunk_v = k[start : start + take, ...], v[start : start + take, ...]
            if offset:  # append to a partly filled block: copy it first if another table shares it
                old = table[logical]
                chunk_k = xp.concat([pool.k[old], chunk_k], axis=0)
                chunk_v = xp.concat([pool.v[old], chunk_v], axis=0)
                target = None if pool.refs[old] > 1 else old
                if target is None:
                    pool = pool._unref(old)
            else:
                target = None
            parent = table[logical - 1] if logical else -1
            pool, physical = pool.put(target, chunk_k, chunk_v, _digest(parent, chunk_k, chunk_v))
            entry = physical if offset else fault.table_entry(physical, table[:logical])
            table[logical:logical + 1] = [entry]
            start += take
        rows = [(pool.k[b], pool.v[b]) for b in table]
        gathered_k = xp.concat([r[0] for r in rows], axis=0)[: length + k.shape[0], ...]
        gathered_v = xp.concat([r[1] for r in rows], axis=0)[: length + k.shape[0], ...]
        cache = dataclasses.replace(self, k=gathered_k, v=gathered_v, pool=pool, table=tuple(table))
        return Read(gathered_k, gathered_v, range(cache.length), cache)


def _digest(parent: int, k: Array, v: Array) -> str:
    digest = hashlib.sha256(str(parent).encode())
    for rows in (k, v):
        digest.update(np.ascontiguousarray(to_host(rows)).tobytes())
    return digest.hexdigest()


# -- quantized ----------------------------------------------------------------------------------
QMAX = {Quantize.INT8: 127.0, Quantize.FLOAT8_E4M3: 448.0, Quantize.FLOAT8_E5M2: 57344.0}


@dataclass(frozen=True, eq=False)
class QuantizedCache(LayerCache):
    """k/v hold the dequantized rows (what the attention reads); codes and scales what is stored."""

    appends_rows: ClassVar[bool] = False
    quantize: Quantize = Quantize.INT8
    scale: ScaleAxis = ScaleAxis.PER_HEAD
    codes: tuple[np.ndarray, np.ndarray] | None = None  # K and V codes, (S, d_kv)
    scales: tuple[np.ndarray, np.ndarray] | None = None  # (S, groups)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (*(self.codes or ()), *(self.scales or ())))

    @property
    def facts(self) -> QuantizedFacts:
        return QuantizedFacts(self.quantize, self.scale, self.nbytes, array_bytes(self.k) + array_bytes(self.v))

    def fresh(self, fingerprint: str) -> QuantizedCache:
        return dataclasses.replace(super().fresh(fingerprint), codes=None, scales=None)

    def extend(self, xp, k, v, fault) -> Read:
        k = fault.stored_k(xp, k, self.head_width)
        axis = fault.scale_axis(self.scale)
        stored = [quantize(to_host(x), self.quantize, axis, self.head_width) for x in (k, v)]
        codes = tuple(c if self.codes is None else np.concatenate([old, c]) for old, (c, _) in
                      zip(self.codes or (None, None), stored))
        scales = tuple(s if self.scales is None else np.concatenate([old, s]) for old, (_, s) in
                       zip(self.scales or (None, None), stored))
        new_k, new_v = (xp.asarray(dequantize(c, s, self.head_width), dtype=k.dtype) for c, s in stored)
        cache = dataclasses.replace(self, k=xp.concat([self.k, new_k], axis=0), v=xp.concat([self.v, new_v], axis=0),
                                    codes=codes, scales=scales)
        return Read(cache.k, cache.v, range(cache.length), cache)


def _groups(x: np.ndarray, axis: ScaleAxis, head_width: int) -> np.ndarray:
    """(T, d) -> (T, groups, width): the rows split by what shares a scale."""
    t = x.shape[0]
    if axis is ScaleAxis.PER_HEAD:
        return x.reshape(t, -1, head_width)
    if axis is ScaleAxis.PER_TOKEN:
        return x.reshape(t, 1, -1)
    return x.reshape(1, 1, -1)


def quantize(x: np.ndarray, kind: Quantize, axis: ScaleAxis, head_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows -> (codes (T, d), scales (T, groups)): each group divided by max|x| / the format's largest value."""
    groups = _groups(x, axis, head_width)
    amax = np.max(np.abs(groups), axis=-1, keepdims=True)
    scale = np.where(amax > 0, amax / QMAX[kind], 1.0)
    scaled = groups / scale
    if kind is Quantize.INT8:
        codes = np.clip(np.rint(scaled), -127, 127).astype(np.int8)
    else:
        import ml_dtypes  # only a float8 cache needs it: not loaded with every session

        codes = scaled.astype(ml_dtypes.float8_e4m3fn if kind is Quantize.FLOAT8_E4M3 else ml_dtypes.float8_e5m2)
    t = x.shape[0]
    scale = np.broadcast_to(scale, (*groups.shape[:2], 1)).reshape(groups.shape[0], -1)
    if scale.shape[0] != t:  # one scale for the whole chunk: repeat it per token
        scale = np.repeat(scale, t, axis=0)
    return codes.reshape(t, -1), scale


def dequantize(codes: np.ndarray, scales: np.ndarray, head_width: int) -> np.ndarray:
    t, groups = scales.shape
    rows = codes.astype(np.float64).reshape(t, groups, -1)
    return (rows * scales[:, :, None]).reshape(t, -1)


def empty_cache(spec: CacheSpec, xp, width: int, head_width: int, dtype, fingerprint: str,
                window: int | None) -> LayerCache:
    """One layer's empty cache in `spec`'s layout (a ring only where the layer has a window)."""
    empty = xp.zeros((0, width), dtype=dtype)
    common = dict(k=empty, v=empty, fingerprint=fingerprint, head_width=head_width)
    if spec.quantize is not Quantize.NONE:
        return QuantizedCache(**common, quantize=spec.quantize, scale=spec.scale)
    if spec.layout is Layout.RING and window is not None:
        slots = spec.sinks + max(window - 1, 1)
        full = xp.zeros((slots, width), dtype=dtype)
        return RingCache(**{**common, "k": full, "v": full}, window=window, sinks=spec.sinks, slots=(-1,) * slots)
    if spec.layout is Layout.PAGED:
        return PagedCache(**common, block_size=spec.block_size)
    return LayerCache(**common)
