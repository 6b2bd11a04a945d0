"""Shared fixtures: a real PostgreSQL started by the suite, and real daemons over real sockets.

The suite starts one embedded PostgreSQL (the same code path `recalld serve` uses with no
DSN) for the whole session; each daemon fixture gets a fresh database in it, so tests never
see each other's rows. Daemons are real `recalld serve` processes driven over their Unix
socket, exactly as a client would.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from trio.testing import MockClock

from daemon.store.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parent.parent
RECALLD = [sys.executable, "-m", "daemon"]


# One anyio backend fixture for the whole suite. A test runs on asyncio only unless it (or its module, via
# `pytestmark`) carries `@pytest.mark.anyio_backends(...)`: asyncpg, aiohttp and httpx run on asyncio only,
# so the default is the one every test can take, and trio is opted into where the code under test is pure anyio.
# On trio the clock is trio's MockClock with autojump (timers of seconds cost no real time and are exact)
# unless the marker says `real_clock=True`: tests that wait on worker threads or real inference must not
# have the clock leap past their deadlines while a thread is still busy.
ANYIO_BACKENDS = ("asyncio", "trio")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "anyio_backends(*names, real_clock=False): the anyio backends a test runs on (default: asyncio only)",
    )


def _backend_names(marker: pytest.Mark | None) -> tuple[str, ...]:
    names = tuple(marker.args) if marker is not None else ("asyncio",)
    unknown = set(names) - set(ANYIO_BACKENDS)
    if not names or unknown:
        raise pytest.UsageError(f"anyio_backends takes some of {ANYIO_BACKENDS}, got {names}")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "anyio_backend" not in metafunc.fixturenames:
        return
    names = _backend_names(metafunc.definition.get_closest_marker("anyio_backends"))
    # One backend: no parameter, so the test keeps its plain id.
    if len(names) > 1:
        metafunc.parametrize("anyio_backend", names, indirect=True)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> object:
    marker = request.node.get_closest_marker("anyio_backends")
    name = getattr(request, "param", None) or _backend_names(marker)[0]
    if name == "trio" and not (marker is not None and marker.kwargs.get("real_clock", False)):
        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return name


def scratch_dir(prefix: str) -> Path:
    """A temp dir the embedded server's unprivileged user can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def postgres() -> Iterator[EmbeddedPostgres]:
    home = scratch_dir("recalld-test-pg-")
    server = EmbeddedPostgres(home)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(home, ignore_errors=True)


def sql(dsn: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    """Run one statement against a database from a synchronous test (a connection of its own)."""

    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetch(statement, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def database_dsn(server: EmbeddedPostgres, name: str) -> str:
    return server.dsn.replace("/recalld?", f"/{name}?")


def create_database(server: EmbeddedPostgres) -> str:
    """A fresh, empty database in the session server; returns its DSN."""
    name = "t_" + uuid.uuid4().hex[:12]
    sql(server.dsn, f"CREATE DATABASE {name}")
    return database_dsn(server, name)


@pytest.fixture
def fresh_dsn(postgres: EmbeddedPostgres) -> str:
    return create_database(postgres)


class Daemon:
    """A `recalld serve` subprocess and a JSON client for its socket."""

    def __init__(self, home: Path, env: dict[str, str] | None = None, args: list[str] | None = None) -> None:
        self.home = home
        self.socket = home / "recalld.sock"
        self.data_dir = home / "data"
        self.log_path = home / "daemon.log"
        self.env = {**os.environ, "RECALLD_LOG_LEVEL": "debug", **(env or {})}
        self.args = args or []
        self.proc: subprocess.Popen[bytes] | None = None
        self._http: httpx.Client | None = None

    def start(self, timeout: float = 60.0, wait_ready: bool = True, **popen: Any) -> Daemon:
        command = [
            *RECALLD,
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--socket",
            str(self.socket),
            *self.args,
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, **popen)
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            if self.socket.exists():
                try:
                    status, _ = self.call("GET", "/readyz")
                    if status == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"daemon not ready within {timeout}s:\n{self.log()}")

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            transport = httpx.HTTPTransport(uds=str(self.socket))
            self._http = httpx.Client(transport=transport, base_url="http://recalld", timeout=30)
        return self._http

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
        if raw is not None:
            response = self.http.request(method, path, content=raw, headers={"Content-Type": "application/json"})
        else:
            response = self.http.request(method, path, json=body)
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> int | None:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def search_rows(daemon: Daemon, search_ids: list[str], timeout: float = 10) -> list[asyncpg.Record]:
    """The telemetry rows of these recalls (by `search_id`), once all are written: the search
    recorder writes them in batches, a moment after the answers."""
    deadline = time.monotonic() + timeout
    while True:
        rows = sql(
            daemon.env["RECALLD_STORE_DSN"],
            "SELECT * FROM searches WHERE id = ANY($1::uuid[]) ORDER BY array_position($1::uuid[], id)",
            [uuid.UUID(i) for i in search_ids],
        )
        if len(rows) == len(search_ids) or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


@pytest.fixture
def make_daemon(postgres: EmbeddedPostgres) -> Iterator[Any]:
    """Factory: `make_daemon(env=..., dsn=...)` starts a daemon on a fresh database by default."""
    started: list[tuple[Daemon, Path]] = []

    def make(*, env: dict[str, str] | None = None, dsn: str | None = None, embedded: bool = False, **kw: Any) -> Daemon:
        home = scratch_dir("recalld-test-")
        environment = dict(env or {})
        if not embedded:
            environment.setdefault("RECALLD_STORE_DSN", dsn or create_database(postgres))
        daemon = Daemon(home, environment, kw.pop("args", None))
        started.append((daemon, home))
        return daemon.start(**kw)

    yield make
    for daemon, home in started:
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
async def pool(fresh_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """A migrated fresh database behind the daemon's own pool settings (async store tests)."""
    from daemon.config import StoreConfig
    from daemon.store import db
    from daemon.store.migrations import migrate

    pool = await db.open_pool(fresh_dsn, StoreConfig())
    async with pool.acquire() as conn:
        await migrate(conn)
    yield pool
    await pool.close()


@pytest.fixture(scope="module")
def daemon(postgres: EmbeddedPostgres) -> Iterator[Daemon]:
    """One daemon per test module, on its own fresh database."""
    home = scratch_dir("recalld-test-")
    instance = Daemon(home, {"RECALLD_STORE_DSN": create_database(postgres)}).start()
    yield instance
    code = instance.stop()
    shutil.rmtree(home, ignore_errors=True)
    assert code == 0, f"daemon did not exit cleanly ({code})"


def namespace() -> str:
    return "ns-" + uuid.uuid4().hex[:10]


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses."""
    return namespace()
