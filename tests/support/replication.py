"""A primary and a streaming standby, both from the binaries the embedded server uses
(pgserver's `pginstall/bin`), for failover tests and the failover bench.

The primary is an `EmbeddedPostgres` like any daemon's; the standby is `pg_basebackup -R` of it
(a `standby.signal` and a `primary_conninfo` that streams from the primary's socket), started as
another `EmbeddedPostgres` on its own socket directory. The tools run as the account that owns
the clusters (the service user `recalld` when the tests run as root), as the server's own do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Literal

from recalld.store.embedded import PORT, EmbeddedPostgres, binaries
from tests.support import scratch_dir, sql
from tests.support.waits import eventually

Replication = Literal["async", "sync"]
"""`sync`: the primary's `synchronous_standby_names = '*'` with `synchronous_commit = on` (its
default): a COMMIT is answered once the standby has flushed its WAL. `async`: PostgreSQL's
default, answered once the primary alone has."""

SHARED_BUFFERS_MB = 128
"""Two servers beside the suite's own: the least shared_buffers initdb would pick."""


def _as_owner(pgdata: Path, tool: str, *args: str, timeout: float = 120.0) -> str:
    """Run one of the server's tools as the owner of `pgdata`."""
    owner = pgdata.stat()
    done = subprocess.run(
        [str(binaries() / tool), *args],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=timeout,
        user=owner.st_uid if os.geteuid() == 0 else None,
        group=owner.st_gid if os.geteuid() == 0 else None,
        extra_groups=[] if os.geteuid() == 0 else None,
    )
    if done.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done.stdout


def socket_dsn(*servers: EmbeddedPostgres, attrs: str = "read-write") -> str:
    """One DSN naming each server's socket directory in turn, as libpq's multi-host syntax does:
    `host=a,b&port=p,q` with `target_session_attrs`."""
    first = servers[0].dsn.split("?", 1)[0]
    hosts = ",".join(str(server.socket_dir) for server in servers)
    ports = ",".join(str(PORT) for _ in servers)
    return f"{first}?host={hosts}&port={ports}&target_session_attrs={attrs}"


class ReplicatedPair:
    """A primary and its streaming standby, each in a scratch directory of its own."""

    def __init__(self, replication: Replication) -> None:
        self.replication = replication
        self.homes = [scratch_dir("recalld-primary-"), scratch_dir("recalld-standby-")]
        self.primary = EmbeddedPostgres(self.homes[0], shared_buffers_mb=SHARED_BUFFERS_MB)
        self.standby = EmbeddedPostgres(self.homes[1], shared_buffers_mb=SHARED_BUFFERS_MB)
        self._stalled: list[int] = []

    def start(self) -> ReplicatedPair:
        """Start both, streaming (synchronously for `sync`); on failure nothing is left running."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.primary.start()
        pgdata = self.standby.pgdata
        pgdata.mkdir(mode=0o700)
        owner = self.primary.pgdata.stat()
        os.chown(pgdata, owner.st_uid, owner.st_gid)
        # -R: standby.signal and primary_conninfo, so that it streams from the primary's socket
        _as_owner(
            pgdata,
            "pg_basebackup",
            *("-h", str(self.primary.socket_dir), "-p", str(PORT), "-D", str(pgdata)),
            *("-R", "-X", "stream", "-c", "fast", "--no-sync"),
        )
        # the primary's socket directory is its data directory: the copy holds its socket's lock
        (pgdata / f".s.PGSQL.{PORT}.lock").unlink(missing_ok=True)
        self.standby.start()
        eventually(
            lambda: sql(self.primary.dsn, "SELECT state FROM pg_stat_replication"),
            60,
            "the standby streaming",
            accept=lambda rows: [r["state"] for r in rows] == ["streaming"],
        )
        if self.replication == "sync":
            # Only on the primary, after the base backup: a promoted standby that carried it
            # would wait for a synchronous standby of its own, which it does not have.
            sql(self.primary.dsn, "ALTER SYSTEM SET synchronous_standby_names = '*'")
            sql(self.primary.dsn, "SELECT pg_reload_conf()")
            eventually(
                lambda: sql(self.primary.dsn, "SELECT sync_state FROM pg_stat_replication"),
                60,
                "the standby synchronous",
                accept=lambda rows: [r["sync_state"] for r in rows] == ["sync"],
            )

    def dsn(self, attrs: str = "read-write") -> str:
        """Both servers, the primary first."""
        return socket_dsn(self.primary, self.standby, attrs=attrs)

    def wait_streamed(self) -> None:
        """Until the standby has flushed all the WAL the primary had written when called: every
        commit before the call is on the standby's disk, whatever the replication."""
        now = sql(self.primary.dsn, "SELECT pg_current_wal_lsn()::text AS lsn")[0]["lsn"]
        eventually(
            lambda: sql(self.primary.dsn, "SELECT flush_lsn >= $1::text::pg_lsn AS done FROM pg_stat_replication", now),
            60,
            f"the standby flushed the primary's WAL up to {now}",
            accept=lambda rows: [r["done"] for r in rows] == [True],
        )

    def stall_stream(self) -> None:
        """Stop (SIGSTOP) the primary's WAL sender: the standby falls behind, as over a network
        that stalls, and the primary goes on committing (waiting for the standby's flush first,
        under `sync`). Undone by `lose_primary`, which ends that process, or by `stop`."""
        (row,) = sql(self.primary.dsn, "SELECT pid FROM pg_stat_replication")
        os.kill(row["pid"], signal.SIGSTOP)
        self._stalled.append(row["pid"])

    def lose_primary(self) -> None:
        """Stop the primary in immediate mode: no shutdown checkpoint, every session cut, as a
        crash would; its WAL not yet streamed never reaches the standby. (A stalled WAL sender
        is killed by the postmaster 5 s after the others.)"""
        _as_owner(self.primary.pgdata, "pg_ctl", "-D", str(self.primary.pgdata), "-m", "immediate", "-w", "stop")

    def promote_standby(self) -> None:
        """`pg_ctl promote`, waiting until the standby accepts writes."""
        _as_owner(self.standby.pgdata, "pg_ctl", "-D", str(self.standby.pgdata), "-w", "promote")

    def stop(self) -> None:
        for pid in self._stalled:  # a stopped WAL sender would hold up a fast shutdown
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for server in (self.standby, self.primary):
            server.stop()
        for home in self.homes:
            shutil.rmtree(home, ignore_errors=True)
