"""The database side of `recalld backup` and `recalld restore`: what a dump's manifest counts,
the snapshot a dump is taken in, whether a target database is empty, and what a restore changes.

A backup is PostgreSQL's own `pg_dump` (custom format) run in a snapshot exported by a
transaction that first counts every table: the counts in the manifest and the rows in the dump
are the same instant, whatever the daemon writes meanwhile. Generations are derived data: their
files are never in a backup, and a restore empties their catalogue, so that the daemon rebuilds
every vector space from the stored vectors (`clear_generations`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from recalld.store.migrations import current_version

DUMP_FORMAT = "custom"
"""pg_dump's archive format: compressed, and read back selectively by pg_restore."""


@dataclass(frozen=True)
class Snapshot:
    """What a backup's manifest says of the database, read in the dump's snapshot."""

    snapshot_id: str
    schema_version: int
    server_version: str
    counts: dict[str, int]
    """Rows of every table of the schema, by table name."""
    vector_spaces: list[dict[str, Any]]
    """Each space's id, spec (as stored) and the number of its stored vectors."""


async def _tables(conn: asyncpg.Connection) -> list[str]:
    """recalld's tables (those of the connection's schema), in name order."""
    rows = await conn.fetch(
        'SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename COLLATE "C"'
    )
    return [str(r["tablename"]) for r in rows]


async def table_counts(conn: asyncpg.Connection) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table in await _tables(conn):
        counts[table] = int(await conn.fetchval(f"SELECT count(*) FROM {_quoted(table)}"))
    return counts


async def vector_spaces(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT s.space_id, s.spec::text AS spec, "
        "(SELECT count(*) FROM chunk_vectors v WHERE v.space_id = s.space_id) AS vectors "
        "FROM vector_spaces s ORDER BY s.space_id"
    )
    return [{"space_id": r["space_id"], "spec": r["spec"], "vectors": int(r["vectors"])} for r in rows]


async def export_snapshot(conn: asyncpg.Connection) -> Snapshot:
    """Export this connection's snapshot and read the manifest's facts in it. The caller holds
    `conn` in a REPEATABLE READ transaction until the dump has imported the snapshot (ours keeps
    it until the dump ends)."""
    snapshot_id = str(await conn.fetchval("SELECT pg_export_snapshot()"))
    return Snapshot(
        snapshot_id=snapshot_id,
        schema_version=await current_version(conn),
        server_version=str(await conn.fetchval("SHOW server_version")),
        counts=await table_counts(conn),
        vector_spaces=await vector_spaces(conn),
    )


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# What a restore target must not hold, and what a failed restore made: relations of the kinds
# below outside the system's schemas, and extensions other than plpgsql (`kind` 'x').
_OBJECTS = (
    "SELECT c.relkind::text AS kind, n.nspname AS schema, c.relname AS name "
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%' "
    "AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') "
    "UNION ALL SELECT 'x', NULL, extname FROM pg_extension WHERE extname <> 'plpgsql'"
)
_DROP = {"r": "TABLE", "p": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW", "S": "SEQUENCE", "f": "FOREIGN TABLE"}


async def foreign_objects(conn: asyncpg.Connection) -> list[str]:
    """What a restore target already holds (tables, views, sequences, extensions other than
    plpgsql), the first five: a restore goes only into an empty database, never over someone's data."""
    rows = await conn.fetch(
        "SELECT CASE WHEN kind = 'x' THEN 'extension ' || name ELSE schema || '.' || name END AS shown "
        f"FROM ({_OBJECTS}) AS found ORDER BY 1 LIMIT 5"
    )
    return [str(r["shown"]) for r in rows]


async def drop_restored(conn: asyncpg.Connection) -> None:
    """Drop what `foreign_objects` looks for, in one transaction: in a target that was found
    empty before the restore, that is what the restore made."""
    async with conn.transaction():
        # Sequences last: an identity column's own sequence can only go with its table.
        for row in sorted(await conn.fetch(_OBJECTS), key=lambda row: row["kind"] == "S"):
            if row["kind"] == "x":
                await conn.execute(f"DROP EXTENSION IF EXISTS {_quoted(row['name'])} CASCADE")
            else:
                # IF EXISTS: a table's CASCADE (or its identity column) may have taken this one along
                target = f"{_quoted(row['schema'])}.{_quoted(row['name'])}"
                await conn.execute(f"DROP {_DROP[row['kind']]} IF EXISTS {target} CASCADE")


CLEAR_GENERATIONS = """
UPDATE generation_pointer SET current = NULL, previous = NULL, version = version + 1, moved_at = now();
DELETE FROM generations;
"""
"""A restored database names generations whose files were not restored (they are derived, and
belong to the machine that built them). Emptying the catalogue makes the daemon rebuild every
space from the restored vectors; the pointer's version moves on, which is how the index manager
tells "rebuilding after a restore" from "nothing indexed yet" (a fresh pointer is version 0)."""


async def clear_generations(conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        await conn.execute(CLEAR_GENERATIONS)
