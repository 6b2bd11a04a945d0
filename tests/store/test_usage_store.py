"""The usage sink tells an outage from a bad row: the embedder's writer keeps rows through the
first (`SinkUnavailable`) and drops only the second."""

from __future__ import annotations

import datetime as dt
import socket

import asyncpg
import pytest

from recalld.actors.ports.usage import SinkUnavailable, UsageRow
from recalld.store.usage import UsageStore

pytestmark = pytest.mark.anyio


def usage_row() -> UsageRow:
    return UsageRow(
        purpose="query",
        namespace="ns",
        provider="local",
        model=None,
        input_tokens=7,
        estimated=False,
        cost_micros=0,
        at=dt.datetime.now(dt.UTC),
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


async def test_an_unreachable_server_is_sink_unavailable() -> None:
    pool = await asyncpg.create_pool(f"postgresql://recalld@127.0.0.1:{closed_port()}/recalld", min_size=0)
    try:
        with pytest.raises(SinkUnavailable) as caught:
            await UsageStore(pool).record([usage_row()])
        assert isinstance(caught.value.__cause__, OSError)
    finally:
        await pool.close()


async def test_rows_are_stored_all_together(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        before = await conn.fetchval("SELECT count(*) FROM usage")
    await UsageStore(pool).record([usage_row(), usage_row()])
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM usage") == before + 2


async def test_system_purposes_are_reported_apart_and_never_in_a_namespaces_totals(pool: asyncpg.Pool) -> None:
    """The duplicate check's embedding (`dedupe`) is the daemon's own work, as the probe and
    evaluations are: reported as system usage, never in a client's totals, even when it was
    made for a namespace."""

    def row(purpose: str, tokens: int, namespace: str | None = "ns") -> UsageRow:
        return UsageRow(
            purpose=purpose,  # type: ignore[arg-type]
            namespace=namespace,
            provider="local",
            model=None,
            input_tokens=tokens,
            estimated=False,
            cost_micros=0,
            at=dt.datetime.now(dt.UTC),
        )

    store = UsageStore(pool)
    await store.record([row("index", 100), row("query", 10), row("dedupe", 7), row("dedupe", 5), row("probe", 3, None)])
    for namespace in ("ns", None):
        summary = await store.summary(namespace=namespace, since=None)
        assert {(r.purpose, r.namespace) for r in summary.usage} == {("index", "ns"), ("query", "ns")}
        assert (summary.totals.calls, summary.totals.input_tokens, summary.totals.cost_micros) == (2, 110, 0)
        dedupe = [r for r in summary.system if r.purpose == "dedupe"]
        assert [(r.namespace, r.calls, r.input_tokens) for r in dedupe] == [("ns", 2, 12)]
