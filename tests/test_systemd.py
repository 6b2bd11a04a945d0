"""The sd_notify client against real datagram sockets, and the unit files against systemd's own lint."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recalld.systemd import Notifier, listen_fds, watchdog_interval
from tests.support import ROOT

UNITS = ROOT / "systemd"
INSTALLED_EXEC = "ExecStart=/usr/local/bin/recalld "

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="AF_UNIX abstract names are Linux")


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests may themselves run under systemd; start every test from a known environment.
    for name in (
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_PID",
        "LISTEN_FDS",
        "LISTEN_FDNAMES",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def notify_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket standing in for systemd's, named by NOTIFY_SOCKET."""
    # Not tmp_path: pytest's paths can exceed the 108 bytes an AF_UNIX path may have.
    with tempfile.TemporaryDirectory(prefix="recalld-sd-") as directory:
        path = os.path.join(directory, "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
            server.bind(path)
            server.settimeout(5)
            monkeypatch.setenv("NOTIFY_SOCKET", path)
            yield server


def _no_more_datagrams(server: socket.socket) -> bool:
    server.settimeout(0.05)
    try:
        server.recv(4096)
    except TimeoutError:
        return True
    return False


# --- sd_notify -------------------------------------------------------------------------------

SENDS: list[tuple[str, Callable[[Notifier], None], bytes]] = [
    ("ready", lambda n: n.ready(), b"READY=1"),
    ("ready with status", lambda n: n.ready("serving"), b"READY=1\nSTATUS=serving"),
    ("status", lambda n: n.status("loading generation 3"), b"STATUS=loading generation 3"),
    ("watchdog", lambda n: n.watchdog(), b"WATCHDOG=1"),
    ("stopping", lambda n: n.stopping(), b"STOPPING=1"),
    ("stopping with status", lambda n: n.stopping("draining"), b"STOPPING=1\nSTATUS=draining"),
    ("extend timeout", lambda n: n.extend_timeout(90), b"EXTEND_TIMEOUT_USEC=90000000"),
    ("extend timeout fraction", lambda n: n.extend_timeout(0.25), b"EXTEND_TIMEOUT_USEC=250000"),
    ("status cannot smuggle READY", lambda n: n.status("a\nREADY=1"), b"STATUS=a READY=1"),
]


@pytest.mark.parametrize(("send", "expected"), [s[1:] for s in SENDS], ids=[s[0] for s in SENDS])
def test_each_notification_is_one_exact_datagram(
    notify_socket: socket.socket, send: Callable[[Notifier], None], expected: bytes
) -> None:
    with Notifier.from_environ() as notifier:
        assert notifier.enabled
        send(notifier)
        assert notify_socket.recv(4096) == expected
    assert _no_more_datagrams(notify_socket)


def test_start_to_stop_sequence_arrives_in_order(notify_socket: socket.socket) -> None:
    with Notifier.from_environ() as notifier:
        notifier.status("applying migrations")
        notifier.extend_timeout(30)
        notifier.ready("serving")
        notifier.watchdog()
        notifier.stopping()
    received = [notify_socket.recv(4096) for _ in range(5)]
    assert received == [
        b"STATUS=applying migrations",
        b"EXTEND_TIMEOUT_USEC=30000000",
        b"READY=1\nSTATUS=serving",
        b"WATCHDOG=1",
        b"STOPPING=1",
    ]


@linux_only
def test_abstract_namespace_address(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"recalld-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(b"\0" + name.encode())
        server.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        with Notifier.from_environ() as notifier:
            notifier.ready()
            notifier.watchdog()
        assert server.recv(4096) == b"READY=1"
        assert server.recv(4096) == b"WATCHDOG=1"


def test_notify_socket_is_not_inherited_by_children(notify_socket: socket.socket) -> None:
    # The embedded PostgreSQL is our child: it must not see NOTIFY_SOCKET, yet we keep sending.
    notifier = Notifier.from_environ()
    assert "NOTIFY_SOCKET" not in os.environ
    notifier.ready()
    assert notify_socket.recv(4096) == b"READY=1"
    notifier.close()


def test_unset_environment_false_leaves_the_variable(notify_socket: socket.socket) -> None:
    path = os.environ["NOTIFY_SOCKET"]
    Notifier.from_environ(unset_environment=False).close()
    assert os.environ["NOTIFY_SOCKET"] == path


def test_without_notify_socket_everything_is_a_quiet_no_op(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="recalld.systemd")
    notifier = Notifier.from_environ()
    assert not notifier.enabled
    notifier.ready("serving")
    notifier.status("x")
    notifier.watchdog()
    notifier.extend_timeout(10)
    notifier.stopping()
    notifier.close()
    notifier.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_systemd_gone_is_logged_at_debug_and_never_raises(
    notify_socket: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="recalld.systemd")
    notifier = Notifier.from_environ()
    notifier.ready()
    assert notify_socket.recv(4096) == b"READY=1"
    # systemd goes away (re-exec, or the socket file removed): sends fail, the daemon carries on.
    os.unlink(notify_socket.getsockname())
    notify_socket.close()
    notifier.watchdog()
    notifier.stopping()
    notifier.close()
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.levelno == logging.DEBUG for r in failures)


@pytest.mark.parametrize(
    "value",
    ["relative/notify", "vsock:2:1234", "@", "/" + "x" * 120, "@" + "x" * 120],
    ids=["relative", "vsock", "empty-abstract", "path-too-long", "abstract-too-long"],
)
def test_malformed_notify_socket_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="recalld.systemd")
    monkeypatch.setenv("NOTIFY_SOCKET", value)
    notifier = Notifier.from_environ()
    assert not notifier.enabled
    for _ in range(3):
        notifier.ready()
        notifier.watchdog()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "NOTIFY_SOCKET" in warnings[0].getMessage()


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf")])
def test_extend_timeout_rejects_nonsense(seconds: float) -> None:
    with pytest.raises(ValueError):
        Notifier(None).extend_timeout(seconds)


