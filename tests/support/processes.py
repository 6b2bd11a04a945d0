"""The machine's running processes as tests look for them: read from /proc, a process that ends
while it is read left out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def processes() -> Iterator[tuple[int, int, list[bytes]]]:
    """(pid, parent pid, command line split at its NULs) of each running process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), int(stat.rsplit(")", 1)[1].split()[1]), command  # the field after the state
