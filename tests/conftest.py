"""Shared fixtures: a real PostgreSQL started by the suite, and real daemons over real sockets.

Layout: the folders mirror the package: tests/actors/<part> tests recalld.actors.<part> (actors/<part>),
tests/<part> tests recalld.<part> (daemon/<part>), and a daemon-level test of a feature sits with
that feature; tests/support holds the helpers and fakes the tests import. What a test needs is a
mark (`pg`, `process`, `slow`; pyproject.toml), not a folder.

The suite starts one embedded PostgreSQL (the same code path `recalld serve` uses with no
DSN) for the whole session; each daemon fixture gets a fresh database in it, so tests never
see each other's rows. Daemons are real `recalld serve` processes driven over their Unix
socket, exactly as a client would.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from trio.testing import MockClock

from recalld.providers.local import LocalProvider
from recalld.store.embedded import EmbeddedPostgres
from tests.support import Daemon, create_database, namespace, remove_run_dir, scratch_dir, share_run_dir, sql
from tests.support.cli import recalld
from tests.support.embedding_service import EmbeddingServer
from tests.support.other_users import as_user
from tests.support.terminal import in_terminal

# One anyio backend fixture for the whole suite. A test runs on asyncio only unless it (or its module, via
# `pytestmark`) carries `@pytest.mark.anyio_backends(...)`: asyncpg, aiohttp and httpx run on asyncio only,
# so the default is the one every test can take, and trio is opted into where the code under test is pure anyio.
# On trio the clock is trio's MockClock with autojump (timers of seconds cost no real time and are exact)
# unless the marker says `real_clock=True`: tests that wait on worker threads or real inference must not
# have the clock leap past their deadlines while a thread is still busy.
ANYIO_BACKENDS = ("asyncio", "trio")


pytest_plugins = ["pytester", "tests.support.exclusive"]


PG_FIXTURES = frozenset({"postgres", "pool", "fresh_dsn", "daemon", "make_daemon"})
"""Fixtures that need the session's PostgreSQL: a test using any of them, even through a fixture
of its own, is marked `pg`."""
PROCESS_FIXTURES = frozenset({"daemon", "make_daemon"})
"""Fixtures that start a daemon: a test using any of them is marked `process`."""
PROCESS_HELPERS = (subprocess, Daemon, recalld, in_terminal, as_user)
"""What starts a process otherwise: the tests of a module that imports one of these are marked
`process` (a few of them may start none; a test that needs none sits where none is imported)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """What a test needs is a mark, not a folder: `pg` and `process` from the fixtures it uses and
    the helpers its module imports; `-m "not pg and not process"` runs the tests that need neither."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        module = vars(getattr(item, "module", None) or pytest)
        starts = any(any(value is helper for helper in PROCESS_HELPERS) for value in module.values())
        if used & PG_FIXTURES:
            item.add_marker(pytest.mark.pg)
        if used & PROCESS_FIXTURES or starts:
            item.add_marker(pytest.mark.process)


def pytest_configure(config: pytest.Config) -> None:
    # One cache directory for every daemon the suite starts, as one machine's daemon keeps it
    # between its starts (the title model's parsed files: about 1 s of each start, once). The
    # workers inherit the controller's.
    share_run_dir(config, "CACHE_DIRECTORY", "recalld-test-cache-")
    config.addinivalue_line(
        "markers",
        "anyio_backends(*names, real_clock=False): the anyio backends a test runs on (default: asyncio only)",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    remove_run_dir(config, "CACHE_DIRECTORY")


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


@pytest.fixture(scope="session")
def postgres() -> Iterator[EmbeddedPostgres]:
    home = scratch_dir("recalld-test-pg-")
    server = EmbeddedPostgres(home)
    server.start()
    throwaway_cluster(server)
    yield server
    server.stop()
    shutil.rmtree(home, ignore_errors=True)


def throwaway_cluster(server: EmbeddedPostgres) -> None:
    """The session's server is deleted at the end: it needs no durability against a power cut.
    Without fsync, its checkpoints stop flushing the hundreds of databases the suite creates to
    disk (measured on the loaded 2-core machine: stopping the server and deleting its files after
    100 databases took 26-64 s with fsync, 3-4 s without). A killed PostgreSQL still recovers
    from its WAL, which is all any test asks of it; only an OS crash could tear a page. The
    daemons' own embedded servers (`embedded=True`) keep the product's settings."""
    for setting in ("fsync = off", "full_page_writes = off"):
        sql(server.dsn, f"ALTER SYSTEM SET {setting}")
    sql(server.dsn, "SELECT pg_reload_conf()")


@pytest.fixture
def fake() -> Iterator[EmbeddingServer]:
    """An OpenAI/Ollama-wire embedding server on loopback (`tests/support/embedding_service.py`), 48
    dimensions: a vector space of its own, unlike the local model's."""
    server = EmbeddingServer(dimension=48)
    yield server
    server.close()


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalProvider]:
    """The real local model, loaded once for the whole session (about 0.3 s)."""
    provider = LocalProvider()
    provider.load()
    yield provider


@pytest.fixture
def fresh_dsn(postgres: EmbeddedPostgres) -> str:
    return create_database(postgres)


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
    from recalld.config import StoreConfig
    from recalld.store import db
    from recalld.store.migrations import migrate

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


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses."""
    return namespace()
