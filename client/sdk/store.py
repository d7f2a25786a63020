"""The on-device sqlite database: one file in WAL mode holding the queue, the ledger, the memo and the spec cache.

Durability. The database runs in WAL mode. The connection that ``report()`` uses commits with
``synchronous=NORMAL`` (a commit is an append to the WAL, no fsync: it survives a crash or SIGKILL of the
app; only a power loss can roll back the last few commits). The upload connection runs with
``synchronous=FULL``, so the transaction that forms a batch fsyncs the WAL, and with it every report and
ledger entry committed before it, *before* any byte of the batch is sent. Hence the server can never hold a
report whose budget spend or batch id the device could forget, even across a power loss.

Schema versions: 1 (SDK 0.1) had a ``batches.attempts`` column that nothing read; 2 drops it. The
``reports.day`` column (the budget day, so that a batch never mixes days) is added to an older database
when it is opened (its queued reports get day 0 and form their batches as before). This SDK opens
both (the column is left in place: every statement names the columns it writes and reads) and creates 2, so
an SDK that only knows 1, and would write that column, refuses a new database with a clear error.

Nothing in the file is a raw value: reports are stored privatized, memo rows are keyed by an HMAC of the
value, the ledger holds counts per metric and day, the tallies of ``Reporter.count()`` a count and a 30-day bitmap
per metric (:mod:`ldptel.client.sdk.tally`). (grr labels do appear, as part of the cached public
spec.)

At rest. The database, its ``-wal`` and ``-shm`` files are mode 0600 whatever the umask and the mode of the
storage directory: :func:`connect` creates the database file 0600 before sqlite opens it (sqlite gives the
WAL and the shared-memory index the mode of the database) and takes group/other access away from any of the
three that an older SDK left readable. Every connection runs with ``secure_delete`` (deleted rows and freed
pages are overwritten with zeros) and ``journal_size_limit=0`` (a WAL that restarts after a complete
checkpoint is cut to what the new transaction wrote). :func:`truncate_wal` empties the WAL entirely; the
Reporter calls it when the day change has deleted the memo rows of earlier days, so no memo key of a past
day stays in the database file or in the WAL.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from ldptel.client.errors import LdpError

DB_FILE = "ldptel.sqlite3"
SCHEMA_VERSION = 2  # what new databases get
SUPPORTED_SCHEMAS = (1, 2)
BUSY_TIMEOUT_MS = 10_000
FILE_MODE = 0o600  # the database, its WAL and its shared-memory index
_SIDE_FILES = ("-wal", "-shm")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reports(           -- privatized reports not yet in a batch
    id      INTEGER PRIMARY KEY,
    metric  TEXT NOT NULL,
    version INTEGER NOT NULL,
    payload BLOB NOT NULL,
    day     INTEGER NOT NULL DEFAULT 0        -- budget day: a batch holds reports of one day
);
CREATE TABLE IF NOT EXISTS batches(           -- formed batches, kept until the server acknowledged them
    id       INTEGER PRIMARY KEY,
    batch_id BLOB NOT NULL UNIQUE,            -- 16 random bytes, chosen once, reused by every retry
    metric   TEXT NOT NULL,
    version  INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    body     BLOB NOT NULL,                   -- the exact wire bytes (encode_batch)
    formed_day TEXT                           -- UTC day it was formed (its age is sent with it)
);
CREATE TABLE IF NOT EXISTS ledger(            -- privacy spend per metric and UTC day
    metric  TEXT NOT NULL,
    day     INTEGER NOT NULL,
    count   INTEGER NOT NULL,
    epsilon REAL NOT NULL,
    PRIMARY KEY(metric, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lifetime(          -- every permanent randomization a metric used, ever (never pruned)
    metric      TEXT NOT NULL,
    fingerprint BLOB NOT NULL,                -- privatization_fingerprint(params): public, no value in it
    epsilon     REAL NOT NULL,                -- its ε∞
    PRIMARY KEY(metric, fingerprint)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memo(              -- sketch reports memoized for the current budget day
    key     BLOB PRIMARY KEY,                 -- HMAC-SHA256(secret, metric, privatization fingerprint, day, value)
    day     INTEGER NOT NULL,
    payload BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS specs(             -- every spec version a report was privatized with
    metric  TEXT NOT NULL,
    version INTEGER NOT NULL,
    json    TEXT NOT NULL,
    PRIMARY KEY(metric, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sampling(          -- secret sampling: the device draw per metric and budget day
    metric TEXT NOT NULL,
    day    INTEGER NOT NULL,
    draw   INTEGER NOT NULL,                  -- 53 CSPRNG bits, takes part iff draw < floor(sample_rate · 2^53)
    PRIMARY KEY(metric, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tallies(           -- on-device aggregation (Reporter.count): one row per metric
    metric   TEXT PRIMARY KEY,
    day      INTEGER NOT NULL,                -- latest UTC day counted (days since 1970-01-01, nothing finer)
    count    INTEGER NOT NULL,                -- count() calls on that day
    seen     INTEGER NOT NULL,                -- bit i: a call on day - i (the last 30 days)
    released INTEGER NOT NULL                 -- last reporting period already reported
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS current_spec(      -- the version the server last called current
    metric  TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    fetched REAL NOT NULL
) WITHOUT ROWID;
"""


