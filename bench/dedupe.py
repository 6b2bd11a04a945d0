"""Duplicate checks at scale: the latency of one check (POST /v1/duplicates/check) with 10,000
and 100,000 existing titles in its namespace and kind, and the audit (`recalld dupes`) in records
per second.

What is measured is the daemon's own path: a real `recalld serve` on the embedded PostgreSQL, its
title model (use-multilingual-v3) embedding each checked title, the live titles read from
PostgreSQL, the stored vectors read once and kept in memory, the exact comparison. What is NOT
real: the existing titles' vectors. The titles are generated (templates of backlog titles, all
distinct) and their vectors are random unit vectors of the title model's dimension, written
straight into `records` and `title_vectors` (where the index manager's catch-up would have put
the model's), so that setting up 110,000 titles takes seconds. Random vectors are near
orthogonal, so the audit finds almost no pairs and measures the comparison itself: real titles
of one backlog find more pairs, and each pair costs its own rescoring and output. The daemon
runs with `[embedding] provider = "none"` (no chunk indexing of the 110,000 records shares the
machine): the title model works without it.

    python -m bench.dedupe [--write FILE] [--result NAME] [--checks 50] [--sizes 10000,100000] [--no-audit]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import random
import shutil
import time
import uuid
from pathlib import Path
from typing import cast

import asyncpg
import numpy as np

from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon
from bench.lib.paths import ROOT
from bench.lib.report import add_result_option, load_average, machine, percentile, progress, publish
from recalld.actors.records import content_hash, normalise_title
from recalld.client import Client

WORK = ROOT / "var/bench-dedupe"
VERBS = "Export Import Show Hide Validate Archive Sync Notify Approve Reject Schedule Cancel Print Refund".split()
OBJECTS = (
    "invoice report|sales report|shipping label|order history|customer profile|billing address|tax summary|"
    "delivery date|password reset link|subscription plan|discount code|support ticket|payment method|"
    "stock level|audit log|team calendar|product catalogue|price list|return request|user avatar"
).split("|")
SCOPES = (
    "for admins|on mobile|on the web dashboard|per region|for each month|for each warehouse|in the API|"
    "by email|as PDF|as CSV|for new customers|for partners|after checkout|before renewal|on Android|on iOS"
).split("|")


def titles(count: int, salt: int) -> list[str]:
    """`count` distinct backlog-like titles."""
    out: list[str] = []
    for n, (verb, obj, scope) in enumerate(itertools.cycle(itertools.product(VERBS, OBJECTS, SCOPES))):
        if len(out) == count:
            break
        out.append(f"{verb} the {obj} {scope} (item {salt}-{n})")
    return out


DIMENSION = 512
"""The title model's (daemon/providers/duplicates_model.py)."""


def random_vectors(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, DIMENSION)).astype(np.float32)
    return cast(np.ndarray, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))


