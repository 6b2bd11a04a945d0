"""Helpers the tests import: real daemons over their socket, the session's PostgreSQL from
synchronous code, scratch directories. Fixtures stay in the conftest.py files, which nothing imports.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from recalld.store.embedded import EmbeddedPostgres
from tests.support.waits import eventually

ROOT = Path(__file__).resolve().parents[2]
"""The repository: tests/support/__init__.py is two folders below it."""


RECALLD = [sys.executable, "-m", "recalld"]


def is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker, started by the run's controller (pytest's first process)."""
    return hasattr(config, "workerinput")


def share_run_dir(config: pytest.Config, variable: str, prefix: str) -> None:
    """In the run's controller: a new temp directory, named by environment `variable`, which the
    workers it starts inherit (so they share it). Undone by `remove_run_dir`."""
    if not is_worker(config):
        os.environ[variable] = tempfile.mkdtemp(prefix=prefix)


def remove_run_dir(config: pytest.Config, variable: str) -> None:
    """In the run's controller, at the end: `share_run_dir`'s directory, and its variable."""
    if not is_worker(config):
        shutil.rmtree(os.environ.pop(variable, ""), ignore_errors=True)


def scratch_dir(prefix: str) -> Path:
    """A temp dir the embedded server's unprivileged user can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


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


class Daemon:
    """A `recalld serve` subprocess and a JSON client for its socket."""

    def __init__(self, home: Path, env: dict[str, str] | None = None, args: list[str] | None = None) -> None:
        self.home = home
        self.socket = home / "recalld.sock"
        self.data_dir = home / "data"
        self.log_path = home / "recalld.log"
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
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            return self.socket.exists() and self.call("GET", "/readyz")[0] == 200

        try:  # every test start waits here: asked often
            eventually(ready, timeout, "the daemon ready", poll=0.02, ignoring=(httpx.TransportError,))
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.log()}") from None

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

    def create_all(self, records: list[dict[str, Any]], batch: int = 500) -> list[str]:
        """Create `records` by batch writes of `batch` (setup for what a test measures, not the
        writes themselves); every item must be created. Their ids, in order."""
        ids: list[str] = []
        for start in range(0, len(records), batch):
            status, written = self.call("POST", "/v1/records:batch", {"records": records[start : start + batch]})
            assert status == 200 and all(item["status"] == 201 for item in written["results"]), written
            ids += [item["id"] for item in written["results"]]
        return ids

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

    def rows() -> list[asyncpg.Record]:
        return sql(
            daemon.env["RECALLD_STORE_DSN"],
            "SELECT * FROM searches WHERE id = ANY($1::uuid[]) ORDER BY array_position($1::uuid[], id)",
            [uuid.UUID(i) for i in search_ids],
        )

    return eventually(rows, timeout, "every search row written", accept=lambda found: len(found) == len(search_ids))


def namespace() -> str:
    return "ns-" + uuid.uuid4().hex[:10]
