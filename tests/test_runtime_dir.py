"""The socket's directory: neither the CLI nor the daemon trusts one another user could control.

Without $XDG_RUNTIME_DIR a user's socket is /tmp/recalld-$UID/recalld.sock, in a directory anyone
could have made first. The CLI runs as a real other uid here (tests/support/as_user.py), against a real
listener standing in for an impostor, which records whatever reaches it.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from recalld.control.server import bind_unix_socket
from recalld.paths import SOCKET_NAME, UnsafeRuntimeDirectory
from tests.support import ROOT, scratch_dir

PUT = ["put", "-n", "notes", "--title", "salary review", "--body", "SECRET-BODY"]


@dataclass(frozen=True)
class Users:
    caller: int
    """The uid running `recalld`: our victim."""
    other: int
    """Another local user: the attacker, or the daemon's own account."""
    group: int

    @property
    def default_dir(self) -> Path:
        return Path(f"/tmp/recalld-{self.caller}")


@pytest.fixture
def users() -> Iterator[Users]:
    # uids without accounts: permissions only need numbers; pick ones whose /tmp path is free
    caller = 200_000 + int.from_bytes(os.urandom(2), "big") * 4
    chosen = Users(caller, caller + 1, caller + 2)
    assert not chosen.default_dir.exists()
    yield chosen
    shutil.rmtree(chosen.default_dir, ignore_errors=True)


FORGED_ANSWER = (
    b'{"id": "00000000-0000-4000-8000-00000000f0f0", "revision": 1,'
    b' "duplicate_check": {"status": "clear", "threshold": 0.5, "compared": 0, "of": 0}}'
)


class Impostor:
    """A listener at `path` that answers every request with a forged 201 (a create's answer, as
    the daemon would give it), recording what came."""

    def __init__(self, path: Path, mode: int = 0o666) -> None:
        self.path = path
        self.arrived: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        os.chmod(path, mode)
        self.sock.listen(16)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.sock], [], [], 0.1)[0]:
                continue
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(10)
                self.arrived.append(self._read_request(conn))
                body = FORGED_ANSWER
                conn.sendall(
                    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")), 0
        )
        while len(body) < length and (chunk := conn.recv(65536)):
            body += chunk
        return head + b"\r\n\r\n" + body

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def make_dir(path: Path, owner: int, mode: int, group: int | None = None) -> Path:
    path.mkdir()
    os.chown(path, owner, owner if group is None else group)
    os.chmod(path, mode)
    return path


def as_user(
    uid: int, *args: str, groups: str = "-", env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`recalld ARGS` run by `uid` with a login's environment: no $XDG_RUNTIME_DIR, no $RECALLD_SOCKET."""
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "LANG": "C.UTF-8", **(env or {})}
    command = [sys.executable, str(ROOT / "tests" / "support" / "as_user.py"), str(uid), groups, *args]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_cli_sends_nothing_to_a_default_runtime_dir_another_user_made(users: Users) -> None:
    make_dir(users.default_dir, owner=users.other, mode=0o755)
    impostor = Impostor(users.default_dir / SOCKET_NAME)
    try:
        done = as_user(users.caller, *PUT)
    finally:
        impostor.close()
    assert impostor.arrived == [], "the record went to another user's socket"
    assert done.returncode == 1, done.stdout + done.stderr
    assert str(users.default_dir) in done.stderr
    assert f"owned by uid {users.other}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("others can write", "group or others can write"),
        ("the group can write", "group or others can write"),
        ("a symbolic link", "symbolic link"),
    ],
)
def test_the_cli_refuses_a_default_runtime_dir_others_could_tamper_with(users: Users, case: str, reason: str) -> None:
    if case == "a symbolic link":
        # the caller's own, private directory, but reached through a link another user placed
        target = make_dir(scratch_dir("recalld-target-") / "d", owner=users.caller, mode=0o700)
        users.default_dir.symlink_to(target)
        os.lchown(users.default_dir, users.other, users.other)
    else:
        make_dir(users.default_dir, owner=users.caller, mode=0o777 if case == "others can write" else 0o770)
    impostor = Impostor(users.default_dir / SOCKET_NAME)
    try:
        done = as_user(users.caller, *PUT)
    finally:
        impostor.close()
    assert impostor.arrived == []
    assert done.returncode == 1, done.stdout + done.stderr
    assert reason in done.stderr


def test_the_cli_connects_through_its_own_private_runtime_dir(users: Users) -> None:
    make_dir(users.default_dir, owner=users.caller, mode=0o700)
    daemon = Impostor(users.default_dir / SOCKET_NAME)
    try:
        done = as_user(users.caller, *PUT)
    finally:
        daemon.close()
    assert done.returncode == 0, done.stderr
    assert len(daemon.arrived) == 1 and b"SECRET-BODY" in daemon.arrived[0]