async def load(dsn: str, namespace: str, items: list[str], vectors: np.ndarray, space_id: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        rows = []
        keys = []
        for title in items:
            norm = normalise_title(title)
            digest = content_hash(kind="story", title=title, body="", attributes={}, source_path=None)
            rows.append((uuid.uuid4(), namespace, "story", title, norm, "", "{}", digest))
            keys.append(hashlib.sha256(norm.encode()).hexdigest())
        async with conn.transaction():
            await conn.copy_records_to_table(
                "records",
                records=rows,
                columns=["id", "namespace", "kind", "title", "title_norm", "body", "attributes", "content_hash"],
            )
            await conn.copy_records_to_table(
                "title_vectors",
                records=[
                    (space_id, key, vector.astype("<f4").tobytes()) for key, vector in zip(keys, vectors, strict=True)
                ],
                columns=["space_id", "title_sha256", "vector"],
            )
        await conn.execute("ANALYZE records")
    finally:
        await conn.close()


async def title_space(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT space_id, spec FROM vector_spaces")
    finally:
        await conn.close()
    for row in rows:
        spec = row["spec"] if isinstance(row["spec"], dict) else json.loads(row["spec"])
        if spec["model"] == "use-multilingual-v3":
            return str(row["space_id"])
    raise SystemExit("the title model's space is not registered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="replace this markdown file's dedupe section")
    add_result_option(parser, "duplicates")
    parser.add_argument("--checks", type=int, default=50)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--no-audit", action="store_true", help="checks only (the audit at 100,000 takes minutes)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    env = {"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_DUPLICATES_MODEL": "use-multilingual-v3"}
    daemon = start_daemon(WORK / "data", WORK / "recalld.sock", WORK / "serve.log", env=env)
    client = Client(WORK / "recalld.sock")
    dsn = embedded_dsn(WORK / "data")
    lines: list[str] = []
    try:
        # Two creates: the second's check embeds its title and registers the title model's space.
        for title in ("Warm up the title model", "Warm up the title model again"):
            client.request("POST", "/v1/records", {"namespace": "warm", "kind": "story", "title": title, "body": ""})
        space_id = asyncio.run(title_space(dsn))
        rng = random.Random(7)
        rows = []
        for size in sizes:
            namespace = f"titles-{size}"
            existing = titles(size, salt=size)
            vectors = random_vectors(size, seed=size)
            asyncio.run(load(dsn, namespace, existing, vectors, space_id))
            progress(f"{namespace}: {size} titles loaded")
            probes = [
                f"{rng.choice(VERBS)} the {rng.choice(OBJECTS)} {rng.choice(SCOPES)} soon" for _ in range(args.checks)
            ]
            # The first checks after a start read the stored vectors of the namespace, as many as
            # half the time cap allows each (compared < of until all are read): not timed below.
            started = time.perf_counter()
            warm_checks, first_compared = 0, None
            while True:
                body: dict[str, object] = {
                    "namespace": namespace,
                    "kind": "story",
                    "title": f"Warm up the checks {warm_checks}",
                }
                answer = client.request("POST", "/v1/duplicates/check", body)
                assert answer["status"] != "skipped" and answer["of"] == size, answer
                warm_checks += 1
                first_compared = answer["compared"] if first_compared is None else first_compared
                if answer["compared"] == size:
                    break
            cold = time.perf_counter() - started
            latencies = []
            for probe in probes:
                started = time.perf_counter()
                answer = client.request(
                    "POST", "/v1/duplicates/check", {"namespace": namespace, "kind": "story", "title": probe}
                )
                latencies.append(time.perf_counter() - started)
                assert answer["status"] != "skipped" and answer["compared"] == answer["of"] == size, answer
            started = time.perf_counter()
            after, pairs = None, 0
            while not args.no_audit:
                body = {"namespace": namespace, "kind": "story", "limit": 2000}
                if after:
                    body["after"] = after
                page = client.request("POST", "/v1/duplicates/audit", body)
                pairs += len(page["pairs"])
                after = page["next"]
                if after is None:
                    break
            audit_s = time.perf_counter() - started
            rows.append((size, cold, warm_checks, first_compared, latencies, audit_s, pairs))
            p50 = percentile(latencies, 50) * 1000
            progress(
                f"{namespace}: p50 {p50:.1f} ms" + ("" if args.no_audit else f", audit {size / audit_s:.0f} records/s")
            )
    finally:
        client.close()
        stop_daemon(daemon)
    lines += [
        "## Duplicate checks",
        "",
        "One semantic duplicate check (`POST /v1/duplicates/check`, a dry run: the new title embedded by",
        "the title model, the namespace's live titles read, compared exactly with every stored title",
        "vector) with 10,000 and 100,000 existing titles of the same namespace and kind; and the audit",
        "(`POST /v1/duplicates/audit` page after page, what `recalld dupes` runs) over the same titles.",
        "",
        f"- Machine: {machine()}.",
        f"- Load average at the end: {load_average()} (a shared machine).",
        "- Data: generated backlog titles (verb, object, scope, item number; all distinct) whose stored",
        "  vectors are **random unit vectors** (512 dimensions), written straight into `records` and",
        "  `title_vectors`, not embedded by the daemon's catch-up: the checked titles are embedded by the",
        "  daemon's title model, the existing ones are not. Random vectors are near orthogonal, so the",
        "  audit finds almost no pairs; real backlog titles find more, each costing its own output. The",
        '  daemon runs with `[embedding] provider = "none"` so that no chunk indexing shares the machine.',
        f"- Command: `python -m bench.dedupe --checks {args.checks} --sizes {args.sizes}"
        f"{' --no-audit' if args.no_audit else ''}`",
        f"- Date: {time.strftime('%Y-%m-%d')}",
        "",
        "| titles | first checks (read the vectors) | check p50 | check p95 | audit | audit pairs found |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, cold, warm_checks, first_compared, latencies, audit_s, pairs in rows:
        p50, p95 = percentile(latencies, 50) * 1000, percentile(latencies, 95) * 1000
        audit = "not run" if args.no_audit else f"{size / audit_s:,.0f} records/s ({audit_s:.1f} s)"
        first = f"{cold * 1000:,.0f} ms in {warm_checks} (the first compared {first_compared:,})"
        lines.append(f"| {size:,} | {first} | {p50:.1f} ms | {p95:.1f} ms | {audit} | {pairs:,} |")
    lines += [
        "",
        f"Checks: {args.checks} per size after the first ones (reported apart: after a start, the checks",
        "of a namespace read its stored vectors, as many as half the time cap allows each, comparing",
        "with those read so far), one client at a time over the Unix socket, end to end. The audit",
        "compares every record with every later record of its kind, exactly (blocks of matrix",
        "products), so its time grows with the square of the titles: SemHash's ~20k records/s for",
        "batch deduplication comes from an approximate index.",
    ]
    if args.write:
        publish(lines, args.write, "dedupe.py", result=args.result)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
