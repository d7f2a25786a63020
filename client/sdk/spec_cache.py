"""The spec cache: which :class:`MetricSpec` ``report()`` privatizes with, and every version a queued report needs.

Where the spec of a metric comes from, in order:

1. the pinned specs given to the Reporter (offline use; never fetched, never refreshed);
2. the current spec cached on disk (tables ``specs`` and ``current_spec`` of the on-device database,
   :mod:`ldptel.client.sdk.store`), with the time it was fetched;
3. a fetch of ``GET /v1/metrics/<name>`` in the background, by the uploader (:meth:`SpecCache.fetch_due`),
   never by ``report()``: a metric reported before its spec is known is requested (:meth:`SpecCache.request`)
   and ``report()`` answers ``"no_spec"`` until the spec arrives. Metrics the app declares are requested at
   start-up. A failed first fetch is not tried again for :data:`NO_SPEC_RETRY` seconds.

Refreshing: a cached spec older than ``ttl`` seconds is marked when ``report()`` uses it and fetched again by
the uploader (:meth:`SpecCache.refresh_due`); a 409 answer to an upload carries the current spec, which is
adopted at once (:meth:`SpecCache.adopt`), or else marks the metric for refresh.

Reports keep the version they were privatized with, so every version ever used is kept:
:meth:`SpecCache.spec_of` finds it when a batch of that version is encoded.

Threads: every fetch runs on the uploader's thread (or in the thread calling ``flush()``/``wait_for_specs()``
without one) over the uploader's transport, holding no lock here, so ``report()`` never waits on the network.
``_lock`` guards the negative cache, ``_asked`` and ``_closed``. The dicts are read without a lock (a dict
lookup or assignment is atomic), and ``_want_fetch``/``_want_refresh`` are only touched by atomic
``set.add``/``set.discard``. The database is written through the Reporter's connection under the lock that
guards it, always taken after ``_lock``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.client.protocol.specs import NAME_RE, MetricSpec
from ldptel.client.sdk import tally as _tally
from ldptel.client.sdk.notify import Notifier, UploadError, log
from ldptel.client.sdk.transport import NETWORK_ERRORS, Transport

__all__ = ["NO_SPEC_RETRY", "SpecCache", "pinned_by_name"]

NO_SPEC_RETRY = 60.0  # seconds before a failed first fetch of a spec is requested again by report()


@dataclass(frozen=True, slots=True)
class _Current:
    spec: MetricSpec
    fetched: float  # clock() when the server last named it current


class SpecCache:
    """Pinned, cached and fetched specs of one Reporter (see the module docs).

    :param conn: the Reporter's connection, and :param conn_lock: the lock that guards it.
    :param pinned: specs that are never fetched, by name (see :func:`pinned_by_name`).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        conn_lock: contextlib.AbstractContextManager[object],
        *,
        pinned: Mapping[str, MetricSpec],
        clock: Callable[[], float],
        ttl: float,
        notify: Notifier,
    ) -> None:
        self._pinned = dict(pinned)
        self._conn = conn
        self._conn_lock = conn_lock
        self._clock = clock
        self._ttl = ttl
        self._notify = notify
        self._lock = threading.Lock()
        self._closed = False
        self._versions: dict[tuple[str, int], MetricSpec] = {}  # every (name, version) seen
        self._current: dict[str, _Current] = {}  # the current spec of each fetched metric
        self._no_spec_until: dict[str, float] = {}
        self._asked: set[str] = set()  # every metric requested before its spec was known
        self._want_fetch: set[str] = set()  # requested, not fetched yet
        self._want_refresh: set[str] = set()
        with self._lock:
            self._load()
            self._save(list(self._pinned.values()), current=False)

    # ---------------------------------------------------------------------------------------- lookups
    def spec_for(self, metric: str) -> MetricSpec | None:
        """The spec to privatize ``metric`` with now: pinned or cached (marked for refresh when older than the
        TTL); None when it is not known yet (never fetched here: see :meth:`request`)."""
        pinned = self._pinned.get(metric)
        if pinned is not None:
            return pinned
        entry = self._current.get(metric)
        if entry is None:
            return None
        if self._clock() - entry.fetched > self._ttl:
            self._want_refresh.add(metric)
        return entry.spec

    def request(self, metric: str) -> bool:
        """Ask for a background fetch of an unknown ``metric``; True when newly requested (the caller wakes the
        uploader). Not while a failed fetch's :data:`NO_SPEC_RETRY` runs, nor for a name no spec can have."""
        if not NAME_RE.fullmatch(metric) or self.known(metric) is not None or metric in self._want_fetch:
            return False
        with self._lock:
            if self._closed or self._clock() < self._no_spec_until.get(metric, float("-inf")):
                return False
            self._asked.add(metric)
            self._want_fetch.add(metric)
        return True

    def fetching(self) -> bool:
        """A requested first fetch has not been tried yet."""
        return bool(self._want_fetch)

    def all_known(self) -> bool:
        """Every metric ever requested has a spec now."""
        with self._lock:
            return all(self.known(metric) is not None for metric in self._asked)

    def known(self, metric: str) -> MetricSpec | None:
        """The pinned or cached current spec of ``metric``, without fetching or marking anything."""
        pinned = self._pinned.get(metric)
        if pinned is not None:
            return pinned
        entry = self._current.get(metric)
        return None if entry is None else entry.spec

    def is_pinned(self, spec: MetricSpec) -> bool:
        """``spec`` is one the app pinned (its own choice), not one the server served."""
        return self._pinned.get(spec.name) is spec

    def spec_of(self, metric: str, version: int) -> MetricSpec | None:
        """The spec of one version (the one queued reports were privatized with), if it was ever seen."""
        pinned = self._pinned.get(metric)
        if pinned is not None and pinned.version == version:
            return pinned
        return self._versions.get((metric, version))

    # --------------------------------------------------------------------------------------- updates
    def fetch_due(self, transport: Transport) -> None:
        """Fetch the spec of every requested metric over the caller's ``transport`` (the uploader's, at the
        start of every cycle, backoff or not: a failed first fetch is not tried again for
        :data:`NO_SPEC_RETRY` seconds anyway)."""
        for metric in list(self._want_fetch):
            if self._closed:
                return
            got = self._fetch(metric, transport)
            if isinstance(got, UploadError):
                with self._lock:
                    self._no_spec_until[metric] = self._clock() + NO_SPEC_RETRY
                self._notify(got)
            self._want_fetch.discard(metric)

    def refresh_due(self, transport: Transport) -> None:
        """Fetch again every spec marked for refresh, over the caller's ``transport`` (the uploader's, at the
        start of a cycle). It takes no lock of this cache, so ``report()`` never waits behind a refresh."""
        for metric in list(self._want_refresh):
            if self._closed:
                return
            got = self._fetch(metric, transport)
            if isinstance(got, UploadError):
                self._notify(got)

    def adopt(self, metric: str, body: object) -> None:
        """A 409 answer for ``metric``: cache the current spec its ``body`` carries, else mark it for refresh."""
        if metric in self._pinned:
            return
        spec = _spec_from_body(body, metric)
        if spec is None:
            self._want_refresh.add(metric)
            return
        with self._lock:
            if not self._closed:
                self._save([spec], current=True)

    def close(self) -> None:
        """Stop fetching, requesting and adopting (the uploader, stopped first, owns the transport)."""
        with self._lock:
            self._closed = True

    # -------------------------------------------------------------------------------------- internals
    def _fetch(self, metric: str, transport: Transport) -> MetricSpec | UploadError:
        """``GET /v1/metrics/<metric>``; the spec is cached as current. The caller owns ``transport`` (a
        transport is used by one thread at a time) and notifies the returned error itself, holding no lock
        (so ``on_error`` may call back into the Reporter)."""
        try:
            resp = transport.get_metric(metric)
        except NETWORK_ERRORS as exc:
            return UploadError(f"could not fetch the spec of {metric!r} from {transport.where}: {exc}", metric=metric)
        body = resp.json()
        spec = _spec_from_body(body, metric) if resp.status == 200 else None
        if resp.status == 200 and isinstance(body, dict) and body.get("status") == "retired":
            self._retire(metric)
        if spec is None:
            return UploadError(_no_spec_reason(metric, resp.status, body), status=resp.status, outcome="no_spec",
                               metric=metric)
        self._save([spec], current=True)
        self._want_refresh.discard(metric)
        return spec

    def _retire(self, metric: str) -> None:
        """The server says ``metric`` is retired: delete its on-device aggregation state
        (:func:`~ldptel.client.sdk.tally.forget`) and its current spec, so ``count()`` and ``report()`` answer
        ``"no_spec"`` from now on (a pinned spec is the app's own choice and stays)."""
        if metric in self._pinned:
            return
        conn = self._conn
        with self._conn_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                _tally.forget(conn, metric)
                conn.execute("DELETE FROM current_spec WHERE metric = ?", (metric,))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._current.pop(metric, None)
        self._want_refresh.discard(metric)

    def _load(self) -> None:
        with self._conn_lock:
            stored = self._conn.execute("SELECT metric, version, json FROM specs").fetchall()
            current = self._conn.execute("SELECT metric, version, fetched FROM current_spec").fetchall()
        for metric, version, text in stored:
            try:
                self._versions[(metric, version)] = MetricSpec.from_json(text)
            except LdpError:
                log.warning("ignoring an unreadable cached spec for %s v%d", metric, version)
        for metric, version, fetched in current:
            spec = self._versions.get((metric, version))
            if spec is not None:
                self._current[metric] = _Current(spec, float(fetched))

    def _save(self, specs: list[MetricSpec], *, current: bool) -> None:
        """Store ``specs`` (one transaction) and, with ``current``, make each its metric's current spec."""
        if not specs:
            return
        now = self._clock()
        conn = self._conn
        with self._conn_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO specs(metric, version, json) VALUES (?, ?, ?)",
                    [(s.name, s.version, s.to_json()) for s in specs],
                )
                if current:
                    conn.executemany(
                        "INSERT OR REPLACE INTO current_spec(metric, version, fetched) VALUES (?, ?, ?)",
                        [(s.name, s.version, now) for s in specs],
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        for spec in specs:
            self._versions[(spec.name, spec.version)] = spec
            if current:
                self._current[spec.name] = _Current(spec, now)


def pinned_by_name(specs: Mapping[str, MetricSpec] | Iterable[MetricSpec] | None) -> dict[str, MetricSpec]:
    """The Reporter's ``specs`` argument (a mapping name → spec, or specs) as a dict by spec name, checked."""
    if specs is None:
        return {}
    items = specs.values() if isinstance(specs, Mapping) else specs
    pinned: dict[str, MetricSpec] = {}
    for spec in items:
        if not isinstance(spec, MetricSpec):
            raise InvalidParameterError("specs", "MetricSpec objects", type(spec).__name__)
        pinned[spec.name] = spec
    return pinned


def _no_spec_reason(metric: str, status: int, body: object) -> str:
    """Why a fetch gave no spec, in the app developer's terms (nothing of ``metric`` is reported meanwhile)."""
    if status == 200 and isinstance(body, dict) and body.get("status") == "retired":
        return f"metric {metric!r} is retired: the server accepts no reports of it (HTTP 200)"
    reasons = {
        401: "the server rejected the token (HTTP 401): check the app token given to the Reporter",
        403: "the token may not read metric specs (HTTP 403): give the Reporter an app token",
        404: f"metric {metric!r} is not registered on the server (HTTP 404): create it first "
        "(ldptel metrics create or apply)",
    }
    return f"no spec for {metric!r}: " + reasons.get(status, f"the server answered HTTP {status} without a usable spec")


def _spec_from_body(data: object, metric: str) -> MetricSpec | None:
    """The current spec from a registry record (``{"current": {...}, ...}``), a ``{"spec": ...}`` body or a spec."""
    if not isinstance(data, dict):
        return None
    if data.get("status") == "retired":
        return None
    candidates = [data.get("current"), data.get("spec"), data.get("current_spec"), data]
    for cand in candidates:
        if isinstance(cand, dict) and "params" in cand:
            try:
                spec = MetricSpec.from_dict(cand)
            except (LdpError, ValueError, TypeError, ArithmeticError, RecursionError):
                # Whatever a server sends, it is either a valid spec or no spec: report() says "no_spec" and
                # the app never sees the server's mistake as an exception (issue 22 §5).
                continue
            if spec.name == metric:
                return spec
    return None
