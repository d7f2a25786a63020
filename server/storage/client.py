"""The one Redis client factory: every component (ingest, fold workers, CLI, demo) connects through
:func:`connect`, so a URL means the same thing everywhere.

URLs:

* ``redis://[user:password@]host:port[/db][?option=value...]``, ``rediss://...`` (TLS), ``unix://...``: one
  Redis, through ``redis.Redis.from_url`` (its query options apply);
* ``redis+cluster://[user:password@]host:port[,host:port...]`` and ``rediss+cluster://...`` (TLS): a Redis
  Cluster. The hosts are seed nodes; the rest of the cluster is discovered (``CLUSTER SLOTS``). The client is a
  ``redis.cluster.RedisCluster``, which routes every keyed command by slot and follows MOVED/ASK itself; the
  two hand-written fast paths route the same way (:mod:`ldptel.storage.connection`).

One option of ours, on either kind: ``wait_replicas=N`` makes the ingest append wait (``WAIT N``) until N
replicas hold a batch before it answers 202, so a failover that promotes a replica cannot lose an
acknowledged batch (replication is asynchronous otherwise). It is removed before the URL reaches redis-py.

``RedisCluster`` serves the same command methods as ``redis.Redis`` (both mix in redis-py's command classes)
but is not a subclass of it; :func:`connect` returns either under the ``redis.Redis`` type that the storage
layer's signatures use, and :func:`is_cluster` tells them apart where it matters (the raw connection stack,
readiness).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis._parsers import CommandsParser
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, NodesManager, RedisCluster
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisClusterException, TryAgainError
from redis.retry import Retry

from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.client.protocol.validate import check_int

__all__ = [
    "CLUSTER_REDIRECT_ERRORS",
    "CLUSTER_SCHEMES",
    "TRANSIENT_ERRORS",
    "ClusterUnavailableError",
    "RedisUrl",
    "connect",
    "decodes_responses",
    "is_cluster",
    "parse_redis_url",
    "refresh_slot_map",
    "transient_on",
]

CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}  # scheme -> TLS
_SINGLE_SCHEMES = ("redis", "rediss", "unix")
_ALLOWED = "redis://, rediss://, unix://, redis+cluster://host:port[,host:port...] or rediss+cluster://..."
MAX_WAIT_REPLICAS = 16


class ClusterUnavailableError(LdpError, redis.ConnectionError):
    """No slot map could be had from the cluster, or a slot is served by no node now (during a failover)."""


# Errors that pass once Redis is back, a failover is done or a slot has moved: the fold worker waits and
# retries them, the ingest answers 503. ``RedisClusterException`` is redis-py's cluster client failing to get
# or use a slot map (it is not a ``RedisError``).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
)

# Replies of a cluster node that say "not here" or "not now": MOVED (the slot has another owner: a failover or a
# resharding), ASK (the slot is being migrated), TRYAGAIN (a multi-key command while the slot's keys are split),
# CLUSTERDOWN. The command was not executed, so it is always safe to send again once the slot map is refreshed.
# redis-py's cluster client follows them itself, a bounded number of times (its retries): during a failover on a
# loaded machine a node can keep redirecting longer than that, and the error reaches the caller. On a cluster
# client these are transient like a lost connection (:func:`transient_on`); on a plain ``redis://`` client a
# MOVED/ASK means the URL points at a cluster node, a configuration error that no retry heals.
CLUSTER_REDIRECT_ERRORS: tuple[type[BaseException], ...] = (AskError, TryAgainError, ClusterDownError)  # MovedError is an AskError


@dataclass(frozen=True, kw_only=True)
class RedisUrl:
    """A parsed ``LDPTEL_REDIS_URL``: one Redis (``url`` for redis-py) or a cluster (``seeds``)."""

    url: str  # the URL without our own options (what redis-py gets for one Redis)
    cluster: bool
    seeds: tuple[tuple[str, int], ...] = ()  # cluster seed nodes
    tls: bool = False
    username: str | None = None
    password: str | None = None
    wait_replicas: int = 0

    @property
    def display(self) -> str:
        """The URL without its password (for messages and logs)."""
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        netloc = parts.netloc.rsplit("@", 1)[-1]
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit(parts._replace(netloc=user + netloc))


def parse_redis_url(url: str) -> RedisUrl:
    """Parse a Redis URL (see the module docstring); :class:`InvalidParameterError` names what is wrong."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidParameterError("redis url", _ALLOWED, url)
    scheme = url.split("://", 1)[0].lower()
    parts = urlsplit(url)
    options = parse_qsl(parts.query, keep_blank_values=True)
    wait = 0
    kept: list[tuple[str, str]] = []
    for name, value in options:
        if name == "wait_replicas":
            try:
                wait = check_int("wait_replicas", int(value), 0, MAX_WAIT_REPLICAS)
            except ValueError:
                raise InvalidParameterError("wait_replicas", f"an integer 0..{MAX_WAIT_REPLICAS}", value) from None
        else:
            kept.append((name, value))
    base = url.split("?", 1)[0]  # not urlunsplit: it would turn unix:///path into unix:/path
    plain = base + ("?" + urlencode(kept) if kept else "") if len(kept) != len(options) else url
    if scheme in _SINGLE_SCHEMES:
        return RedisUrl(url=plain, cluster=False, wait_replicas=wait)
    if scheme not in CLUSTER_SCHEMES:
        raise InvalidParameterError("redis url scheme", _ALLOWED, scheme)
    if kept:
        raise InvalidParameterError("cluster url options", "wait_replicas only", ",".join(name for name, _ in kept))
    if parts.path not in ("", "/", "/0"):
        raise InvalidParameterError("cluster url database", "none or /0 (a cluster has only db 0)", parts.path)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    seeds = tuple(_host_port(item) for item in hosts.split(",") if item.strip())
    if not seeds:
        raise InvalidParameterError("cluster url", "at least one seed host:port", url)
    return RedisUrl(
        url=plain,
        cluster=True,
        seeds=seeds,
        tls=CLUSTER_SCHEMES[scheme],
        username=unquote(username) or None,
        password=unquote(password) if userinfo and ":" in userinfo else None,
        wait_replicas=wait,
    )


