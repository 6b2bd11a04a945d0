"""A postmaster.pid the embedded server left behind names a process that may no longer be its
postmaster: after an unclean reboot the pid is reused by anything. Such a process is never
signalled, the stale file does not keep the server down, and a real orphaned postmaster of this
data directory is still stopped and replaced."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import traceback
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from recalld.store.embedded import SERVICE_USER, EmbeddedPostgres, keep_running, postmaster_of
from tests.support import scratch_dir, sql

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="starts processes as the service user")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Path, str]]:
    """An initialised, stopped cluster and the postmaster.pid its server wrote while running."""
    home = scratch_dir("recalld-test-pidfile-")
    server = EmbeddedPostgres(home)
    server.start()
    written = (server.pgdata / "postmaster.pid").read_text()
    server.stop()
    yield home, written
    EmbeddedPostgres(home).stop()
    shutil.rmtree(home, ignore_errors=True)


def leave_pid_file(home: Path, written: str, pid: int) -> None:
    """What an unclean reboot leaves: the server's own pid file, now naming `pid`."""
    lines = written.split("\n")
    (home / "pg" / "postmaster.pid").write_text("\n".join([str(pid), *lines[1:]]))


@pytest.fixture
def bystander(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes]]:
    """A live process unrelated to PostgreSQL, as the test's own user or (param "service") the
    account the embedded server runs as."""
    user = SERVICE_USER if getattr(request, "param", None) == "service" else None
    proc = subprocess.Popen(["sleep", "300"], user=user)
    yield proc
    proc.kill()
    proc.wait()


def assert_untouched(proc: subprocess.Popen[bytes]) -> None:
    assert proc.poll() is None, f"the unrelated process was signalled (exit {proc.returncode})"
    state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state in ("S", "R"), f"the unrelated process is in state {state}"


def gone(pid: int) -> bool:
    """Exited: no process, or a zombie nobody has reaped yet (the postmaster's parent is init)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def assert_serves(server: EmbeddedPostgres, dsn: str) -> None:
    assert server.is_running()
    assert sql(dsn, "SELECT 1")[0][0] == 1


def start_over(home: Path) -> tuple[EmbeddedPostgres, str]:
    server = EmbeddedPostgres(home)  # as a daemon started after the reboot would
    return server, server.start()


@pytest.mark.parametrize("bystander", ["self", pytest.param("service", marks=ROOT_ONLY)], indirect=True)
def test_a_pid_file_naming_an_unrelated_live_process_neither_signals_it_nor_blocks_the_start(
    cluster: tuple[Path, str], bystander: subprocess.Popen[bytes]
) -> None:
    home, written = cluster
    leave_pid_file(home, written, bystander.pid)
    server, dsn = start_over(home)
    try:
        assert_untouched(bystander)
        assert_serves(server, dsn)
    finally:
        server.stop()
    assert_untouched(bystander)
    leave_pid_file(home, written, bystander.pid)
    assert not server.is_running(), "a sleep is not this data directory's postmaster"
    server.stop()  # nothing to stop: no pg_ctl stop, no SIGQUIT
    assert_untouched(bystander)


def test_a_pid_file_naming_another_clusters_postmaster_leaves_that_server_up(
    cluster: tuple[Path, str], postgres: EmbeddedPostgres
) -> None:
    # A data directory copied (a backup, a move) while its server ran carries that server's pid.
    home, written = cluster
    other = postgres.postmaster()
    assert other is not None, "the session's server runs"
    leave_pid_file(home, written, other)
    server, dsn = start_over(home)
    try:
        assert_serves(server, dsn)
        assert postgres.postmaster() == other, "the other server was not stopped"
        assert sql(postgres.dsn, "SELECT 1")[0][0] == 1
    finally:
        server.stop()
    assert postgres.postmaster() == other


def test_a_pid_file_naming_a_dead_process_does_not_block_the_start(cluster: tuple[Path, str]) -> None:
    home, written = cluster
    gone = subprocess.Popen(["true"])
    gone.wait()
    leave_pid_file(home, written, gone.pid)
    server, dsn = start_over(home)
    try:
        assert_serves(server, dsn)
    finally:
        server.stop()


def test_an_orphaned_postmaster_of_this_data_directory_is_stopped_and_replaced(cluster: tuple[Path, str]) -> None:
    home, _ = cluster
    orphan = EmbeddedPostgres(home)  # a daemon killed with SIGKILL leaves its server running
    orphan.start()
    orphaned = orphan.postmaster()
    assert orphaned is not None
    server, dsn = start_over(home)
    try:
        assert_serves(server, dsn)
        replaced = server.postmaster()
        assert replaced is not None and replaced != orphaned, "the orphan was stopped and a fresh server started"
        assert gone(orphaned)
    finally:
        server.stop()
        orphan.stop()  # its socket directory, if it had one of its own


def test_the_keeper_starts_a_server_whose_pid_file_names_an_unrelated_process(
    cluster: tuple[Path, str], bystander: subprocess.Popen[bytes]
) -> None:
    home, written = cluster
    server, _ = start_over(home)

    async def keep_until_restarted() -> None:
        restarted = anyio.Event()
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                await tg.start(
                    lambda task_status: keep_running(server, restarted.set, poll_s=0.05, task_status=task_status)
                )
                server.stop()  # behind the keeper's back; then the pid file names a sleep
                leave_pid_file(home, written, bystander.pid)
                await restarted.wait()
                tg.cancel_scope.cancel()

    try:
        anyio.run(keep_until_restarted)
        assert server.is_running() and server.postmaster() != bystander.pid
        assert_untouched(bystander)
    finally:
        server.stop()


def test_the_postmaster_check_refuses_a_foreign_process(
    cluster: tuple[Path, str], bystander: subprocess.Popen[bytes], postgres: EmbeddedPostgres
) -> None:
    home, written = cluster
    pgdata = home / "pg"
    owner = Path(f"/proc/{bystander.pid}").stat().st_uid
    leave_pid_file(home, written, bystander.pid)
    assert postmaster_of(pgdata, owner) is None, "a sleep of the right user is not a postmaster"
    other = postgres.postmaster()
    assert other is not None
    server_uid = Path(f"/proc/{other}").stat().st_uid
    leave_pid_file(home, written, other)
    assert postmaster_of(pgdata, server_uid) is None, "another data directory's postmaster is not ours"
    assert postmaster_of(postgres.pgdata, server_uid) == other
    assert postmaster_of(postgres.pgdata, server_uid + 1) is None, "nor is a postmaster of another user"
    (pgdata / "postmaster.pid").unlink()
    assert postmaster_of(pgdata, server_uid) is None, "no pid file: no postmaster"


@ROOT_ONLY
def test_a_non_root_daemon_starts_over_a_pid_file_naming_a_root_process(
    cluster: tuple[Path, str], bystander: subprocess.Popen[bytes]
) -> None:
    # The systemd set-up: recalld runs as the service account and the pid file names root's
    # process. Forked, not a new interpreter: the service account cannot reach this one's.
    home, written = cluster
    leave_pid_file(home, written, bystander.pid)
    account = pwd.getpwnam(SERVICE_USER)
    errors = home / "non-root.err"
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            with open(errors, "w") as err:
                os.dup2(err.fileno(), 2)
            os.setgroups([])
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            server = EmbeddedPostgres(home)
            server.start()
            code = 0 if server.is_running() else 3
            server.stop()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, errors.read_text()[-3000:]
    assert_untouched(bystander)
