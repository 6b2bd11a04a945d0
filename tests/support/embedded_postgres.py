"""The embedded PostgreSQL a daemon starts for its data directory (no DSN configured): its
server processes, and the DSN a test connects to it with."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import Daemon


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
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if (
            cmdline
            and Path(os.fsdecode(cmdline[0])).name == "postgres"
            and str(data_dir).encode() in b" ".join(cmdline)
        ):
            parents[proc.name] = stat.rsplit(")", 1)[1].split()[1]  # the field after the state
    return [pid for pid, parent in parents.items() if parent not in parents]