def test_an_explicit_socket_in_the_daemons_own_group_readable_dir_is_used(users: Users) -> None:
    """The systemd layout: /run/recalld is 0750 recalld:recalld, the socket 0660, the client a
    member of group recalld: it owns neither, and that is fine."""
    home = scratch_dir("recalld-run-")
    run_dir = make_dir(home / "recalld", owner=users.other, mode=0o750, group=users.group)
    daemon = Impostor(run_dir / SOCKET_NAME, mode=0o660)
    os.chown(daemon.path, users.other, users.group)
    try:
        done = as_user(users.caller, "--socket", str(daemon.path), *PUT, groups=str(users.group))
    finally:
        daemon.close()
        shutil.rmtree(home)
    assert done.returncode == 0, done.stderr
    assert len(daemon.arrived) == 1


def put_to_explicit_socket(
    users: Users, *, owner: int, mode: int, group: int | None = None, socket_owner: int | None = None
) -> tuple[Path, list[bytes], subprocess.CompletedProcess[str]]:
    """A directory of `owner` and `mode` holding an impostor's socket (of `socket_owner`), and the
    caller's `recalld --socket ... put` to it: (the directory, what reached the socket, the run)."""
    home = scratch_dir("recalld-run-")
    directory = make_dir(home / "shared", owner=owner, mode=mode, group=group)
    impostor = Impostor(directory / SOCKET_NAME)
    if socket_owner is not None:
        os.chown(impostor.path, socket_owner, socket_owner if group is None else group)
    groups = "-" if group is None else str(group)
    try:
        done = as_user(users.caller, "--socket", str(impostor.path), *PUT, groups=groups)
    finally:
        impostor.close()
        shutil.rmtree(home)
    return directory, impostor.arrived, done


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_an_explicit_socket_in_a_dir_others_can_write_is_refused(users: Users, mode: int) -> None:
    """Whoever can write to the directory can put their own socket in the daemon's place."""
    shared, arrived, done = put_to_explicit_socket(users, owner=users.other, mode=mode, group=users.group)
    assert arrived == []
    assert done.returncode == 1, done.stdout + done.stderr
    assert str(shared) in done.stderr and "can write" in done.stderr


def test_a_root_owned_dir_its_group_can_write_is_refused(users: Users) -> None:
    """root:users 0775: every member of the group could replace the daemon's socket."""
    _, arrived, done = put_to_explicit_socket(users, owner=0, mode=0o775, group=users.group, socket_owner=users.other)
    assert arrived == []
    assert done.returncode == 1, done.stdout + done.stderr
    assert "can write" in done.stderr


def test_a_socket_another_user_made_in_a_sticky_dir_is_refused(users: Users) -> None:
    """A sticky, root-owned directory like /tmp: anyone may take the socket's name while the
    daemon is down, so the socket's own owner decides."""
    _, arrived, done = put_to_explicit_socket(users, owner=0, mode=0o1777, socket_owner=users.other)
    assert arrived == []
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"owned by uid {users.other}" in done.stderr


def test_parents_made_for_the_daemons_socket_are_ordinary_directories() -> None:
    from recalld.paths import make_socket_dir

    home = scratch_dir("recalld-run-")
    try:
        previous = os.umask(0o077)  # the daemon's own
        try:
            make_socket_dir(home / "a" / "b" / "run", socket_mode=0o660)
        finally:
            os.umask(previous)
        assert stat.S_IMODE((home / "a").stat().st_mode) == 0o755
        assert stat.S_IMODE((home / "a" / "b").stat().st_mode) == 0o755
        assert stat.S_IMODE((home / "a" / "b" / "run").stat().st_mode) == 0o750
    finally:
        shutil.rmtree(home)


def test_the_daemon_will_not_listen_in_a_default_runtime_dir_another_user_made(users: Users) -> None:
    # world-writable, so the daemon could bind there, and the owner could swap the socket later
    make_dir(users.default_dir, owner=users.other, mode=0o777)
    data_dir = make_dir(scratch_dir("recalld-data-") / "data", owner=users.caller, mode=0o700)
    try:
        # a store that refuses at once: a daemon that wrongly got past its socket ends soon after
        refusing_store = {"RECALLD_STORE_DSN": "postgresql://recalld@127.0.0.1:1/none"}
        done = as_user(users.caller, "serve", "--data-dir", str(data_dir), env=refusing_store, timeout=120)
    finally:
        shutil.rmtree(data_dir.parent)
    assert done.returncode == 1, done.stderr
    assert f"owned by uid {users.other}" in done.stderr
    assert not (users.default_dir / SOCKET_NAME).exists()


def test_the_daemon_makes_its_private_runtime_dir_0700(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = tmp_path / "recalld" / SOCKET_NAME
    sock = bind_unix_socket(path, 0o660)
    sock.close()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o660


def test_the_daemon_refuses_a_private_runtime_dir_it_does_not_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, users: Users
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    make_dir(tmp_path / "recalld", owner=users.other, mode=0o700)
    with pytest.raises(UnsafeRuntimeDirectory, match=f"owned by uid {users.other}"):
        bind_unix_socket(tmp_path / "recalld" / SOCKET_NAME, 0o660)
