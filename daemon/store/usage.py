"""Usage rows in PostgreSQL: the embedder's metering sink, and the summaries clients read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import asyncpg

from recalld.actors.ports.usage import SYSTEM_PURPOSES, SinkUnavailable, UsageRow
from recalld.store import db
from recalld.store.db import STORE_DOWN_ERRORS
from recalld.wire.usage import UsageLine, UsageSummary, UsageTotals


class UsageStore:
    """Implements `recalld.actors.ports.usage.UsageSink` and answers `GET /v1/usage`."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def record(self, rows: Sequence[UsageRow]) -> None:
        try:
            await self._insert(rows)
        except STORE_DOWN_ERRORS as exc:
            raise SinkUnavailable(type(exc).__name__) from exc

    async def _insert(self, rows: Sequence[UsageRow]) -> None:
        async with db.connection(self._pool) as conn:
            await conn.executemany(
                """INSERT INTO usage (at, purpose, namespace, provider, model, input_tokens, output_tokens,
                                      estimated, cost_micros)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)""",
                [
                    (
                        row.at,
                        row.purpose,
                        row.namespace,
                        row.provider,
                        row.model,
                        row.input_tokens,
                        row.output_tokens,
                        row.estimated,
                        row.cost_micros,
                    )
                    for row in rows
                ],
            )

    async def summary(self, *, namespace: str | None, since: dt.datetime | None) -> UsageSummary:
        """Totals per (namespace, purpose); the daemon's own work is reported apart, never in them."""
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT namespace, purpose, provider, count(*) AS calls,
                          sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                          sum(cost_micros) AS cost_micros,
                          count(*) FILTER (WHERE estimated) AS estimated_calls
                   FROM usage
                   WHERE ($1::text IS NULL OR namespace = $1) AND ($2::timestamptz IS NULL OR at >= $2)
                   GROUP BY namespace, purpose, provider
                   ORDER BY namespace NULLS LAST, purpose, provider""",
                namespace,
                since,
            )
        clients: list[UsageLine] = []
        system: list[UsageLine] = []
        for row in rows:
            entry = UsageLine(
                namespace=row["namespace"],
                purpose=row["purpose"],
                provider=row["provider"],
                calls=row["calls"],
                input_tokens=int(row["input_tokens"] or 0),
                output_tokens=int(row["output_tokens"] or 0),
                cost_micros=int(row["cost_micros"] or 0),
                estimated_calls=row["estimated_calls"],
            )
            is_system = row["purpose"] in SYSTEM_PURPOSES or row["namespace"] is None
            (system if is_system else clients).append(entry)
        totals = UsageTotals(
            calls=sum(e.calls for e in clients),
            input_tokens=sum(e.input_tokens for e in clients),
            cost_micros=sum(e.cost_micros for e in clients),
        )
        return UsageSummary(usage=clients, totals=totals, system=system)