# --- watchdog --------------------------------------------------------------------------------

OUR_PID = str(os.getpid())
OTHER_PID = str(os.getpid() + 1)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": OUR_PID}, 15.0),
        ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": OUR_PID}, 0.5),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": OTHER_PID}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "30s"}, None),
        ({"WATCHDOG_PID": OUR_PID}, None),
    ],
    ids=[
        "unset",
        "no-pid",
        "our-pid",
        "one-second",
        "other-pid",
        "garbage-pid",
        "zero",
        "negative",
        "garbage-usec",
        "pid-only",
    ],
)
def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expected: float | None) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert watchdog_interval() == expected


# --- socket activation -----------------------------------------------------------------------


def test_listen_fds_without_activation() -> None:
    assert listen_fds() == []


@pytest.mark.parametrize("pid", [OTHER_PID, "garbage"], ids=["other-pid", "garbage"])
def test_listen_fds_for_another_pid_are_not_ours_and_are_cleared(monkeypatch: pytest.MonkeyPatch, pid: str) -> None:
    monkeypatch.setenv("LISTEN_PID", pid)
    monkeypatch.setenv("LISTEN_FDS", "1")
    monkeypatch.setenv("LISTEN_FDNAMES", "recalld.socket")
    assert listen_fds() == []
    assert not {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} & set(os.environ)


# Runs as the activated process: fd 3 is the listening socket, LISTEN_PID names this pid, as
# systemd arranges between fork and exec.
_ACTIVATED_CHILD = """
import json, os, socket, sys
os.dup2(int(sys.argv[1]), 3)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_FDNAMES"] = "recalld.socket"
from recalld.systemd import listen_fds
fds = listen_fds()
sock = socket.socket(fileno=fds[0]) if fds else None
conn = sock.accept()[0] if sock else None
json.dump({
    "fds": fds,
    "left": sorted(k for k in os.environ if k.startswith("LISTEN_")),
    "inheritable": [os.get_inheritable(fd) for fd in fds],
    "name": sock.getsockname() if sock else None,
    "greeting": conn.recv(100).decode() if conn else None,
}, sys.stdout)
"""


