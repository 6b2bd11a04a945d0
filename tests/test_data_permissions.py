"""The daemon's files are its own: whatever umask it inherits, nothing in its
data directory is open to other users, and it never widens the mode of a directory above it."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import stat
from pathlib import Path
from typing import Any

from recalld.store.embedded import SERVICE_HOME, SERVICE_USER, useradd_command
from tests.support import ROOT, Daemon, scratch_dir
from tests.support.waits import eventually


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_daemon_started_under_umask_022_keeps_its_files_from_others(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(embedded=True, umask=0o022)  # a shell's default, not systemd's UMask=
    record = {"namespace": "private", "kind": "doc", "title": "Salaries", "body": "who earns what, by team"}
    assert daemon.call("POST", "/v1/records", record)[0] == 201
    current = eventually(lambda: daemon.call("GET", "/v1/generations")[1]["current"], 120, "a first generation")

    data_dir = daemon.data_dir
    assert mode_of(data_dir) & 0o007 == 0, f"data dir is {mode_of(data_dir):o}"
    if os.geteuid() == 0:
        # the embedded server (user recalld) passes through to pg/ and may do nothing else there
        assert mode_of(data_dir) == 0o710 and data_dir.stat().st_gid == pwd.getpwnam(SERVICE_USER).pw_gid
    generation = Path(current["directory"])
    assert generation.is_relative_to(data_dir) and (generation / "idmap.npz").exists()
    open_to_others = [
        f"{path} {mode_of(path):o}"
        for path in data_dir.rglob("*")
        if not stat.S_ISSOCK(path.lstat().st_mode) and mode_of(path) & 0o007
    ]
    assert not open_to_others, open_to_others


def test_a_data_dir_under_a_private_parent_leaves_the_parent_as_it_was() -> None:
    home = scratch_dir("recalld-test-perm-")
    private = home / "private"
    private.mkdir(mode=0o700)
    daemon = Daemon(home)
    daemon.data_dir = private / "data"
    daemon.start(wait_ready=False)
    try:
        assert daemon.proc is not None
        if os.geteuid() == 0:
            # The embedded server runs as recalld, which may not enter the parent: refused, named.
            proc = daemon.proc
            assert eventually(proc.poll, 60, "the daemon refusing to start", accept=lambda code: code is not None) == 1
            assert f"cannot reach {private / 'data'}: it may not enter {private}" in daemon.log(), daemon.log()
        else:
            daemon.wait_ready()  # the server runs as ourselves: the parent is no obstacle
        assert mode_of(private) == 0o700, "the parent's mode was widened"
    finally:
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_the_service_account_gets_the_home_the_systemd_unit_gives_it() -> None:
    sysusers = (ROOT / "systemd" / "recalld.sysusers.conf").read_text().splitlines()
    entry = next(shlex.split(line) for line in sysusers if line.startswith("u "))
    assert entry[1] == SERVICE_USER and entry[4] == SERVICE_HOME
    command = useradd_command()
    assert command[command.index("--home-dir") + 1] == SERVICE_HOME and command[-1] == SERVICE_USER


def test_parents_the_daemon_makes_for_a_new_data_dir_are_ordinary_directories() -> None:
    # `--data-dir ./var/data` on a fresh checkout: the parents are made as `mkdir -p` makes them,
    # so the embedded server's account can reach the data directory; only that one is private.
    home = scratch_dir("recalld-test-perm-")
    daemon = Daemon(home)
    daemon.data_dir = home / "new" / "nested" / "data"
    try:
        daemon.start(timeout=120)
        assert mode_of(home / "new") == mode_of(home / "new" / "nested") == 0o755
        assert mode_of(daemon.data_dir) & 0o007 == 0
    finally:
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)
