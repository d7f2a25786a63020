"""The durable privacy-budget ledger: spend per metric and UTC day, immune to a clock that moves backwards.

Policy: a metric allows ``reports_per_day`` reports per UTC day, and the spend of a report is what it costs
given every other report of the device (:attr:`~ldptel.client.protocol.specs.MetricSpec.report_charge`): the
effective ε of the spec it was privatized with, or ε_irr (more) under a permanent randomized response, whose
memo lets the collector compare reports (:mod:`ldptel.client.mechanisms.longitudinal`). A report is allowed
when, for the budget day,

    count + 1 ≤ reports_per_day   and   ε_spent + charge ≤ reports_per_day · charge   (= spec.daily_epsilon)

(both checked against the current spec, so a spec change within a day cannot overspend). The budget is per
metric *name*: a new version does not reopen the day. Every report counts, memoized repeats included (a
memoized repeat is in fact free in ε; counting it keeps the policy a plain count the server can reason
about).

Lifetime (ε∞). A metric with a permanent randomized response (rr, grr) gives every value one PRR per
*privatization* (mechanism and params, :func:`~ldptel.client.protocol.keyed.privatization_fingerprint`),
shared by every version that privatizes alike. Each privatization the metric ever used is recorded once
with its ε∞ (table ``lifetime``, never pruned); all reports ever of one value are together ε-LDP with
ε = the sum of those ε∞ (independent PRRs compose). This is the *level*: it covers a value that stays the
same (daily-mean: histories whose rounded bit changes at the same times, 2·ε∞), not the times a value
changes, which the daily charge above covers (ε_irr per report, :mod:`ldptel.client.mechanisms.longitudinal`). The sum is per metric, so it bounds every value, also one
never reported under some of them. :func:`charge_lifetime` refuses a new privatization that would take it
past the cap (the Reporter's policy ε∞ for a served spec).

Budget day: ``max(UTC day of the clock, the latest day ever recorded)``. The latest day is stored in the same
database, in the same transaction as the spend, so a clock set backwards (or a restart with a wrong clock)
keeps charging the latest day instead of reopening an earlier one. The price: a clock that jumped forward
holds the device on that future day's budget until real time catches up.
"""

from __future__ import annotations

import sqlite3

from ldptel.client.protocol.specs import MetricSpec

SECONDS_PER_DAY = 86_400
KEEP_DAYS = 31  # ledger rows older than this many days before the budget day are pruned
_EPS_SLACK = 1e-9  # relative: float sums of ε_eff must not refuse the last allowed report


def utc_day(now: float) -> int:
    """Days since 1970-01-01 UTC."""
    return int(now // SECONDS_PER_DAY)


def budget_day(conn: sqlite3.Connection, now: float) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'high_day'").fetchone()
    high = -(1 << 62) if row is None else int(row[0])
    return max(utc_day(now), high)


def spent(conn: sqlite3.Connection, metric: str, day: int) -> tuple[int, float]:
    row = conn.execute("SELECT count, epsilon FROM ledger WHERE metric = ? AND day = ?", (metric, day)).fetchone()
    return (0, 0.0) if row is None else (int(row[0]), float(row[1]))


def state(conn: sqlite3.Connection, metric: str, now: float) -> tuple[int, int, int, float]:
    """(budget day, latest recorded day, count, ε spent on the budget day) in one query."""
    row = conn.execute(
        "SELECT h.value, l.count, l.epsilon FROM meta AS h "
        "LEFT JOIN ledger AS l ON l.metric = ? AND l.day = MAX(h.value, ?) WHERE h.key = 'high_day'",
        (metric, utc_day(now)),
    ).fetchone()
    if row is None:  # nothing recorded yet
        return utc_day(now), -(1 << 62), 0, 0.0
    high = int(row[0])
    day = max(utc_day(now), high)
    return day, high, int(row[1] or 0), float(row[2] or 0.0)


def set_day(conn: sqlite3.Connection, day: int) -> None:
    """Record ``day`` as the latest budget day (callers only move it forward) and prune old ledger rows."""
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('high_day', ?)", (day,))
    conn.execute("DELETE FROM ledger WHERE day < ?", (day - KEEP_DAYS,))


def allows(
    spec: MetricSpec, count: int, epsilon: float, *, eps_one: float | None = None, daily: float | None = None
) -> bool:
    """True when one more report of ``spec`` fits the day's policy (``eps_one``/``daily``: precomputed ε)."""
    eps = spec.report_charge if eps_one is None else eps_one
    if count + 1 > spec.reports_per_day:
        return False
    cap = spec.daily_epsilon if daily is None else daily
    return epsilon + eps <= cap * (1 + _EPS_SLACK)


def spend(conn: sqlite3.Connection, metric: str, day: int, epsilon: float) -> None:
    conn.execute(
        "INSERT INTO ledger(metric, day, count, epsilon) VALUES (?, ?, 1, ?) "
        "ON CONFLICT(metric, day) DO UPDATE SET count = count + 1, epsilon = epsilon + excluded.epsilon",
        (metric, day, epsilon),
    )


def charge_lifetime(
    conn: sqlite3.Connection, metric: str, fingerprint: bytes, epsilon: float, *, cap: float
) -> float | None:
    """Record that ``metric`` privatizes with ``fingerprint`` (its ε∞ ``epsilon``) unless already recorded.

    None when it is recorded (now or before); else the lifetime ε∞ it would have reached past ``cap``, and
    nothing is recorded. Runs in the caller's transaction (rolled back with it).
    """
    if conn.execute(
        "SELECT 1 FROM lifetime WHERE metric = ? AND fingerprint = ?", (metric, fingerprint)
    ).fetchone() is not None:
        return None
    total = lifetime_epsilon(conn, metric)
    if total + epsilon > cap * (1 + _EPS_SLACK):
        return total + epsilon
    conn.execute("INSERT INTO lifetime(metric, fingerprint, epsilon) VALUES (?, ?, ?)", (metric, fingerprint, epsilon))
    return None


def lifetime_epsilon(conn: sqlite3.Connection, metric: str) -> float:
    """The lifetime ε∞ of one value of ``metric`` on this device: the sum over its recorded privatizations."""
    return float(conn.execute("SELECT COALESCE(SUM(epsilon), 0) FROM lifetime WHERE metric = ?", (metric,)).fetchone()[0])


def remaining(conn: sqlite3.Connection, spec: MetricSpec, now: float) -> int:
    """Reports the policy still allows for ``spec`` on the budget day of ``now``."""
    day = budget_day(conn, now)
    count, eps = spent(conn, spec.name, day)
    left = 0
    charge = spec.report_charge
    while allows(spec, count + left, eps + left * charge, eps_one=charge) and left < spec.reports_per_day:
        left += 1
    return left
