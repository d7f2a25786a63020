"""The shuffle stage: between the ingest's acknowledgement and the fold, reports leave their upload and their order.

Ingest appends every accepted upload (one client batch) to its shard's **held** stream
(:func:`~ldptel.storage.keys.held`): one entry per upload, in arrival order, so that entry links the upload's
reports to each other (one device) and its place tells when it came. The shuffle stage turns held uploads into
**blocks** in the stream the fold reads (:func:`~ldptel.storage.keys.stream`): a block is one ordinary wire batch
holding the reports of ≥ ``n_min`` uploads of one (version, UTC day, breakdown cell), in a uniformly random order
drawn from the OS CSPRNG, with an all-zero batch id. Nothing in a block or its entry says which reports came
together or in which order: its entry id carries only the UTC day of the release (never a time), and the
dedupe key of every upload in it loses its content digest (which would let a reader test candidate subsets of
the block) in the same step. The entry id is "<start of the block's UTC day>-<sequence>", like an ingest entry's:
the order of blocks is all it tells.

Release rule, per (version, day, cell) group of held uploads: a block is cut as soon as ≥ ``n_min`` uploads are
held (all of them, up to ``MAX_BLOCK_BYTES`` per block); otherwise when the group's oldest upload has been held
``hold_seconds`` (counted from when a running shuffler first saw it: no arrival time is stored anywhere, so the
shuffler keeps in memory only a few (time, last id seen) marks per shard), the group is released anyway as a
block **below n_min**, counted in :class:`ReleaseStats` so the central ε says "not applicable" for its day.
Acknowledged data is never dropped.

Exactly once: one Lua script (``shuffle.lua``) per block checks that every held entry it consumes still exists,
then XADDs the block, XDELs the held entries, rewrites their dedupe values and counts the release statistics.
Redis applies and logs the script's effects as one MULTI/EXEC, so a kill -9 of the shuffler, the fold or Redis at
any moment leaves either the block and no held entries, or the held entries and no block; a second shuffler
racing for the same entries finds one gone and writes nothing. All keys carry the shard's hash tag (Redis Cluster).

At rest: held uploads are the only linkable data, for at most the hold bound. XDEL frees a stream node once all of
its entries are gone, so deleted bytes outlive their release only beside still-held neighbours. The AOF keeps the
original appends until it is rewritten: :func:`purge_aof` asks Redis for a rewrite (BGREWRITEAOF, only where the
AOF is on) at most every ``purge_seconds`` after a release, so the log also forgets held uploads within
``hold_seconds + purge_seconds`` (docs/shuffle.md has the threat model and the proofs).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel.client.errors import LdpError
from ldptel.client.mechanisms import ReportBatch, mechanism_of
from ldptel.client.protocol.specs import Params
from ldptel.client.protocol.validate import check_int, check_number
from ldptel.client.protocol.wire import decode_batch, encode_batch
from ldptel.storage import keys
from ldptel.storage.append import _day_start_ms, utc_day
from ldptel.storage.client import is_cluster
from ldptel.storage.sketches import StreamId, parse_id

__all__ = [
    "DEFAULT_HOLD_SECONDS",
    "DEFAULT_N_MIN",
    "MAX_BLOCK_BYTES",
    "PassResult",
    "ReleaseStats",
    "ShuffleConfig",
    "Shuffler",
    "permutation",
    "purge_aof",
    "release_stats",
    "shuffle_batches",
]

log = logging.getLogger(__name__)

DEFAULT_N_MIN = 100  # distinct uploads a block must hold (unless released at the hold bound)
DEFAULT_HOLD_SECONDS = 3600.0  # longest time an upload is held before its group is released anyway
DEFAULT_PURGE_SECONDS = 3600.0  # least time between two AOF rewrites a shuffler asks for (a rewrite is not cheap)
MAX_BLOCK_BYTES = 64 << 20  # a block's batch bytes (one script argument); a larger group is cut into several
DEFAULT_PASS_ENTRIES = 10_000  # held entries read per pass and shard (oldest first)
CACHE_BYTES = 256 << 20  # held uploads' bytes a shuffler keeps in memory between passes (beyond: read at release)
ZERO_BATCH_ID = bytes(16)
_LUA = resources.files(__package__).joinpath("shuffle.lua").read_text(encoding="utf-8")
_STATS = ("reports", "blocks", "below", "min_reports", "min_uploads", "min_distinct", "n_min")
_SMALL_FIELDS_SKIP = frozenset({b"b", b"n"})  # every other field of a held entry is part of its group


def _env_int(name: str, default: int, low: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    check_int(name, value, low, 1 << 31)
    return value


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    check_number(name, value, 0.0, 30 * 86400.0)
    return value


@dataclass(frozen=True, kw_only=True)
class ShuffleConfig:
    """The shuffle stage's settings (``ldptel aggregate --shuffle-*``; environment ``LDPTEL_SHUFFLE_N_MIN``,
    ``LDPTEL_SHUFFLE_HOLD_SECONDS``, ``LDPTEL_SHUFFLE_PURGE_SECONDS``).

    n_min: distinct uploads a block needs (≥ 1). hold_seconds: how long an upload may be held before its group
    is released below n_min (0: at once). purge_seconds: least time between two AOF rewrites asked by this
    shuffler (None: ``DEFAULT_PURGE_SECONDS``, an hour, whatever the hold: a rewrite writes the whole dataset). n_min_by_metric: per-metric n_min overrides. max_block_uploads: most
    uploads in one block, if n_min allows (0: no limit but ``max_block_bytes``; the test suite uses 1 with n_min 1, so one upload
    is one block and entry counts stay as they were before the stage).
    """

    n_min: int = field(default_factory=lambda: _env_int("LDPTEL_SHUFFLE_N_MIN", DEFAULT_N_MIN, 1))
    hold_seconds: float = field(
        default_factory=lambda: _env_seconds("LDPTEL_SHUFFLE_HOLD_SECONDS", DEFAULT_HOLD_SECONDS))
    purge_seconds: float | None = field(
        default_factory=lambda: _env_seconds("LDPTEL_SHUFFLE_PURGE_SECONDS", -1.0) if os.environ.get(
            "LDPTEL_SHUFFLE_PURGE_SECONDS", "").strip() else None)
    n_min_by_metric: tuple[tuple[str, int], ...] = ()
    max_block_uploads: int = field(default_factory=lambda: _env_int("LDPTEL_SHUFFLE_MAX_BLOCK_UPLOADS", 0, 0))
    max_block_bytes: int = MAX_BLOCK_BYTES
    pass_entries: int = DEFAULT_PASS_ENTRIES

    def __post_init__(self) -> None:
        check_int("n_min", self.n_min, 1, 1 << 31)
        check_number("hold_seconds", self.hold_seconds, 0.0, 30 * 86400.0)
        if self.purge_seconds is not None:
            check_number("purge_seconds", self.purge_seconds, 0.0, 30 * 86400.0)
        for _, n in self.n_min_by_metric:
            check_int("n_min", n, 1, 1 << 31)
        check_int("max_block_uploads", self.max_block_uploads, 0, 1 << 31)
        check_int("max_block_bytes", self.max_block_bytes, 1, 1 << 31)
        check_int("pass_entries", self.pass_entries, 1, 1 << 31)

    def n_min_for(self, metric: str, stored: int | None = None) -> int:
        """The n_min of ``metric``: this shuffler's per-metric override, else the registry's ``stored`` value (the
        metric's ``shuffle_n_min``), else :attr:`n_min`."""
        return dict(self.n_min_by_metric).get(metric, self.n_min if stored is None else stored)


@dataclass(frozen=True, kw_only=True)
class PassResult:
    """What one :meth:`Shuffler.shuffle` pass did on one shard."""

    blocks: int = 0
    reports: int = 0
    uploads: int = 0
    below_n_min: int = 0  # of the blocks, released at the hold bound with fewer than n_min uploads
    held: int = 0  # held entries read and left held (the group is still below n_min and not due)


@dataclass(frozen=True, kw_only=True)
class ReleaseStats:
    """What the shuffle stage released for one (metric, version, UTC day, cell), summed over shards.

    A database reader sees each block on its own, so the n a central ε may use is the smallest block's.
    """

    reports: int  # reports released (sum over blocks)
    blocks: int
    smallest_block: int  # fewest reports in one block
    smallest_block_uploads: int  # fewest distinct uploads in one block
    n_min: int  # the smallest n_min a block of the day was cut with
    below_n_min: int = 0  # blocks released at the hold bound with fewer than n_min uploads
    distinct_smallest: int = 0  # fewest distinct report payloads in one block (memoized copies count once)

    @property
    def applicable(self) -> bool:
        """Every block of the day held ≥ n_min uploads (none was released at the hold bound)."""
        return self.below_n_min == 0 and self.blocks > 0


class Shuffler:
    """Releases held uploads of shards as shuffled blocks. One per process; ``params_of(metric, version)`` gives a
    version's params (the fold worker's registry cache), ``n_min_of(metric)`` the metric's ``shuffle_n_min`` in the
    registry (None: not set; see :meth:`ShuffleConfig.n_min_for`). Safe to run beside other shufflers (each block is
    released by one script that checks its entries are still held), but one per shard is what keeps it cheap
    (the fold worker shuffles the shards it leases)."""

    def __init__(self, r: redis_lib.Redis, params_of: Callable[[str, int], Params],
                 config: ShuffleConfig | None = None, *, n_min_of: Callable[[str], int | None] | None = None) -> None:
        self.r = r
        self.config = config or ShuffleConfig()
        self._params_of = params_of
        self._n_min_of = n_min_of
        self._release = r.register_script(_LUA)
        self._marks: dict[tuple[str, int], list[tuple[float, StreamId]]] = defaultdict(list)
        self._index: dict[tuple[str, int], _HeldIndex] = {}
        self._cached = 0  # bytes of held uploads kept in the indexes
        self._last_purge: dict[str, float] = {}
        self._dirty: dict[str, str] = {}  # node name → a key it holds: released on since its last AOF rewrite
        self._started = time.monotonic()  # the first rewrite is asked purge_seconds after start (or at finish)

    def shuffle(self, metric: str, shard: int, *, flush: bool = False) -> PassResult:
        """One pass over a shard's held uploads: read the ones appended since the last pass (up to
        ``pass_entries``), then release every group that has ≥ n_min uploads or whose oldest upload is due;
        ``flush`` releases every group now (below n_min if short).

        Each upload is read once into an in-memory index (its bytes kept while the index holds less than
        ``CACHE_BYTES``, else read again at its release), so a pass costs what arrived since the last one. A
        release that finds an upload gone (another shuffler took it) drops the index: the next pass rebuilds it."""
        cfg = self.config
        held_key = keys.held(metric, shard)
        index = self._index.setdefault((metric, shard), _HeldIndex())
        low = "-" if index.cursor is None else "(" + index.cursor.decode()
        entries: list[tuple[bytes, dict[bytes, bytes]]] = self.r.xrange(  # type: ignore[assignment]
            held_key, low, "+", count=cfg.pass_entries)
        for eid, fields in entries:
            data = fields.pop(b"b", b"")
            keep = self._cached + len(data) <= CACHE_BYTES
            self._cached += len(data) if keep else 0
            group = tuple(sorted((k, v) for k, v in fields.items() if k not in _SMALL_FIELDS_SKIP))
            index.groups.setdefault(group, []).append(_Held(eid, fields, data if keep else None, len(data)))
            index.cursor = eid
        if not index.groups:
            self._marks.pop((metric, shard), None)
            if self._dirty:
                self.maybe_purge()
            return PassResult()
        due = self._due_through(metric, shard, time.monotonic(), parse_id(index.cursor or b"0-0"))
        n_min = cfg.n_min_for(metric, None if self._n_min_of is None else self._n_min_of(metric))
        blocks = reports = uploads = below = 0
        for group_key, members in list(index.groups.items()):
            overdue = flush or (due is not None and parse_id(members[0].eid) <= due)
            for block in _cut(members, n_min=n_min, max_bytes=cfg.max_block_bytes, max_uploads=cfg.max_block_uploads,
                              overdue=overdue):
                released = self._release_block(metric, shard, dict(group_key), self._with_bytes(held_key, block),
                                               n_min=n_min)
                self._forget(block)
                taken = {h.eid for h in block}
                members[:] = [h for h in members if h.eid not in taken]
                if released is None:  # the index is stale: rebuilt from the stream next pass
                    self._drop_index(metric, shard)
                    return self._result(held_key, blocks, reports, uploads, below, 0)
                blocks += 1
                reports += released
                uploads += len(block)
                below += len(block) < n_min
            if not members:
                del index.groups[group_key]
        held = sum(len(m) for m in index.groups.values())
        return self._result(held_key, blocks, reports, uploads, below, held)

    def _result(self, held_key: str, blocks: int, reports: int, uploads: int, below: int, held: int) -> PassResult:
        if blocks:
            self._dirty[_node_name(self.r, held_key)] = held_key
        if self._dirty:
            self.maybe_purge()
        return PassResult(blocks=blocks, reports=reports, uploads=uploads, below_n_min=below, held=held)

    def _with_bytes(self, held_key: str, block: list[_Held]) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """The block's entries with their bytes (read again for the ones the index did not keep)."""
        missing = [h.eid for h in block if h.data is None]
        fetched: dict[bytes, bytes] = {}
        if missing:
            pipe = self.r.pipeline(transaction=False)
            for eid in missing:
                pipe.xrange(held_key, eid, eid, count=1)
            for found in pipe.execute():
                for eid, fields in found:
                    fetched[eid] = fields.get(b"b", b"")
        return [(h.eid, {**h.fields, b"b": h.data if h.data is not None else fetched.get(h.eid, b"")})
                for h in block]

    def _forget(self, block: list[_Held]) -> None:
        self._cached -= sum(h.size for h in block if h.data is not None)

    def _drop_index(self, metric: str, shard: int) -> None:
        index = self._index.pop((metric, shard), None)
        if index is not None:
            for members in index.groups.values():
                self._forget(members)

    def maybe_purge(self, *, wait: bool = False) -> None:
        """Ask every node this shuffler released on since its last AOF rewrite for a new one (:func:`purge_aof`),
        at most every ``purge_seconds``, the first one ``purge_seconds`` after this shuffler started (``wait``: now, waiting for a rewrite under way to end first; the fold
        worker calls it once at shutdown). A rewrite that starts after a release leaves none of the released
        uploads' appends in the log; until one starts, the node stays on the list."""
        interval = DEFAULT_PURGE_SECONDS if self.config.purge_seconds is None else self.config.purge_seconds
        now = time.monotonic()
        for node, key in list(self._dirty.items()):
            if not wait and now - self._last_purge.get(node, self._started) < interval:
                continue
            started = purge_aof(self.r, key, wait_seconds=30.0 if wait else 0.0)
            if started is not None:
                self._last_purge[node] = now
                del self._dirty[node]
                log.info("asked Redis to rewrite its AOF", extra={"event": "aof_purge", "node": node,
                                                                  "aof": started})

    # ------------------------------------------------------------------------------------------ internals
    def finish(self) -> None:
        """At shutdown: make sure an AOF rewrite starts after this shuffler's last release (waits for one under way)."""
        if self._dirty:
            self.maybe_purge(wait=True)

    def _due_through(self, metric: str, shard: int, now: float, last: StreamId) -> StreamId | None:
        """The largest held id first seen ``hold_seconds`` ago or earlier (None: nothing is due yet)."""
        marks = self._marks[(metric, shard)]
        if not marks or marks[-1][1] != last:
            marks.append((now, last))
        cutoff = now - self.config.hold_seconds
        due = [i for i, (t, _) in enumerate(marks) if t <= cutoff]
        if not due:
            return None
        del marks[: due[-1]]  # keep the newest due mark and the ones after it
        return marks[0][1]

    def _release_block(self, metric: str, shard: int, group: dict[bytes, bytes],
                       block: list[tuple[bytes, dict[bytes, bytes]]], *, n_min: int) -> int | None:
        """Shuffle and release one block; the reports released, or None when another shuffler released part
        of it first (nothing written)."""
        ids = [eid for eid, _ in block]
        try:
            version = int(group[b"v"])
            params = self._params_of(metric, version)
            data, n, distinct, seen = shuffle_batches([fields[b"b"] for _, fields in block], metric=metric,
                                                      version=version, params=params)
        except (LdpError, ValueError, KeyError) as exc:
            # Ingest validated every upload, so this is a version the registry lost or a damaged entry: it passes
            # through alone and unchanged, and the fold dead-letters it (as it always did).
            log.warning("held entry passed through unshuffled", extra={
                "event": "shuffle_passthrough", "metric": metric, "shard": shard, "error": str(exc)})
            return self._pass_through(metric, shard, block)
        fields: list[bytes | str | int] = []
        for name, value in sorted(group.items()):
            fields += [name, value]
        fields += [b"n", n, b"b", data]
        day = group.get(b"d", b"").decode()
        prefix = f"{version}:{day}:{group.get(b'c', b'').decode()}"
        seen_keys = [keys.seen(metric, shard, bid.hex()) for bid in seen]
        result = self._release(
            keys=[keys.held(metric, shard), keys.stream(metric, shard), keys.shuffle_stats(metric, shard), *seen_keys],
            args=[len(ids), *ids, _day_start_ms(day or utc_day()), len(fields) // 2, *fields,
                  prefix, n, len(block), distinct, int(len(block) < n_min), n_min],
        )
        return None if result == 0 else n

    def _pass_through(self, metric: str, shard: int, block: list[tuple[bytes, dict[bytes, bytes]]]) -> int | None:
        total = 0
        for eid, entry in block:
            fields: list[bytes | str | int] = []
            for name, value in sorted(entry.items()):
                fields += [name, value]
            result = self._release(
                keys=[keys.held(metric, shard), keys.stream(metric, shard), keys.shuffle_stats(metric, shard)],
                args=[1, eid, parse_id(eid)[0], len(fields) // 2, *fields, "", 0, 0, 0, 0, 0])
            if result != 0:
                total += 1
        return total or None


@dataclass(eq=False, slots=True)
class _Held:
    """One held upload as a shuffler's index knows it."""

    eid: bytes
    fields: dict[bytes, bytes]  # every field but the bytes
    data: bytes | None  # the batch bytes (None: not kept, read again at release)
    size: int


@dataclass(eq=False)
class _HeldIndex:
    """A shard's held uploads read so far, per group, oldest first, and the last id read."""

    cursor: bytes | None = None
    groups: dict[tuple[tuple[bytes, bytes], ...], list[_Held]] = field(default_factory=dict)


def _cut(members: list[_Held], *, n_min: int, max_bytes: int, max_uploads: int,
         overdue: bool) -> list[list[_Held]]:
    """The blocks to release from one group's held uploads (oldest first): blocks of ≥ n_min uploads, each closed
    at about ``max_bytes`` or ``max_uploads`` uploads, a short rest joined to the block before it; a group short
    of n_min only when ``overdue`` (then as one block below n_min)."""
    if len(members) < n_min and not overdue:
        return []
    blocks: list[list[_Held]] = [[]]
    size = 0
    for entry in members:
        full = size >= max_bytes or (max_uploads and len(blocks[-1]) >= max_uploads)
        if full and len(blocks[-1]) >= n_min:
            blocks.append([])
            size = 0
        blocks[-1].append(entry)
        size += entry.size
    if len(blocks) > 1 and len(blocks[-1]) < n_min and not max_uploads:
        blocks[-2].extend(blocks.pop())
    elif len(blocks) > 1 and len(blocks[-1]) < n_min and not overdue:
        blocks.pop()  # stays held: joining it would pass max_uploads
    return blocks


def permutation(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` from the OS CSPRNG: the ranks of n random 64-bit words,
    drawn again in the (probability < n²/2⁶⁵) case of a tie, so that every order is exactly equally likely."""
    while True:
        words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
        order = np.argsort(words, kind="stable")
        if n < 2 or bool(np.all(words[order[1:]] != words[order[:-1]])):
            return order


def shuffle_batches(batches: Sequence[bytes | memoryview], *, metric: str, version: int,
                    params: Params) -> tuple[bytes, int, int, list[bytes]]:
    """The reports of ``batches`` (encoded uploads of one metric version) as one encoded batch in a uniformly
    random order with an all-zero batch id: (its bytes, its report count, the number of distinct report payloads,
    the uploads' batch ids). Column by column (one permutation for all), never a per-report Python loop."""
    mech = mechanism_of(params)
    columns = mech.layout(params).columns
    parts: dict[str, list[np.ndarray]] = {col.attr: [] for col in columns}
    ids = []
    for data in batches:
        header, batch = decode_batch(data, params)
        ids.append(header.batch_id)
        for col in columns:
            arr = getattr(batch, col.attr)
            parts[col.attr].append(np.unpackbits(arr, count=batch.n) if col.kind == "bit" else arr)
    order: np.ndarray | None = None
    arrays: dict[str, np.ndarray] = {}
    digest: np.ndarray | None = None
    for col in columns:
        whole = np.concatenate(parts[col.attr])
        if order is None:
            order = permutation(len(whole))
        whole = whole[order]
        digest = _mix(digest, whole)
        arrays[col.attr] = np.packbits(whole) if col.kind == "bit" else whole
    assert order is not None and digest is not None
    n = len(order)
    shuffled: ReportBatch = mech.batch_type(mechanism=mech.name, n=n, **arrays)
    data = encode_batch(metric=metric, version=version, batch_id=ZERO_BATCH_ID, batch=shuffled, params=params)
    return data, n, int(np.unique(digest).size), ids


_MIX = np.uint64(0x9E3779B97F4A7C15)  # an odd 64-bit constant (2⁶⁴/φ)


def _mix(digest: np.ndarray | None, column: np.ndarray) -> np.ndarray:
    """A 64-bit fingerprint per report, folded over its columns, to count distinct payloads (two different reports
    share one with probability about 2⁻⁶⁴ per pair: a rare undercount of an informational figure)."""
    rows = np.ascontiguousarray(column).reshape(len(column), -1)
    raw = rows.view(np.uint8) if rows.dtype != np.uint8 else rows
    pad = (-raw.shape[1]) % 8
    if pad:
        raw = np.concatenate([raw, np.zeros((raw.shape[0], pad), dtype=np.uint8)], axis=1)
    words = np.ascontiguousarray(raw).view(np.uint64)
    out = np.zeros(len(column), dtype=np.uint64) if digest is None else digest.copy()
    for j in range(words.shape[1]):
        out = (out ^ words[:, j]) * _MIX
        out ^= out >> np.uint64(29)
    return out


def purge_aof(r: redis_lib.Redis, key: str, *, wait_seconds: float = 0.0) -> bool | None:
    """Start an AOF rewrite (BGREWRITEAOF) on the Redis node holding ``key``, so that its log forgets the original
    appends of released uploads: True when one was started, False when that node's AOF is off (nothing to do),
    None when one is under way already (it may have forked before the release: ask again later). With
    ``wait_seconds``, a rewrite under way is waited for (up to that long) and then a new one started."""
    node = r.get_node_from_key(key) if is_cluster(r) else None  # type: ignore[attr-defined]
    target: dict[str, Any] = {} if node is None else {"target_nodes": node}
    deadline = time.monotonic() + wait_seconds
    while True:
        info = r.execute_command("INFO", "persistence", **target)  # type: ignore[no-untyped-call]
        if isinstance(info, dict) and len(info) == 1 and isinstance(next(iter(info.values())), dict):
            info = next(iter(info.values()))  # a cluster client's reply keyed by node
        if not int(info.get("aof_enabled", 0)):
            return False
        if not int(info.get("aof_rewrite_in_progress", 0)) and not int(info.get("aof_rewrite_scheduled", 0)):
            try:
                r.execute_command("BGREWRITEAOF", **target)  # type: ignore[no-untyped-call]
                return True
            except redis_lib.ResponseError as exc:  # a rewrite began meanwhile
                log.debug("BGREWRITEAOF not started: %s", exc)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _node_name(r: redis_lib.Redis, key: str) -> str:
    if is_cluster(r):
        return str(r.get_node_from_key(key).name)  # type: ignore[attr-defined]
    return ""


def release_stats(r: redis_lib.Redis, metric: str, *, version: int, days: Sequence[str], shards: int,
                  cell: str = "") -> dict[str, ReleaseStats]:
    """Per UTC day, what the shuffle stage released for (metric, version, cell), summed over ``shards`` shards;
    a day with no released block is absent (its reports, if any, were not shuffled)."""
    pipe = r.pipeline(transaction=False)
    for shard in range(shards):
        for day in days:
            pipe.hmget(keys.shuffle_stats(metric, shard), [f"{version}:{day}:{cell}:{s}" for s in _STATS])
    replies = iter(pipe.execute())
    sums: dict[str, dict[str, int]] = {}
    for _ in range(shards):
        for day in days:
            values = next(replies)
            if values[1] is None:
                continue
            got = dict(zip(_STATS, (int(v) for v in values), strict=True))
            acc = sums.setdefault(day, {})
            for name in ("reports", "blocks", "below"):
                acc[name] = acc.get(name, 0) + got[name]
            for name in ("min_reports", "min_uploads", "min_distinct", "n_min"):
                acc[name] = min(acc.get(name, got[name]), got[name])
    return {
        day: ReleaseStats(reports=acc["reports"], blocks=acc["blocks"], smallest_block=acc["min_reports"],
                          smallest_block_uploads=acc["min_uploads"], n_min=acc["n_min"],
                          below_n_min=acc["below"], distinct_smallest=acc["min_distinct"])
        for day, acc in sums.items()
    }
