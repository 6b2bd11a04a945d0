"""Full text and the re-read of both routes' candidates in one statement (issue 24).

A recall used to send two statements: full text's candidates, then, once fused, a rehydration
of the best k. Here the vector route's candidates (found first, under a lease) go into the
full-text statement, which finds full text's candidates and re-reads the live rows of the union:
one round trip, one plan. The rows carry the text of each record's best chunk (the chunk the
vector route named, else, for the first full-text candidates, the chunk ranking best for the
query's words), and the daemon cuts and highlights the snippet of the k it answers with
(`actors.snippets`); a row without chunk text (its record not chunked yet, or ranked too low by
full text for its chunk to be chosen here) is re-read by `search.rehydrate` if it is answered.

Guarantees as `search.rehydrate`: only live rows of the namespace that pass the filters come
back, read when the statement runs; a vector candidate whose row is missing was forgotten, moved
or filtered out, and is dropped by the caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from actors.query import Evidence, build_text_query
from actors.snippets import snippet
from daemon.store.search import _FILTER_SQL, _MATCHED, LOOSE_BELOW, TS_CONFIG, Candidate, Filters

# Full text's candidates ranked as `search.full_text` ranks them ($1-$8 as there; $9, $10 the
# loose query and its evidence, as there), with their rank.
_STRICT_ONLY = f"""fts AS (
    SELECT id, revision, score, row_number() OVER (ORDER BY score DESC, id) AS rank
    FROM ({_MATCHED}) AS matched
)"""

_WITH_LOOSE = f"""matched AS ({_MATCHED}),
loose AS (
    SELECT r.id, r.revision, $10::float8 + ts_rank(r.search, q, 32) AS score
    FROM records r, websearch_to_tsquery('{TS_CONFIG}', $9) AS q
    WHERE (SELECT count(*) FROM matched) < {LOOSE_BELOW} AND {_FILTER_SQL} AND r.search @@ q
      AND r.id NOT IN (SELECT id FROM matched)
    ORDER BY score DESC, r.id
    LIMIT $6
),
fts AS (
    SELECT id, revision, score, row_number() OVER (ORDER BY step, score DESC, id) AS rank
    FROM (SELECT 0 AS step, * FROM matched UNION ALL SELECT 1, * FROM loose) AS steps
    ORDER BY rank
    LIMIT $6
)"""

# Then the union's rows; {ids} {chunks} the vector candidates and their best chunks' surrogates
# (aligned), {query} the query text, {ranked} how many of full text's first candidates get a
# chunk chosen. The highlight query is a one-row FROM item, computed once per statement (as in
# `search.REHYDRATE_SQL`); a chunk is ranked for it only for full text's first candidates the
# vector route did not name a chunk of, so a long record costs its chunks' ranks only when it
# may be answered.
_ROWS = f""",
wanted AS (SELECT id FROM fts UNION SELECT unnest(${{ids}}::uuid[]))
SELECT r.id, r.title, r.kind, r.source_path, r.revision, f.rank AS fts_rank, f.score AS fts_score,
       coalesce(c.text, matched.text) AS chunk_text