def _host_port(item: str) -> tuple[str, int]:
    host, sep, port = item.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidParameterError("cluster seed", "host:port with a port 1..65535", item)
    return host.strip("[]"), int(port)


def connect(url: str | RedisUrl, *, cluster_retries: int | None = None, **options: Any) -> redis.Redis:
    """A client for ``url``: ``redis.Redis`` for one Redis, ``RedisCluster`` for a cluster URL (typed as the
    former: see the module docstring). ``options`` are redis-py connection options (``socket_timeout``,
    ``socket_connect_timeout``, ``retry``, ``decode_responses``, ...). Nothing is sent until the first command.
    ``cluster_retries``: how many times the cluster client itself resends a redirected or failed command before
    the error reaches the caller (None: redis-py's default; ``retry`` applies to one Redis only)."""
    target = url if isinstance(url, RedisUrl) else parse_redis_url(url)
    if not target.cluster:
        return redis.Redis.from_url(target.url, **options)
    options.pop("retry", None)  # the cluster client retries and re-routes on its own
    if cluster_retries is not None:
        options["retry"] = Retry(ExponentialWithJitterBackoff(base=0.01, cap=1.0), cluster_retries)
    settings: dict[str, Any] = dict(
        startup_nodes=[ClusterNode(host, port) for host, port in target.seeds],  # type: ignore[no-untyped-call]
        ssl=target.tls,
        username=target.username,
        password=target.password,
        **options,
    )
    try:
        cluster: RedisCluster = RedisCluster(**settings)
    except (RedisClusterException, redis.RedisError):
        # No seed answers now (the whole cluster is down or not up yet): a client that asks for the slot map at
        # its first command instead, so a service can start and answer 503 until the cluster is reachable.
        cluster = _LateCluster(**settings)
    return cast(redis.Redis, cluster)  # the same command API (see the module docstring)


