"""A page's heading as a third ranked list for recall (the quality step's title and section
boosts): two readings of the heading (the title as stored; the title with the page's first line,
its section heading) and two ways to match a query to it (by words, full text over the heading
behind a GIN index in a scratch table; by meaning, the local model's vector of the heading)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from bench.lib.golden import Question
from bench.lib.routes import DEPTH, Lists
from recalld.actors.embedding.template import render_title
from recalld.actors.recall.query import build_text_query


@dataclass
class Heading:
    """One reading of a page's heading, and how to match a query to it."""

    name: str
    texts: dict[uuid.UUID, str]


def first_line(body: str) -> str:
    """The page's first non-empty line when it reads as a heading (short), else nothing."""
    for line in body.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line if len(line) <= 200 else ""
    return ""


async def read_headings(conn: asyncpg.Connection, namespace: str) -> list[Heading]:
    rows = await conn.fetch(
        "SELECT id, title, body FROM records WHERE namespace = $1 AND deleted_at IS NULL", namespace
    )
    title = {r["id"]: r["title"] or "" for r in rows}
    section = {r["id"]: f"{r['title'] or ''}. {first_line(r['body'] or '')}".strip(". ") for r in rows}
    return [Heading("title", title), Heading("title + first line", section)]


async def word_lists(
    conn: asyncpg.Connection, heading: Heading, questions: Sequence[Question]
) -> tuple[Lists, dict[str, float]]:
    """Full text over the heading alone: pages whose heading holds any of the query's terms (the
    loose reading, as full text's words-only step), most terms first. The scratch table has the
    GIN index a migration would add, so the timing is what recall would pay for one more query."""
    await conn.execute("DROP TABLE IF EXISTS quality_headings")
    await conn.execute("CREATE TEMP TABLE quality_headings (id uuid PRIMARY KEY, search tsvector NOT NULL)")
    await conn.executemany(
        "INSERT INTO quality_headings VALUES ($1, to_tsvector('english', $2))", list(heading.texts.items())
    )
    await conn.execute("CREATE INDEX ON quality_headings USING gin (search)")
    await conn.execute("ANALYZE quality_headings")
    lists: Lists = {}
    timings: dict[str, float] = {}
    for q in questions:
        built = build_text_query(q.text)
        started = time.perf_counter()
        rows = (
            []
            if built.empty
            else await conn.fetch(
                """SELECT h.id, ts_rank(h.search, tq, 32) AS score
                   FROM quality_headings h, websearch_to_tsquery('english', $1) tq
                   WHERE h.search @@ tq ORDER BY score DESC, h.id LIMIT $2""",
                built.loose,
                DEPTH,
            )
        )
        timings[q.id] = (time.perf_counter() - started) * 1000
        lists[q.id] = [(r["id"], float(r["score"])) for r in rows]
    return lists, timings


def meaning_lists(
    heading: Heading, questions: Sequence[Question], queries: np.ndarray, template_version: int
) -> tuple[Lists, dict[str, float]]:
    """The heading's vector (the local model, the title template) against the query's: exact
    inner product over every page. Embedding the headings is ingest's cost, not recall's."""
    from recalld.providers.local import LocalProvider

    model = LocalProvider()
    ids = sorted(heading.texts, key=str)
    texts = [render_title(heading.texts[i] or "-", version=template_version).text for i in ids]
    vectors = np.concatenate([model.encode(texts[at : at + 64])[0] for at in range(0, len(texts), 64)])
    lists: Lists = {}
    timings: dict[str, float] = {}
    for q, vector in zip(questions, queries, strict=True):
        started = time.perf_counter()
        scores = vectors @ vector
        top = np.argsort(-scores, kind="stable")[:DEPTH]
        timings[q.id] = (time.perf_counter() - started) * 1000
        lists[q.id] = [(ids[i], float(scores[i])) for i in top]
    return lists, timings
