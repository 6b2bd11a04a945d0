"""The daemon as systemd and an operator see it: embedded PostgreSQL, readiness, sd_notify,
SIGTERM, the socket file and the data-directory lock."""

from __future__ import annotations

import getpass
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recalld.store.embedded import EmbeddedPostgres, binaries, default_shared_buffers_mb
from recalld.store.migrations import MIGRATION_LOCK_KEY
from tests.support import RECALLD, ROOT, Daemon, create_database, scratch_dir, sql
from tests.support.waits import eventually


def postgres_processes(data_dir: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "postgres"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(data_dir) in line]


def test_embedded_defaults_start_own_postgres_and_stop_it_on_sigterm(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(embedded=True)
    assert (daemon.data_dir / "pg" / "PG_VERSION").exists()
    assert postgres_processes(daemon.data_dir), "the embedded server runs under the data dir"
    assert any(
        f"shared_buffers={default_shared_buffers_mb()}MB" in line for line in postgres_processes(daemon.data_dir)
    ), "the embedded server gets more than initdb's 128 MB of buffers where the machine has memory"
    status, created = daemon.call(
        "POST", "/v1/records", {"namespace": "e", "kind": "doc", "title": "Embedded", "body": "works offline"}
    )
    assert status == 201
    assert daemon.stop() == 0
    assert not postgres_processes(daemon.data_dir), "SIGTERM stops the embedded PostgreSQL too"
    assert not daemon.socket.exists(), "the socket file is removed on the way out"
    # the data survives a restart
    daemon.start()
    assert daemon.call("GET", f"/v1/records/{created['id']}")[0] == 200
    assert daemon.stop() == 0


def test_restart_after_sigkill_adopts_nothing_and_serves(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(embedded=True, env={"RECALLD_STORE_SHARED_BUFFERS_MB": "160"})
    assert any("shared_buffers=160MB" in line for line in postgres_processes(daemon.data_dir))
    assert daemon.proc is not None
    daemon.proc.kill()
    daemon.proc.wait()
    assert postgres_processes(daemon.data_dir), "a SIGKILLed daemon leaves its server behind"
    daemon.start()  # stale socket file replaced, orphaned server restarted
    assert daemon.call("GET", "/readyz")[0] == 200
    assert daemon.stop() == 0
    assert not postgres_processes(daemon.data_dir)


def _postmaster(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])


def test_an_embedded_postgresql_killed_under_the_daemon_is_started_again(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(embedded=True)
    record = {"namespace": "pg", "kind": "doc", "title": "Kept", "body": "written before the kill"}
    status, created = daemon.call("POST", "/v1/records", record)
    assert status == 201, created
    killed = _postmaster(daemon.data_dir)
    os.kill(killed, signal.SIGKILL)  # as the OOM killer would
    eventually(
        lambda: daemon.call("GET", "/readyz")[0] == 200 and _postmaster(daemon.data_dir) != killed,
        60,
        "the embedded PostgreSQL started again and the daemon ready",
        ignoring=(FileNotFoundError,),  # the new server's pid file is not written yet
    )
    assert daemon.call("GET", f"/v1/records/{created['id']}")[1]["body"] == record["body"], "committed data survives"
    status, again = daemon.call("POST", "/v1/records", {**record, "title": "After", "body": "a sapphire lighthouse"})
    assert status == 201, again
    status, found = daemon.call("POST", "/v1/recall", {"namespace": "pg", "query": "lighthouse", "routes": ["fts"]})
    assert status == 200 and [hit["id"] for hit in found["results"]] == [again["id"]], found
    assert "the embedded PostgreSQL stopped" in daemon.log()
    # counted once the restart returns, which may be a moment after the server already answers
    eventually(
        lambda: "recalld_embedded_postgres_restarts_total 1.0" in daemon.http.get("/metrics").text,
        30,
        "the restart counted in /metrics",
    )
    assert daemon.stop() == 0
    assert not postgres_processes(daemon.data_dir), "the restarted server is stopped with the daemon"


def test_an_embedded_postgresql_that_cannot_start_again_ends_the_daemon(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(embedded=True)
    with open(daemon.data_dir / "pg" / "postgresql.auto.conf", "a") as conf:
        conf.write("no_such_setting = 1\n")  # read at the next start only: that start fails
    os.kill(_postmaster(daemon.data_dir), signal.SIGKILL)
    assert daemon.proc is not None
    assert daemon.proc.wait(timeout=90) == 1, "the supervisor gives up, for systemd to restart the daemon whole"
    log = daemon.log()
    assert "supervisor gave up" in log and "pg_ctl failed" in log and "server log:" in log, log


def test_the_embedded_server_has_room_for_the_whole_pool_and_more(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(embedded=True, env={"RECALLD_STORE_POOL_MIN": "100", "RECALLD_STORE_POOL_MAX": "100"})
    owner = "recalld" if os.geteuid() == 0 else getpass.getuser()
    dsn = f"postgresql://{owner}@/recalld?host={daemon.data_dir / 'pg'}&port=5432"
    # an operator's connection next to a full pool (on PostgreSQL's default of 100: refused)
    clients = sql(dsn, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")[0][0]
    assert clients >= 100 + 2, "the whole pool, the LISTEN connection and this one"
    assert "LISTEN connection failed" not in daemon.log()


def test_socket_mode_is_0660(daemon: Daemon) -> None:
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o660


def test_a_second_daemon_on_the_same_data_dir_refuses(daemon: Daemon) -> None:
    other = subprocess.run(
        [*RECALLD, "serve", "--data-dir", str(daemon.data_dir), "--socket", str(daemon.home / "other.sock")],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert other.returncode == 1
    assert "in use by another recalld" in other.stderr


def test_a_live_socket_is_not_stolen_and_a_non_socket_is_not_removed(daemon: Daemon) -> None:
    home = scratch_dir("recalld-test-")
    env = dict(daemon.env)
    taken = subprocess.run(
        [*RECALLD, "serve", "--data-dir", str(home / "data"), "--socket", str(daemon.socket)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert taken.returncode != 0 and "another process is listening" in taken.stderr
    regular = home / "not-a-socket"
    regular.write_text("keep me")
    refused = subprocess.run(
        [*RECALLD, "serve", "--data-dir", str(home / "data2"), "--socket", str(regular)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert refused.returncode != 0 and "not a socket" in refused.stderr
    assert regular.read_text() == "keep me"


def test_readiness_follows_postgresql_down_and_back(make_daemon: Any) -> None:
    home = scratch_dir("recalld-test-pg-")
    server = EmbeddedPostgres(home)
    dsn = server.start()
    try:
        daemon: Daemon = make_daemon(dsn=dsn)
        assert daemon.call("GET", "/readyz")[0] == 200
        server.stop()
        status, body = daemon.call("GET", "/readyz")
        assert status == 503 and body["status"] == "fail", body
        assert body["checks"]["store"]["status"] == "fail" and body["checks"]["store"]["reason"] == "store_unavailable"
        assert daemon.call("GET", "/livez") == (200, {"status": "pass"}), "a store outage is not a liveness failure"
        status, body = daemon.call("POST", "/v1/records", {"namespace": "r", "kind": "doc", "title": "t", "body": "b"})
        assert status == 503 and body["error"]["code"] == "store_unavailable"
        server.start()
        eventually(lambda: daemon.call("GET", "/readyz")[0] == 200, 20, "readiness back after PostgreSQL returned")
        assert (
            daemon.call("POST", "/v1/records", {"namespace": "r", "kind": "doc", "title": "t", "body": "b"})[0] == 201
        )
        assert daemon.stop() == 0
    finally:
        server.stop()


def _bind_notify_socket(home: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(home / "notify.sock"))
    sock.settimeout(30)
    return sock


def _datagrams_until(sock: socket.socket, needle: str) -> list[str]:
    seen: list[str] = []
    while not any(needle in d for d in seen):
        seen.append(sock.recv(4096).decode())
    return seen


def test_sd_notify_ready_status_watchdog_stopping(make_daemon: Any) -> None:
    home = scratch_dir("recalld-test-notify-")
    listener = _bind_notify_socket(home)
    try:
        daemon: Daemon = make_daemon(
            env={"NOTIFY_SOCKET": str(home / "notify.sock"), "WATCHDOG_USEC": "400000"}, wait_ready=False
        )
        before_ready = _datagrams_until(listener, "READY=1")
        assert any(d.startswith("STATUS=applying migrations") for d in before_ready), before_ready
        ready = before_ready[-1].split("\n")
        assert "READY=1" in ready
        assert _datagrams_until(listener, "WATCHDOG=1")[-1] == "WATCHDOG=1"
        daemon.wait_ready()
        assert daemon.proc is not None
        daemon.proc.terminate()
        stopping = _datagrams_until(listener, "STOPPING=1")
        assert "STOPPING=1" in stopping[-1].split("\n")
        assert daemon.proc.wait(30) == 0
    finally:
        listener.close()


def test_start_up_waits_out_another_daemons_migrations_and_tells_systemd(
    make_daemon: Any, postgres: EmbeddedPostgres
) -> None:
    dsn = create_database(postgres)
    home = scratch_dir("recalld-test-migrating-")
    listener = _bind_notify_socket(home)
    # another daemon migrating a large database holds the migration lock for a while
    holder = subprocess.Popen(
        [
            str(binaries() / "psql"),
            dsn,
            "-c",
            f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})",
            "-c",
            "SELECT pg_sleep(4)",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:

        def lock_taken() -> bool:
            assert holder.poll() is None, "psql ended before taking the lock"
            return bool(sql(dsn, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"))

        eventually(lock_taken, 30, "psql holding the migration lock")
        daemon: Daemon = make_daemon(
            dsn=dsn,
            env={"NOTIFY_SOCKET": str(home / "notify.sock"), "RECALLD_STORE_STATEMENT_TIMEOUT_S": "1"},
            wait_ready=False,
        )
        before_ready = _datagrams_until(listener, "READY=1")
        assert holder.poll() is not None, "ready only once the other daemon's migrations are done"
        assert any(d.startswith("EXTEND_TIMEOUT_USEC=") for d in before_ready), before_ready
        daemon.wait_ready()  # the wait was longer than a statement may take, and the start still succeeded
    finally:
        holder.kill()
        holder.wait()
        listener.close()


def test_socket_activation_serves_on_the_inherited_fd(postgres: EmbeddedPostgres) -> None:
    home = scratch_dir("recalld-test-activation-")
    path = home / "activated.sock"
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(path))
    listening.listen()
    env = {**os.environ, "RECALLD_STORE_DSN": create_database(postgres), "LISTEN_FDS": "1"}
    # What systemd does: the listening socket is fd 3 and LISTEN_PID is the service's own pid
    # (exec keeps the pid, so the launcher can announce the pid the daemon will have).
    launcher = (
        "import os, sys\n"
        "os.dup2(int(sys.argv[1]), 3)\n"
        "os.environ['LISTEN_PID'] = str(os.getpid())\n"
        "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
    )
    command = [sys.executable, "-c", launcher, str(listening.fileno()), "-m", "recalld", "serve"]
    command += ["--data-dir", str(home / "data"), "--socket", str(home / "unused.sock")]
    with open(home / "recalld.log", "wb") as log:
        proc = subprocess.Popen(
            command, env=env, cwd=ROOT, pass_fds=(listening.fileno(),), stdout=log, stderr=subprocess.STDOUT
        )
    daemon = Daemon(home)
    daemon.socket = path
    daemon.proc = proc
    try:
        daemon.wait_ready()
        assert not (home / "unused.sock").exists(), "with an inherited socket nothing else is bound"
        assert daemon.call("GET", "/livez") == (200, {"status": "pass"})
    finally:
        assert daemon.stop() == 0, daemon.log()
        listening.close()


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_shutdown_signals_exit_zero(daemon: Daemon, signum: str, make_daemon: Any) -> None:
    import signal

    other: Daemon = make_daemon()
    assert other.proc is not None
    other.proc.send_signal(getattr(signal, signum))
    assert other.proc.wait(30) == 0


def test_a_stop_during_start_up_unwinds_it_and_leaves_no_postgresql(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(embedded=True, wait_ready=False)
    assert daemon.proc is not None
    proc = daemon.proc

    def starting(condition: Callable[[], object]) -> Callable[[], object]:
        def probe() -> object:
            assert proc.poll() is None, daemon.log()
            return condition()

        return probe

    # the server is up; migrations and actors are still to come
    eventually(starting(lambda: postgres_processes(daemon.data_dir)), 60, "the embedded server started", poll=0.02)
    daemon.proc.send_signal(signal.SIGTERM)  # systemd's start timeout, or `systemctl stop` during start
    # Only once the first is handled: two signals pending at once are delivered lowest number
    # first (SIGINT before SIGTERM), which a fixed pause on a loaded machine did not rule out.
    eventually(
        starting(lambda: "received SIGTERM; shutting down" in daemon.log_path.read_text(errors="replace")),
        60,
        "SIGTERM handled",
        poll=0.02,
    )
    daemon.proc.send_signal(signal.SIGINT)  # an impatient second Ctrl-C
    assert daemon.proc.wait(60) == 0, daemon.log()
    assert not postgres_processes(daemon.data_dir), "the embedded server is stopped, not orphaned"
    assert "received SIGINT again; still shutting down" in daemon.log()


def test_an_initdb_cut_short_leaves_nothing_a_later_start_trusts() -> None:
    home = scratch_dir("recalld-test-initdb-")
    server = EmbeddedPostgres(home)
    # what a start stopped during initdb leaves: a half-written scratch cluster, an empty pg/
    scratch = server.pgdata.with_name(server.pgdata.name + ".initdb")
    scratch.mkdir(mode=0o700)
    (scratch / "PG_VERSION").write_text("18\n")
    server.pgdata.mkdir(mode=0o700)
    try:
        dsn = server.start()
        assert dsn and (server.pgdata / "PG_VERSION").exists() and not scratch.exists()
    finally:
        server.stop()


def _server_processes(data_dir: Path) -> list[int]:
    """The embedded server's postmaster and every process it started (backends included)."""
    postmaster = _postmaster(data_dir)
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    return [postmaster, *map(int, children)]


def test_requests_to_a_frozen_postgresql_fail_after_one_statement_timeout(make_daemon: Any) -> None:
    # No provider: no indexer at work on the pool; connections enough for each request to find
    # one open (a new connection to a frozen server waits connect_timeout_s instead).
    env = {
        "RECALLD_STORE_STATEMENT_TIMEOUT_S": "2",
        "RECALLD_EMBEDDING_PROVIDER": "none",
        "RECALLD_STORE_POOL_MIN": "8",
    }
    daemon: Daemon = make_daemon(embedded=True, env=env)
    record = {"namespace": "frozen", "kind": "doc", "title": "Before", "body": "written before the freeze"}
    status, created = daemon.call("POST", "/v1/records", record)
    assert status == 201, created
    requests = [
        ("POST", "/v1/records", {**record, "title": "During"}, "store_unavailable"),
        ("GET", f"/v1/records/{created['id']}", None, "store_unavailable"),
        ("POST", "/v1/recall", {"namespace": "frozen", "query": "written", "routes": ["fts"]}, "route_unavailable"),
    ]
    answers = []
    frozen = _server_processes(daemon.data_dir)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)  # a hung server: the connections stay open, nothing answers
    try:
        for method, path, body, _ in requests:
            started = time.monotonic()
            status, answer = daemon.call(method, path, body)
            answers.append((status, answer, time.monotonic() - started))
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    for (method, path, _, code), (status, answer, waited) in zip(requests, answers, strict=True):
        assert status == 503 and answer["error"]["code"] == code, (method, path, answer)
        # one statement's time, not two: the connection is dropped, not rolled back or waited on
        assert 1.9 < waited < 3.5, (method, path, waited)
    eventually(lambda: daemon.call("GET", "/readyz")[0] == 200, 30, "readiness back after the thaw")
    status, found = daemon.call("POST", "/v1/recall", {"namespace": "frozen", "query": "written", "routes": ["fts"]})
    assert status == 200 and [hit["title"] for hit in found["results"]] == ["Before"], "nothing half written"
    assert daemon.call("POST", "/v1/records", {**record, "title": "After"})[0] == 201
