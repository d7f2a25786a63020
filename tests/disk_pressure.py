"""A competing writer that keeps the disk busy, so a Redis on the same disk has slow AOF fsyncs.

That is the window in which ``appendfsync everysec`` acknowledges a write it has not yet written to its AOF
file (Redis postpones the write behind a running background fsync for up to 2 s and still replies): kill -9
then loses acknowledged data. The durability tests run under it to prove a config closes that window."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import redis as redis_lib

__all__ = ["DiskPressure", "fsync_backlog"]


class DiskPressure:
    """A thread that keeps the disk busy: 8 MB writes to one file (rewritten in place, at most 64 MB), each
    fsynced, until the block ends. Bounded in size and time; the file is deleted."""

    CHUNK = 8 << 20
    FILE_BYTES = 64 << 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        block = os.urandom(self.CHUNK)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            offset = 0
            deadline = time.monotonic() + 30
            while not self._stop.is_set() and time.monotonic() < deadline:
                os.pwrite(fd, block, offset)
                os.fsync(fd)
                offset = (offset + self.CHUNK) % self.FILE_BYTES
        finally:
            os.close(fd)
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> DiskPressure:
        self._thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def fsync_backlog(r: redis_lib.Redis) -> bool:
    """Whether Redis has an AOF fsync running in the background with writes waiting behind it (possible only
    under ``everysec``: under ``always`` a reply follows its own fsync)."""
    info = r.info("persistence")
    return bool(info.get("aof_pending_bio_fsync")) and int(info.get("aof_buffer_length", 0)) > 0
