"""A TCP proxy in front of Redis that freezes a client process right after a chosen transaction reached Redis.

A kill "mid-run" of a fast process is a race when the test finds the moment by polling: under load the
process can finish between two polls. Put this gate between the process and Redis instead: it forwards every
byte until the client has sent ``count`` ``MULTI … EXEC`` transactions that mention a marker (e.g. a shard's
checkpoint key), forwards that last ``EXEC`` to Redis and then stops forwarding in both directions. The
process is left waiting for the reply of a commit Redis has applied, with the rest of its work undone: a
SIGKILL then lands mid-run, every time."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable

__all__ = ["RedisGate"]

EXEC = b"*1\r\n$4\r\nEXEC\r\n"
MULTI = b"*1\r\n$5\r\nMULTI\r\n"


class RedisGate:
    """``with RedisGate(redis_port, markers=[...], count=1) as gate:`` then point the client at ``gate.url``;
    ``gate.frozen`` is set once the ``count``-th matching transaction went through."""

    def __init__(self, redis_port: int, *, markers: Iterable[bytes], count: int = 1, host: str = "127.0.0.1") -> None:
        self.redis_port = redis_port
        self.redis_host = host
        self.markers = tuple(markers)
        self.count = count
        self.frozen = threading.Event()
        self._seen = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = [self._listener]
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisGate:
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.frozen.set()
        with self._lock:  # with _accept's registration: a connection accepted from now on is closed there
            self._closed.set()
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(timeout=10)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.redis_host, self.redis_port))
            except OSError:  # Redis is gone: the client sees its connection closed
                client.close()
                continue
            with self._lock:
                late = self._closed.is_set()  # accepted while __exit__ closed the gate: nobody else closes these
                if not late:
                    self._sockets += [client, upstream]
            if late:
                client.close()
                upstream.close()
                return
            for target, args in ((self._client_to_redis, (client, upstream)), (self._redis_to_client, (upstream, client))):
                thread = threading.Thread(target=target, args=args, daemon=True)
                with self._lock:
                    self._threads.append(thread)
                thread.start()

    def _client_to_redis(self, src: socket.socket, dst: socket.socket) -> None:
        since_exec = b""  # what this connection sent after its last EXEC (a transaction may span chunks)
        try:
            while not self.frozen.is_set():
                data = src.recv(65536)
                if not data:
                    return
                buf, offset = since_exec + data, len(since_exec)
                pos, cut = 0, None
                while (end := buf.find(EXEC, pos)) >= 0:
                    segment, pos = buf[pos:end], end + len(EXEC)
                    if MULTI in segment and any(marker in segment for marker in self.markers):
                        with self._lock:
                            self._seen += 1
                            last = self._seen >= self.count
                        if last:
                            cut = pos
                            break
                if self.frozen.is_set():
                    return
                if cut is not None:  # the gating EXEC goes to Redis, nothing after it
                    dst.sendall(buf[offset:cut])
                    self.frozen.set()
                    return
                dst.sendall(data)
                since_exec = buf[pos:]
        except OSError:
            return

    def _redis_to_client(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.frozen.is_set():
                data = src.recv(65536)
                if not data or self.frozen.is_set():
                    return
                dst.sendall(data)
        except OSError:
            return
