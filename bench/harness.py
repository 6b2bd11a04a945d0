"""What every script in bench/ shares: progress lines, the machine's description, a daemon started
on a data directory and driven over its socket, and markdown sections rewritten in place."""

from __future__ import annotations

import argparse
import os
import platform
import pwd
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from daemon.client import Client  # noqa: E402


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} cores, Python {platform.python_version()}, {platform.system()} {platform.machine()}"


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


_TICK = os.sysconf("SC_CLK_TCK")


def _stat_times(pid: int) -> tuple[int, list[int]]:
    """(parent pid, [utime, stime, cutime, cstime]) in clock ticks, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), [int(x) for x in fields[11:15]]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a running process has used so far."""
    _, (utime, stime, _, _) = _stat_times(pid)
    return (utime + stime) / _TICK


def postgres_cpu_seconds(pgdata: Path) -> float:
    """CPU time a PostgreSQL server has used so far: the postmaster, its live processes, and
    (through the postmaster's reaped-children times) the backends that already ended. The
    difference of two readings is what the server spent between them, backends that came and
    went included."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    _, times = _stat_times(postmaster)
    total = sum(times)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent, (utime, stime, _, _) = _stat_times(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if parent == postmaster:
            total += utime + stime
    return total / _TICK


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
        answer = client.request("GET", "/v1/generations")
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


STORED_CHUNKS_SQL = """SELECT c.surrogate, c.record_id, c.text, v.vector
    FROM chunks c JOIN records r ON r.id = c.record_id AND r.revision = c.revision
    JOIN chunk_vectors v ON v.surrogate = c.surrogate AND v.space_id = $2
    WHERE r.namespace = $1 AND r.deleted_at IS NULL AND c.retired_at IS NULL
    ORDER BY c.surrogate"""
"""The live chunks of namespace $1 with their stored vectors in space $2 (float32 bytes)."""


def write_section(path: Path, name: str, lines: list[str]) -> None:
    """Replace what lies between the `<!-- NAME: begin -->` and `<!-- NAME: end -->` markers of
    `path` (appended when absent), so a rerun rewrites only its own results."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = path.read_text() if path.exists() else ""
    block = "\n".join([begin, *lines, end])
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def write_option(doc: str, name: str, argv: list[str] | None) -> Path | None:
    """The command line of a bench with only `--write PATH` (its section `name` in PATH)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help=f"replace this markdown file's {name} section")
    path: Path | None = parser.parse_args(argv).write
    return path


def publish(lines: list[str], path: Path | None, name: str) -> None:
    """Print a report, and with `--write` also put it in `path`'s section `name`."""
    print("\n".join(lines))
    if path is not None:
        write_section(path, name, lines)
        progress(f"wrote {path}")


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


RECALL_WORK = ROOT / "var/bench-recall"
"""Where bench/recall.py keeps its corpus, data directory, socket and log (its `--work`)."""


@contextmanager
def daemon_on_recall_data() -> Iterator[Path]:
    """A daemon on the 100k passages bench/recall.py left in RECALL_WORK, for the benches that
    measure on them; yields RECALL_WORK."""
    if not (RECALL_WORK / "corpus.json").exists():
        raise SystemExit("run bench/recall.py first: it builds the data this measures on")
    work = RECALL_WORK
    daemon = start_daemon(work / "data", work / "recalld.sock", work / "serve.log", config=work / "recalld.toml")
    try:
        yield work
    finally:
        stop_daemon(daemon)
