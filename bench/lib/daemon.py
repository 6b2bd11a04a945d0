"""A daemon for a bench: `recalld serve` started on a data directory and waited for, driven over
its socket, and stopped; the DSN of the PostgreSQL it embeds."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.lib.corpus import NAMESPACE
from bench.lib.paths import RECALL_WORK, ROOT
from bench.lib.report import progress
from recalld.client import Client, ClientError


def embedded_dsn(data_dir: Path) -> str:
    """The DSN of the PostgreSQL a daemon on the embedded defaults runs in `data_dir`."""
    user = "recalld" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    return f"postgresql://{user}@/recalld?host={data_dir / 'pg'}&port=5432"


def start_daemon(
    data_dir: Path, socket: Path, log: Path, *, config: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`recalld serve` on `data_dir`, returned once it answers /livez on `socket`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    command = [str(ROOT / ".venv/bin/recalld"), "serve", "--data-dir", str(data_dir), "--socket", str(socket)]
    if config is not None:
        command += ["--config", str(config)]
    daemon = subprocess.Popen(
        command, stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    client = Client(socket)
    try:
        for _ in range(240):
            try:
                client.request("GET", "/livez")
                return daemon
            except ConnectionError:
                if daemon.poll() is not None:
                    raise SystemExit(f"recalld serve exited ({daemon.returncode}); see {log}") from None
                time.sleep(0.5)
    finally:
        client.close()
    raise SystemExit(f"recalld did not answer on {socket} within 120 s; see {log}")


def start_fresh(work: Path, namespace: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """`recalld serve` from this tree (`python -m recalld` with ROOT first on PYTHONPATH) on a
    fresh data directory under `work`; returned once a full-text recall in `namespace` answers."""
    shutil.rmtree(work / "data", ignore_errors=True)
    (work / "data").mkdir(parents=True)
    socket = work / "recalld.sock"
    log = (work / "serve.log").open("ab")
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "recalld", "serve", "--data-dir", str(work / "data"), "--socket", str(socket)]
    daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    client = Client(socket)
    try:
        for _ in range(480):
            try:
                client.request("POST", "/v1/recall", {"namespace": namespace, "query": "warm up", "routes": ["fts"]})
                return daemon, socket
            except (ConnectionError, ClientError):
                if daemon.poll() is not None:
                    raise SystemExit(f"recalld serve exited ({daemon.returncode}); see {work / 'serve.log'}") from None
                time.sleep(0.5)
        raise SystemExit(f"recalld did not answer within 240 s; see {work / 'serve.log'}")
    except BaseException:
        daemon.terminate()  # never leave a daemon behind on a data directory the next run deletes
        daemon.wait(timeout=60)
        raise
    finally:
        client.close()


def stop_daemon(daemon: subprocess.Popen[bytes] | None) -> None:
    if daemon is not None:
        daemon.terminate()
        daemon.wait(timeout=60)


def wait_caught_up(client: Client, *, settled: bool = False) -> dict[str, Any]:
    """Poll /v1/generations until the vector route has every live chunk (pending == 0).

    `settled`: also until a verified generation is current and no build is queued or running,
    so what is measured next does not share the machine with a build."""
    started = time.monotonic()
    last = ""
    while True:
        answer: dict[str, Any] = client.request("GET", "/v1/generations")
        pending = answer["pending"]
        caught_up = pending == 0 and (answer["current"] is not None or answer["index"]["handle"] is not None)
        if settled:
            building = any(build["state"] in ("queued", "running") for build in answer["builds"])
            caught_up = caught_up and answer["current"] is not None and not building
        if caught_up:
            progress(f"vector route caught up after {time.monotonic() - started:.0f} s")
            return answer
        state = f"{pending} records pending" if pending else "a generation is being built"
        if state != last:
            progress(f"waiting for the vector route: {state} ({time.monotonic() - started:.0f} s)")
            last = state
        time.sleep(5)


READY_QUERY = "is the vector route answering yet"
"""What `wait_ready` asks: no bench's query, so that every query a bench asks next as new is new
(a query asked here would come from the daemon's query-vector cache afterwards)."""


def wait_ready(socket: Path) -> None:
    """Until the vector route answers whole (a restarted daemon loads its generation first)."""
    client = Client(socket, timeout=120)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            body = {"namespace": NAMESPACE, "query": READY_QUERY, "k": 10, "routes": ["vector"]}
            try:
                if not client.request("POST", "/v1/recall", body)["degraded_routes"]:
                    return
            except ClientError as exc:
                if exc.status != 503:  # 503: no route answered yet
                    raise
            time.sleep(0.2)
    finally:
        client.close()
    raise SystemExit("the restarted daemon's vector route did not answer within 120 s")


@contextmanager
def daemon_on_recall_data() -> Iterator[Path]:
    """A daemon on the 100k passages `python -m bench.recall` left in RECALL_WORK, for the benches
    that measure on them; yields RECALL_WORK."""
    if not (RECALL_WORK / "corpus.json").exists():
        raise SystemExit("run `python -m bench.recall` first: it builds the data this measures on")
    work = RECALL_WORK
    daemon = start_daemon(work / "data", work / "recalld.sock", work / "serve.log", config=work / "recalld.toml")
    try:
        yield work
    finally:
        stop_daemon(daemon)