class StoreError(LdpError, RuntimeError):
    """The on-device database cannot be used (not in WAL mode, or a schema version this SDK does not know)."""


REPORT_AUTOCHECKPOINT = 10_000  # pages (~40 MB): report() leaves checkpoints to the uploader


def connect(storage_dir: Path, *, synchronous: str, autocheckpoint: int | None = None) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``), WAL, busy timeout.

    ``autocheckpoint`` (pages) raises the WAL size at which this connection checkpoints by itself; the
    report() connection uses a large value so that checkpoints (and their fsync) run on the upload thread,
    which checkpoints passively after every cycle.
    """
    path = storage_dir / DB_FILE
    _make_private(path)
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(f"could not put {storage_dir / DB_FILE} in WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA secure_delete=ON")
    conn.execute("PRAGMA journal_size_limit=0")
    if autocheckpoint is not None:
        conn.execute(f"PRAGMA wal_autocheckpoint={int(autocheckpoint)}")
    return conn


def _make_private(path: Path) -> None:
    """Create the database file with :data:`FILE_MODE` if it is missing; make it and its WAL/shm files private."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE))  # the umask can only remove bits from 0600
    for file in (path, *(path.with_name(path.name + suffix) for suffix in _SIDE_FILES)):
        try:
            restrict_mode(file)
        except FileNotFoundError:
            pass


def restrict_mode(file: Path) -> None:
    """Take away from ``file`` every permission bit outside :data:`FILE_MODE` (group and other access)."""
    mode = stat.S_IMODE(os.stat(file).st_mode)
    if mode & ~FILE_MODE:
        os.chmod(file, mode & FILE_MODE)


def truncate_wal(conn: sqlite3.Connection) -> bool:
    """Copy the whole WAL into the database and cut it to zero bytes; False when other connections kept it busy.

    Call it outside a transaction. Waits up to the busy timeout for the other connections' transactions.
    """
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    return not busy


def init_schema(conn: sqlite3.Connection) -> None:
    """Create the tables that do not exist yet and check the schema version (one transaction)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        if "day" not in {col[1] for col in conn.execute("PRAGMA table_info(reports)")}:  # an SDK before 0.2
            conn.execute("ALTER TABLE reports ADD COLUMN day INTEGER NOT NULL DEFAULT 0")
        columns = {r[1] for r in conn.execute("PRAGMA table_info(batches)")}
        if "formed_day" not in columns:  # databases of SDKs before the retry horizon: their batches have none
            conn.execute("ALTER TABLE batches ADD COLUMN formed_day TEXT")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            conn.execute("INSERT INTO meta(key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
        elif row[0] not in SUPPORTED_SCHEMAS:
            raise StoreError(f"storage schema {row[0]} is not supported by this SDK (it reads {list(SUPPORTED_SCHEMAS)})")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
