"""CPU time spent by a process and by a PostgreSQL server, read from /proc: what a bench divides
by the requests answered to report CPU per request."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_times(pid: int) -> tuple[int, list[int]]:
    """(parent pid, [utime, stime, cutime, cstime]) in clock ticks, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), [int(x) for x in fields[11:15]]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a running process has used so far."""
    _, (utime, stime, _, _) = _stat_times(pid)
    return (utime + stime) / _TICK


def _children(parent: int) -> Iterator[tuple[int, int]]:
    """(pid, user + system clock ticks) of each running child process of `parent`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid, (utime, stime, _, _) = _stat_times(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == parent:
            yield int(entry.name), utime + stime


def postgres_cpu_seconds(pgdata: Path) -> float:
    """CPU time a PostgreSQL server has used so far: the postmaster, its live processes, and
    (through the postmaster's reaped-children times) the backends that already ended. The
    difference of two readings is what the server spent between them, backends that came and
    went included."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    _, times = _stat_times(postmaster)
    return (sum(times) + sum(ticks for _, ticks in _children(postmaster))) / _TICK


def children_cpu_seconds(parent: int, marker: str) -> float:
    """CPU time the running child processes of `parent` whose command line contains `marker` have
    used so far (a daemon's title model process: `title_worker`)."""
    total = 0
    for pid, ticks in _children(parent):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if marker in command:
            total += ticks
    return total / _TICK