def test_listen_fds_hands_over_the_inherited_socket() -> None:
    with tempfile.TemporaryDirectory(prefix="recalld-sd-") as directory:
        path = os.path.join(directory, "recalld.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen()
            child = subprocess.Popen(
                [sys.executable, "-c", _ACTIVATED_CHILD, str(listener.fileno())],
                pass_fds=[listener.fileno()],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE,
            )
            # The child accepts on its copy of the socket: the connection proves fd 3 is ours.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(path)
                client.sendall(b"hello")
                out, _ = child.communicate(timeout=30)
    assert child.returncode == 0
    report = json.loads(out)
    assert report == {
        "fds": [3],
        "left": [],
        "inheritable": [False],
        "name": path,
        "greeting": "hello",
    }


# --- unit files ------------------------------------------------------------------------------


def _systemd_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed; the unit-file lint needs systemd's own tools")
    return path


def _stage_units(directory: Path, service_text: str | None = None, socket_text: str | None = None) -> Path:
    """Copy the units into `directory` with ExecStart pointing at an executable that exists here.

    `systemd-analyze verify` checks that ExecStart's binary is executable; recalld is not installed
    at /usr/local/bin in a test environment, so the copy points at a stand-in script.
    """
    fake = directory / "recalld"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    text = service_text if service_text is not None else (UNITS / "recalld.service").read_text()
    assert text.count(INSTALLED_EXEC) == 1, "ExecStart no longer starts /usr/local/bin/recalld"
    (directory / "recalld.service").write_text(text.replace(INSTALLED_EXEC, f"ExecStart={fake} "))
    sock = socket_text if socket_text is not None else (UNITS / "recalld.socket").read_text()
    (directory / "recalld.socket").write_text(sock)
    return directory


def _verify_problems(directory: Path) -> list[str]:
    """What `systemd-analyze verify` says about our units; empty when they are clean.

    verify exits 0 for an unknown directive or an unparsable value (it only logs "ignoring"),
    so any line naming one of our units counts as a problem, as well as a non-zero exit.
    """
    tool = _systemd_tool("systemd-analyze")
    units = [directory / "recalld.service", directory / "recalld.socket"]
    result = subprocess.run(
        [tool, "verify", "--man=no", "--generators=no", *map(str, units)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_LOG_LEVEL": "info"},
    )
    output = (result.stdout + result.stderr).splitlines()
    problems = [line for line in output if "recalld.service" in line or "recalld.socket" in line]
    if result.returncode != 0:
        problems.append(f"systemd-analyze verify exited {result.returncode}: {output}")
    return problems


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    assert _verify_problems(_stage_units(tmp_path)) == []


SERVICE_BREAKAGES = [
    ("WatchdogSec=30", "WatchdogSecs=30"),  # a typo in a directive name
    ("ProtectSystem=strict", "ProtectSystem=strikt"),  # a value systemd cannot parse
    ("[Service]", "[Servce]"),  # a misspelt section
    ("Type=notify", "Type=notfy"),
]


@pytest.mark.parametrize(("good", "bad"), SERVICE_BREAKAGES, ids=[b for _, b in SERVICE_BREAKAGES])
def test_verify_rejects_a_broken_service(tmp_path: Path, good: str, bad: str) -> None:
    # Without this the lint above could pass by checking nothing.
    text = (UNITS / "recalld.service").read_text()
    assert good in text
    assert _verify_problems(_stage_units(tmp_path, service_text=text.replace(good, bad, 1)))


def test_verify_rejects_a_missing_executable(tmp_path: Path) -> None:
    _stage_units(tmp_path)
    service = tmp_path / "recalld.service"
    service.write_text(service.read_text().replace(str(tmp_path / "recalld"), "/nonexistent/recalld"))
    assert _verify_problems(tmp_path)


def test_verify_rejects_a_broken_socket(tmp_path: Path) -> None:
    text = (UNITS / "recalld.socket").read_text()
    assert "SocketMode=0660" in text
    broken = text.replace("SocketMode=0660", "SocketMode=066O")
    assert _verify_problems(_stage_units(tmp_path, socket_text=broken))


def _create_account(root: Path) -> dict[str, list[str]]:
    """Run the sysusers snippet against an empty `root`; return passwd and group entries by name."""
    tool = _systemd_tool("systemd-sysusers")
    (root / "etc").mkdir()
    subprocess.run([tool, f"--root={root}", str(UNITS / "recalld.sysusers.conf")], check=True, timeout=60)
    entries: dict[str, list[str]] = {}
    for table in ("passwd", "group"):
        for line in (root / "etc" / table).read_text().splitlines():
            fields = line.split(":")
            entries[f"{table}:{fields[0]}"] = fields
    return entries


def test_sysusers_creates_the_recalld_account(tmp_path: Path) -> None:
    entries = _create_account(tmp_path)
    user, group = entries["passwd:recalld"], entries["group:recalld"]
    assert user[3] == group[2], "primary group is recalld"
    assert int(user[2]) < 1000, "a system account"
    assert user[5:] == ["/var/lib/recalld", "/usr/sbin/nologin"]


@pytest.mark.skipif(os.geteuid() != 0, reason="systemd-tmpfiles must be root to chown into a --root tree")
def test_tmpfiles_makes_the_config_directory_readable_by_recalld_only(tmp_path: Path) -> None:
    tmpfiles = _systemd_tool("systemd-tmpfiles")
    gid = int(_create_account(tmp_path)["group:recalld"][2])
    config = str(UNITS / "recalld.tmpfiles.conf")
    subprocess.run([tmpfiles, f"--root={tmp_path}", "--create", config], check=True, timeout=60)
    info = (tmp_path / "etc/recalld").stat()
    assert (info.st_mode & 0o7777, info.st_uid, info.st_gid) == (0o750, 0, gid)
