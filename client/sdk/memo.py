"""Longitudinal protection on the device: the device secret, and the per-day memo of sketch reports.

Why (Erlingsson et al., CCS 2014; Ding, Kulkarni, Yekhanin, NeurIPS 2017): a device that reports the same value T times with fresh noise leaks T·ε, and the
server can simply average the noise away. Each mechanism says how its repeated values are protected
(:class:`~ldptel.client.mechanisms.capabilities.Permanent`):

* a permanent randomized response (rr, grr: :meth:`~ldptel.client.mechanisms.base.Mechanism.privatize_permanent`,
  the splits and their ε∞ are in :mod:`ldptel.client.mechanisms.rr` and :mod:`ldptel.client.mechanisms.grr`):
  every report of a value starts from the same noisy answer derived from the device secret, with fresh noise on
  top; all reports of one value under one privatization, ever, are together ε∞-LDP. The PRR is keyed by the
  privatization fingerprint (:func:`~ldptel.client.protocol.keyed.privatization_fingerprint`), not the metric
  version, so versions that only change metadata share it. A version that changes the privatization starts
  fresh PRRs: the device's lifetime ledger (:func:`~ldptel.client.sdk.ledger.charge_lifetime`) adds its ε∞,
  so all reports ever of one value are together (Σ ε∞ over the metric's privatizations)-LDP, and the
  Reporter refuses a served privatization that would take that sum past its policy's ε∞. That is the level
  of a value, not the times it changes: a device whose value changes switches PRRs, and the collector sees the
  switch the better the more reports it has on each side. Any two value histories are together ε_irr-LDP
  per report that differs (ε_irr of the instantaneous noise, more than one report's ε; exact bounds in
  :mod:`ldptel.client.mechanisms.longitudinal`), so the daily budget charges ε_irr per report and a
  changing value is protected day by day. A new device secret starts fresh PRRs (the bound then restarts).
  daily-mean (numbers reported daily) rounds the value to one bit with a permanent per-device offset (α-point
  rounding, Ding et al. 2017) and sends that bit through rr's PRR: histories whose rounded bit changes at the
  same times are together 2·ε∞-LDP; change times cost ε_irr per report (:mod:`ldptel.client.mechanisms.daily_mean`).
* a daily memo (the sketches): the first report of a value on a budget day is privatized normally and stored
  (as its privatized payload, keyed by :func:`~ldptel.client.protocol.keyed.memo_key`, HMAC-SHA256 of
  (secret, metric, privatization fingerprint, day, value), never the value); later reports of that value on the same day resend
  the same payload. Within a day, any number of reports of one value leak ε; over D days a value reported
  daily leaks at most D·ε (the budget renews daily, as Apple's does; Tang et al.). Which of one day's
  reports repeat a value is not hidden (a resent payload equals the first). Memo rows of earlier days
  are deleted at the day change.

The device secret is 32 bytes from the OS CSPRNG, generated once per storage directory, stored beside the
queue with mode 0600 and never sent. Anyone who can read the storage directory can test guesses of a
value against the memo keys of the current day and recompute PRRs; the threat model is the server and the
network, not the device itself.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ldptel.client.errors import LdpError
from ldptel.client.mechanisms import ReportBatch, mechanism_of
from ldptel.client.protocol.keyed import memo_key, privatization_fingerprint
from ldptel.client.protocol.specs import MetricSpec
from ldptel.client.sdk.store import FILE_MODE, restrict_mode

SECRET_BYTES = 32
SECRET_FILE = "device_secret"

__all__ = [
    "SECRET_BYTES",
    "SECRET_FILE",
    "SecretError",
    "load_or_create_secret",
    "longitudinal_epsilon",
    "privatize_for_device",
    "prune",
]


class SecretError(LdpError, RuntimeError):
    """The device secret file exists but cannot be used (a silent reset would void ε∞)."""


# ----------------------------------------------------------------------------------------- device secret
def load_or_create_secret(storage_dir: Path) -> bytes:
    """The device secret in ``storage_dir`` (created atomically, mode 0600, on first use; made 0600 if it is not)."""
    path = storage_dir / SECRET_FILE
    try:
        data = path.read_bytes()
        restrict_mode(path)
    except FileNotFoundError:
        tmp = storage_dir / f".{SECRET_FILE}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            os.write(fd, os.urandom(SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # never replaces a secret another process created meanwhile
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        data = path.read_bytes()
    if len(data) != SECRET_BYTES:
        raise SecretError(
            f"{path} holds {len(data)} bytes, expected {SECRET_BYTES}; refusing to replace it because a new "
            "secret resets the longitudinal privacy bound. Delete the whole storage directory to start over."
        )
    return data


# ------------------------------------------------------------------------------------ privatizing a value
def longitudinal_epsilon(spec: MetricSpec) -> float:
    """ε∞: the bound for any number of reports of one value (permanent RR: per privatization; memoized: per day)."""
    return float(mechanism_of(spec.params).longitudinal_epsilon(spec.params))


def privatize_for_device(
    conn: sqlite3.Connection, spec: MetricSpec, value: object, *, day: int, secret: bytes,
    fingerprint: bytes | None = None,
) -> tuple[ReportBatch, bytes, bool]:
    """``value`` privatized for this device: (the one-report batch, its stored payload, memoized or not).

    A mechanism with a permanent randomized response derives it from the device secret and adds fresh noise;
    any other reuses the report memoized for (value, budget ``day``) in ``conn``'s memo table, or privatizes
    and memoizes it; both are keyed by the spec's privatization ``fingerprint`` (computed when not given), not
    its version. Runs inside ``report()``'s transaction. Raises
    :class:`~ldptel.client.errors.InvalidValueError` for a value the mechanism does not take.
    """
    params, metric = spec.params, spec.name
    if fingerprint is None:
        fingerprint = privatization_fingerprint(params)
    mech = mechanism_of(params)
    batch: ReportBatch
    permanent = mech.privatize_repeated(value, params, secret=secret, metric=metric, fingerprint=fingerprint)
    if permanent is not None:
        return permanent, mech.pack_report(permanent, params), False
    key = memo_key(secret, metric, fingerprint, day, mech.value_key(value, params))
    row = conn.execute("SELECT payload FROM memo WHERE key = ?", (key,)).fetchone()
    if row is not None:
        payload = bytes(row[0])
        batch = mech.unpack_reports([payload], params)
        return batch, payload, True
    batch = mech.privatize(value, params)
    payload = mech.pack_report(batch, params)
    conn.execute("INSERT INTO memo(key, day, payload) VALUES (?, ?, ?)", (key, day, payload))
    return batch, payload, False


def prune(conn: sqlite3.Connection, day: int) -> None:
    """Forget the memoized reports of budget days before ``day`` (at the day change)."""
    conn.execute("DELETE FROM memo WHERE day < ?", (day,))
