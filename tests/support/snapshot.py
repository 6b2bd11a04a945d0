"""Everything a database holds, as one digest per table: "nothing was written" compared whole,
not as the count of one table (blind to updates, tombstones, usage and telemetry rows)."""

from __future__ import annotations

import time

from tests.support import sql

CLIENTS_ROWS = {"usage": "namespace IS NOT NULL"}
"""Rows a client's request could have written, where a table also holds the daemon's own work:
its embedding probe, which runs again on its own, writes usage rows of no namespace."""


def store_snapshot(dsn: str) -> dict[str, str]:
    """Table -> md5 of its rows in a fixed order, for every table of the schema (of `usage`, the
    rows of a namespace: `CLIENTS_ROWS`)."""
    tables = [
        str(r["tablename"])
        for r in sql(dsn, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1")
    ]
    digests: dict[str, str] = {}
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        where = f"WHERE {CLIENTS_ROWS[table]}" if table in CLIENTS_ROWS else ""
        row = sql(
            dsn, f"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS d FROM {quoted} t {where}"
        )
        digests[table] = str(row[0]["d"])
    return digests


def settled_snapshot(dsn: str, *, quiet_s: float = 2.5, timeout: float = 60.0) -> dict[str, str]:
    """The snapshot once two taken `quiet_s` apart agree: a daemon's own start-up writes (its
    probe's usage row, written behind) are in, and nothing else is writing. `quiet_s` is longer
    than the index manager's poll (2 s), so a catch-up that works in steps on a slow machine is
    not taken for quiet."""
    deadline = time.monotonic() + timeout
    last = store_snapshot(dsn)
    while True:
        time.sleep(quiet_s)  # the quiet period the condition is about, not a barrier
        now = store_snapshot(dsn)
        if now == last:
            return now
        assert time.monotonic() < deadline, "the store never settled"
        last = now