FROM to_tsquery('{TS_CONFIG}', replace(plainto_tsquery('{TS_CONFIG}', ${{query}})::text, ' & ', ' | ')) AS hl (q)
CROSS JOIN wanted
JOIN records r ON r.id = wanted.id
LEFT JOIN fts f ON f.id = r.id
LEFT JOIN unnest(${{ids}}::uuid[], ${{chunks}}::bigint[]) AS best (id, surrogate) ON best.id = r.id
LEFT JOIN chunks c ON c.surrogate = best.surrogate AND c.retired_at IS NULL
LEFT JOIN LATERAL (
    SELECT m.text FROM chunks m
    WHERE c.surrogate IS NULL AND f.rank <= ${{ranked}} AND m.record_id = r.id AND m.revision = r.revision
      AND m.retired_at IS NULL
    ORDER BY ts_rank(m.search, hl.q) DESC, m.chunk_no, m.surrogate
    LIMIT 1
) AS matched ON true
WHERE {_FILTER_SQL}"""

ONE_TRIP_SQL = f"WITH {_STRICT_ONLY}" + _ROWS.format(ids=9, chunks=10, query=11, ranked=12)
ONE_TRIP_LOOSE_SQL = f"WITH {_WITH_LOOSE}" + _ROWS.format(ids=11, chunks=12, query=13, ranked=14)


@dataclass(frozen=True)
class Row:
    """A live record re-read by the statement."""

    id: uuid.UUID
    title: str
    kind: str
    source_path: str | None
    revision: int
    chunk_text: str | None
    """The best chunk's text to cut the snippet from; None: re-read it (`search.rehydrate`)."""


async def full_text_and_rows(
    conn: asyncpg.Connection,
    filters: Filters,
    query: str,
    limit: int,
    vector: list[Candidate],
    *,
    loose: bool,
    ranked_chunks: int,
) -> tuple[list[Candidate], dict[uuid.UUID, Row]] | None:
    """Full text's candidates for `query` (best first, at most `limit`, as `search.full_text`
    finds them) and the live rows of those and of the `vector` candidates, by id, in one
    statement. `ranked_chunks`: full text's first candidates that get a chunk chosen for their
    snippet. None when the query holds nothing to search by words (the caller keeps the other
    path)."""
    built = build_text_query(query)
    if built.empty or limit < 1:
        return None
    matched = (
        filters.namespace,
        filters.kinds,
        filters.attributes,
        built.phrase or "",
        built.strict,
        limit,
        float(Evidence.EXACT),
        float(built.strict_evidence),
    )
    rows_of = ([c.id for c in vector], [c.chunk for c in vector], query, ranked_chunks)
    if loose and built.loose != built.strict:
        rows = await conn.fetch(ONE_TRIP_LOOSE_SQL, *matched, built.loose, float(Evidence.SOME_TERMS), *rows_of)
    else:
        rows = await conn.fetch(ONE_TRIP_SQL, *matched, *rows_of)
    found: list[tuple[int, Candidate]] = []
    by_id: dict[uuid.UUID, Row] = {}
    for row in rows:
        record_id = row["id"]
        by_id[record_id] = Row(
            record_id, row["title"], row["kind"], row["source_path"], row["revision"], row["chunk_text"]
        )
        if row["fts_rank"] is not None:
            found.append((row["fts_rank"], Candidate(record_id, row["revision"], float(row["fts_score"]))))
    found.sort(key=lambda item: item[0])
    return [candidate for _, candidate in found], by_id


def answer_rows(
    keys: list[uuid.UUID],
    rows: dict[uuid.UUID, Row] | None,
    covered: set[uuid.UUID],
    query: str,
    snippet_words: int,
    stems: frozenset[str] | None,
) -> tuple[dict[uuid.UUID, Mapping[str, Any]], list[uuid.UUID]]:
    """Of `keys`, the rows the statement read, as `search.rehydrate` answers them (the snippet
    cut from the chunk's text here), and the keys still to read that way: those it did not look
    for (not `covered`), and those it found without a chunk's text. A covered key without a row
    is gone and is in neither."""
    answered: dict[uuid.UUID, Mapping[str, Any]] = {}
    missing: list[uuid.UUID] = []
    for key in keys:
        row = rows.get(key) if rows is not None else None
        if row is not None and row.chunk_text is not None:
            answered[key] = {
                "id": row.id,
                "title": row.title,
                "kind": row.kind,
                "source_path": row.source_path,
                "revision": row.revision,
                "snippet": snippet(row.chunk_text, query, snippet_words, stems=stems),
            }
        elif row is not None or key not in covered:
            missing.append(key)
    return answered, missing
