"""The embedded PostgreSQL a daemon starts for its data directory (no DSN configured): its
server processes, and the DSN a test connects to it with."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import Daemon
from tests.support.processes import processes


def embedded_dsn(daemon: Daemon) -> str:
    """The DSN of `daemon`'s own embedded server (its socket in the data directory)."""
    return f"postgresql://recalld@/recalld?host={daemon.data_dir / 'pg'}&port=5432"


def postmasters(data_dir: Path) -> list[str]:
    """The embedded servers of this data directory (a postmaster's command line names it).

    A process the postmaster has just forked carries the postmaster's command line until it
    renames itself ("postgres: checkpointer"), so a process whose parent is one of them is not
    counted: a test that caught a fork in that moment saw two servers.
    """
    parents: dict[str, str] = {}
    for pid, parent, cmdline in processes():
        if (
            cmdline
            and Path(os.fsdecode(cmdline[0])).name == "postgres"
            and str(data_dir).encode() in b" ".join(cmdline)
        ):
            parents[str(pid)] = str(parent)
    return [pid for pid, parent in parents.items() if parent not in parents]