class _LateCluster(RedisCluster):
    """A ``RedisCluster`` made while no seed node answered: redis-py's constructor asks for the slot map and the
    command table at once and raises when it cannot. Here both are asked for again before each command until
    they are had (a command meanwhile raises :class:`ClusterUnavailableError`, a ``redis.ConnectionError``:
    503 for the ingest, a retry for a follow worker). The raw connection stack asks for the slot map itself."""

    def __init__(self, **settings: Any) -> None:
        self._late = False
        nodes_init, parser_init = NodesManager.initialize, CommandsParser.initialize

        def tolerant(original: Any) -> Any:
            def call(obj: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return original(obj, *args, **kwargs)
                except (RedisClusterException, redis.RedisError):
                    self._late = True
                    return None
            return call

        with _CONSTRUCTION_LOCK:  # redis-py's two start-up calls tolerate an unreachable cluster, this once
            NodesManager.initialize = tolerant(nodes_init)  # type: ignore[method-assign]
            CommandsParser.initialize = tolerant(parser_init)  # type: ignore[method-assign]
            try:
                super().__init__(**settings)
            finally:
                NodesManager.initialize = nodes_init  # type: ignore[method-assign]
                CommandsParser.initialize = parser_init  # type: ignore[method-assign]

    def _catch_up(self) -> None:
        if "commands_parser" not in vars(self):  # still in the constructor (its COMMAND call): not yet
            raise ClusterUnavailableError("the Redis Cluster is not reachable yet")
        try:
            self.nodes_manager.initialize()
            self._late = False
            self.commands_parser.initialize(self)  # type: ignore[no-untyped-call]
        except (RedisClusterException, redis.RedisError) as exc:
            self._late = True
            raise ClusterUnavailableError(f"the Redis Cluster is not reachable yet: {exc}") from None

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._late:
            self._catch_up()
        return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        if self._late:
            self._catch_up()
        return super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]


_CONSTRUCTION_LOCK = threading.Lock()


def is_cluster(r: redis.Redis) -> bool:
    """Whether ``r`` (from :func:`connect`) is a cluster client."""
    return isinstance(r, RedisCluster)


def transient_on(r: redis.Redis, exc: BaseException) -> bool:
    """Whether ``exc``, raised by a command of ``r``, passes by itself once Redis is back or the cluster has
    settled: :data:`TRANSIENT_ERRORS`, and on a cluster client also :data:`CLUSTER_REDIRECT_ERRORS`."""
    if isinstance(exc, TRANSIENT_ERRORS):
        return True
    return is_cluster(r) and isinstance(exc, CLUSTER_REDIRECT_ERRORS)


def refresh_slot_map(r: redis.Redis, exc: BaseException | None = None) -> None:
    """On a cluster client, bring its slot map up to date after ``exc``: a MOVED names the slot's new owner
    (that slot alone is updated, no round trip); anything else asks the cluster for the whole map again. A
    cluster that gives no map now raises :class:`ClusterUnavailableError` (transient). No-op on one Redis."""
    if not is_cluster(r):
        return
    manager = cast(RedisCluster, r).nodes_manager
    if isinstance(exc, MovedError):
        manager.move_slot(exc)
        return
    try:
        manager.initialize()
    except (RedisClusterException, redis.RedisError) as failure:
        raise ClusterUnavailableError(f"no slot map from the cluster: {failure}") from None


def decodes_responses(r: redis.Redis) -> bool:
    """Whether ``r`` decodes replies to str (the fold needs bytes)."""
    kwargs: dict[str, Any] = (
        cast(RedisCluster, r).get_connection_kwargs()  # type: ignore[no-untyped-call]  # redis-py: no annotations
        if is_cluster(r)
        else r.connection_pool.connection_kwargs
    )
    return bool(kwargs.get("decode_responses"))
