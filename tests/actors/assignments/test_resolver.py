"""The resolver (actors/assignments/resolver.py) against real PostgreSQL and a scripted OpenAI-compatible
server on loopback: each kind of answer is routed as docs/DESIGN.md ("Canonical assignments") says."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import asyncpg
import httpx
import pytest

from recalld.actors.assignments.resolver import Resolver, ResolverSettings, ResolverStopped
from recalld.actors.assignments.ticker import AssignmentTicker, TickerSettings
from recalld.actors.assignments.verdict import SYSTEM_PROMPT
from recalld.providers.llm import OpenAIChat
from recalld.store.assignments import AssignmentStore, Observation
from recalld.store.assignments_disputes import DisputeStore
from recalld.store.roles import PgTickLocks
from recalld.store.usage import UsageStore
from tests.support.fake_llm import REASONING, ChatService, Reply, chat_server

pytestmark = pytest.mark.anyio

CASES = {
    # characteristic: (reply, state, tier, canonical source, canonical value, reason)
    "voltage": (Reply(value="230 V", confidence=0.93), "resolved", "high", "auto:llm_resolved", "230 V", None),
    "width": (Reply(value="2 m", confidence=0.6), "resolved", "medium", "auto:llm_resolved", "2 m", None),
    "colour": (Reply(value="red", confidence=0.3), "manual_review", "low", "auto:latest", None, "low_confidence"),
    "finish": (Reply(kind="garbage"), "manual_review", None, "auto:latest", None, "unparseable_answer"),
    "material": (Reply(value="gold", confidence=0.99), "manual_review", None, "auto:latest", None, "out_of_candidates"),
    "weight": (
        Reply(kind="slow", value="1000 g", delay_s=5.0),
        "manual_review",
        None,
        "auto:latest",
        None,
        "attempts_exhausted",
    ),
    "length": (Reply(kind="http500"), "manual_review", None, "auto:latest", None, "attempts_exhausted"),
    # the model writes 0.99, but the tokens of its choice had probability 0.3: logprobs decide
    "power": (
        Reply(kind="logprobs", value="1500 W", confidence=0.99, probability=0.3),
        "manual_review",
        "low",
        "auto:latest",
        None,
        "low_confidence",
    ),
}
TIES = {
    "voltage": ("230 V", "220 V"),
    "width": ("2 m", "210 cm"),
    "colour": ("Red", "crimson"),
    "finish": ("matte", "gloss"),
    "material": ("steel", "brass"),
    "weight": ("1 kg", "1200 g"),
    "length": ("1 m", "2 m"),
    "power": ("1,5 kW", "2000 W"),
}


@dataclass
class Rig:
    pool: asyncpg.Pool
    service: ChatService
    assignments: AssignmentStore
    disputes: DisputeStore
    ticker: AssignmentTicker
    http: httpx.AsyncClient
    url: str

    def resolver(self, **settings: float) -> Resolver:
        chosen = {
            "interval_s": 60.0,
            "max_attempts": 1,
            "batch": 50,
            "breaker_failures": 100,
            "breaker_reset_s": 60.0,
            "model_timeout_s": 0.5,
        }
        chosen.update(settings)
        model = OpenAIChat(self.http, url=self.url, model="stub", api_key="", timeout_s=chosen["model_timeout_s"])
        return Resolver(
            self.disputes,
            model,
            PgTickLocks(self.pool),
            UsageStore(self.pool),
            ResolverSettings(
                interval_s=chosen["interval_s"],
                max_attempts=int(chosen["max_attempts"]),
                batch=int(chosen["batch"]),
                breaker_failures=int(chosen["breaker_failures"]),
                breaker_reset_s=chosen["breaker_reset_s"],
                prices={"stub": 1000.0},
            ),
        )

    async def tie(self, entity: str, characteristic: str, values: tuple[str, str]) -> None:
        await self.assignments.observe(
            [
                Observation(entity, characteristic, "acme", values[0], 0.5, None),
                Observation(entity, characteristic, "globex", values[1], 0.5, None),
            ]
        )

    async def row(self, entity: str, characteristic: str) -> asyncpg.Record:
        async with self.pool.acquire() as conn:
            found = await conn.fetchrow(
                """SELECT d.*, c.value AS canonical, c.source FROM disputes d
                   JOIN canonical_assignments c USING (entity, characteristic)
                   WHERE entity = $1 AND characteristic = $2""",
                entity,
                characteristic,
            )
        assert found is not None
        return found


@pytest.fixture
async def rig(pool: asyncpg.Pool) -> AsyncIterator[Rig]:
    service = ChatService({name: reply for name, (reply, *_) in CASES.items()})
    assignments = AssignmentStore(pool)
    ticker = AssignmentTicker(assignments, PgTickLocks(pool), TickerSettings(interval_s=60.0))
    async with chat_server(service) as url, httpx.AsyncClient() as http:
        yield Rig(pool, service, assignments, DisputeStore(pool), ticker, http, url)


async def test_each_answer_is_routed_as_specified(rig: Rig) -> None:
    entity = "e-" + uuid.uuid4().hex[:6]
    for characteristic, values in TIES.items():
        await rig.tie(entity, characteristic, values)
    report = await rig.ticker.tick_once()
    assert report is not None and report.enqueued == len(TIES)
    resolver = rig.resolver()
    assert await resolver.tick_once()
    for characteristic, (_, state, tier, source, value, reason) in CASES.items():
        row = await rig.row(entity, characteristic)
        got = (row["state"], row["tier"], row["source"], row["reason"])
        assert got == (state, tier, source, reason), characteristic
        if value is not None:
            assert row["canonical"] == value
    power = await rig.row(entity, "power")
    assert (power["confidence_source"], power["model_confidence"]) == ("logprobs", 0.99)
    assert power["confidence"] == pytest.approx(0.3)
    voltage = await rig.row(entity, "voltage")
    assert voltage["confidence_source"] == "model"
    # the request asked for the schema of the candidates, and said nothing beyond the dispute
    sent = next(r for r in rig.service.requests if "voltage" in r["messages"][-1]["content"])
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["selected_value"]["enum"] == [
        "220 V",
        "230 V",
    ]
    async with rig.pool.acquire() as conn:
        usage = await conn.fetch("SELECT * FROM usage WHERE purpose = 'resolve'")
    # one row per completed call: not the slow one (no answer) nor the 500 (no completion)
    assert len(usage) == len(CASES) - 2
    assert {(r["input_tokens"], r["output_tokens"], r["model"], r["cost_micros"]) for r in usage} == {
        (40, 12, "stub", 52)
    }


async def test_a_resolved_dispute_is_not_reopened_nor_replaced_while_its_values_stay(rig: Rig) -> None:
    entity = "e-" + uuid.uuid4().hex[:6]
    await rig.tie(entity, "voltage", TIES["voltage"])
    await rig.ticker.tick_once()
    await rig.resolver().tick_once()
    calls = len(rig.service.requests)
    # the same observations again: the chain re-runs, auto:llm_resolved stays, no new call
    await rig.tie(entity, "voltage", TIES["voltage"])
    await rig.ticker.tick_once()
    await rig.resolver().tick_once()
    row = await rig.row(entity, "voltage")
    assert (row["state"], row["source"], row["canonical"]) == ("resolved", "auto:llm_resolved", "230 V")
    assert len(rig.service.requests) == calls
    # a new value set reopens it, and the chain's latest replaces the resolved value meanwhile
    await rig.tie(entity, "voltage", ("230 V", "240 V"))
    await rig.ticker.tick_once()
    row = await rig.row(entity, "voltage")
    assert (row["state"], row["source"]) == ("pending", "auto:latest")
    # back to the value set resolved before: skipped, the earlier answer stands, no call
    await rig.tie(entity, "voltage", TIES["voltage"])
    await rig.ticker.tick_once()
    await rig.resolver().tick_once()
    row = await rig.row(entity, "voltage")
    assert (row["state"], row["source"], row["canonical"]) == ("skipped_unchanged", "auto:llm_resolved", "230 V")
    assert len(rig.service.requests) == calls


async def test_a_failed_call_is_retried_next_tick_until_attempts_run_out(rig: Rig) -> None:
    entity = "e-" + uuid.uuid4().hex[:6]
    await rig.tie(entity, "length", TIES["length"])
    await rig.ticker.tick_once()
    resolver = rig.resolver(max_attempts=2)
    await resolver.tick_once()
    row = await rig.row(entity, "length")
    assert (row["state"], row["attempts"]) == ("pending", 1)
    await resolver.tick_once()
    row = await rig.row(entity, "length")
    assert (row["state"], row["attempts"], row["reason"]) == ("manual_review", 2, "attempts_exhausted")


async def test_an_open_circuit_calls_nothing_and_leaves_disputes_pending(rig: Rig) -> None:
    entity = "e-" + uuid.uuid4().hex[:6]
    await rig.tie(entity, "length", TIES["length"])  # 500
    await rig.tie(entity, "voltage", TIES["voltage"])
    await rig.ticker.tick_once()
    resolver = rig.resolver(max_attempts=5, breaker_failures=1)
    await resolver.tick_once()  # length (first by name) fails and opens the circuit
    assert resolver.state() == "circuit_open"
    assert len(rig.service.requests) == 1
    assert (await rig.row(entity, "voltage"))["state"] == "pending"
    assert (await rig.row(entity, "length"))["state"] == "pending"
    await resolver.tick_once()
    assert len(rig.service.requests) == 1


async def test_not_actionable_disputes_are_superseded_before_any_call(rig: Rig) -> None:
    entity = "e-" + uuid.uuid4().hex[:6]
    await rig.tie(entity, "voltage", TIES["voltage"])
    await rig.ticker.tick_once()
    # one supplier's two values: no two distinct suppliers (written as the chain cannot)
    async with rig.pool.acquire() as conn:
        await conn.execute(
            """UPDATE disputes SET candidates = '[{"value": "230 V", "trust": 0.5, "suppliers": ["acme"], "raws": []},
                                                  {"value": "220 V", "trust": 0.5, "suppliers": ["acme"], "raws": []}]'
               WHERE entity = $1""",
            entity,
        )
    await rig.resolver().tick_once()
    assert (await rig.row(entity, "voltage"))["state"] == "superseded"
    assert rig.service.requests == []


async def test_a_forced_dispute_whose_resolver_stops_mid_call_fails_with_stopped_and_is_released(rig: Rig) -> None:
    entity = "e-" + uuid.uuid4().hex[:6]
    await rig.tie(entity, "weight", TIES["weight"])  # the model takes 5 s to answer "weight"
    await rig.ticker.tick_once()
    dispute_id = (await rig.row(entity, "weight"))["id"]
    resolver = rig.resolver(model_timeout_s=30.0)
    failed: list[BaseException] = []

    async def force() -> None:
        try:
            await resolver.force(dispute_id)
        except Exception as exc:
            failed.append(exc)

    async with anyio.create_task_group() as callers:
        async with anyio.create_task_group() as actor:
            await actor.start(resolver.run)
            callers.start_soon(force)
            while not rig.service.requests:  # noqa: ASYNC110 (waits for the server to see the call)
                await anyio.sleep(0.01)
            actor.cancel_scope.cancel()  # a crash or a restart, not a graceful stop
    # a stable failure the control socket answers 503, not the mailbox's own exception (a 500)
    assert [type(exc) for exc in failed] == [ResolverStopped]
    # the dispute it had claimed is an orphan until a tick releases it to be forced again
    assert (await rig.row(entity, "weight"))["state"] == "in_progress"
    assert await rig.disputes.release_orphans() == 1
    assert (await rig.row(entity, "weight"))["state"] == "pending"


async def test_the_llm_is_told_the_entity_and_the_values_as_written_and_nothing_more(rig: Rig) -> None:
    entity = "kettle-" + uuid.uuid4().hex[:6]
    rig.service.script["rated power"] = Reply(value="1500 W", confidence=0.9)
    await rig.assignments.observe(
        [
            Observation(entity, "rated power", "acme", "1,5 kW", 0.25, None),
            Observation(entity, "rated power", "initech", "1500 W", 0.25, None),
            Observation(entity, "rated power", "globex", "2 kW", 0.25, None),
            Observation(entity, "rated power", "hooli", "2000 W", 0.25, None),
        ]
    )
    await rig.ticker.tick_once()
    await rig.resolver().tick_once()
    [sent] = rig.service.requests
    context = {
        "entity": entity,
        "characteristic": "rated power",
        "unit": "W",
        "candidates": [
            {
                "value": "1500 W",
                "as_written": ["1,5 kW", "1500 W"],
                "suppliers": ["acme", "initech"],
                "supplier_trust": 0.5,
            },
            {
                "value": "2000 W",
                "as_written": ["2 kW", "2000 W"],
                "suppliers": ["globex", "hooli"],
                "supplier_trust": 0.5,
            },
        ],
    }
    assert sent == {
        "model": "stub",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps(context, ensure_ascii=False)},
        ],
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 1,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "dispute_verdict",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {
                        "selected_value": {"type": "string", "enum": ["1500 W", "2000 W"]},
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                    "required": ["selected_value", "confidence"],
                    "additionalProperties": False,
                },
            },
        },
    }
    assert (await rig.row(entity, "rated power"))["canonical"] == "1500 W"


async def test_a_reasoning_model_resolves_ties_once_its_refusals_are_met(pool: asyncpg.Pool) -> None:
    service = ChatService(
        {"wattage": Reply(value="1500", confidence=0.93), "voltage": Reply(value="230", confidence=0.85)},
        dialect=REASONING,
    )
    assignments = AssignmentStore(pool)
    ticker = AssignmentTicker(assignments, PgTickLocks(pool), TickerSettings(interval_s=60.0))
    entity = "kettle-" + uuid.uuid4().hex[:6]
    async with chat_server(service) as url, httpx.AsyncClient() as http:
        rig = Rig(pool, service, assignments, DisputeStore(pool), ticker, http, url)
        await rig.tie(entity, "wattage", ("1500", "1800"))
        await rig.tie(entity, "voltage", ("230", "220"))
        await ticker.tick_once()
        await rig.resolver().tick_once()
    for characteristic, value, confidence in (("voltage", "230", 0.85), ("wattage", "1500", 0.93)):
        row = await rig.row(entity, characteristic)
        assert (row["state"], row["source"], row["canonical"]) == ("resolved", "auto:llm_resolved", value)
        assert (row["confidence"], row["confidence_source"]) == (confidence, "model")
    # voltage (first by name) paid the two refusals; wattage was asked once, in the learned dialect
    assert len(service.requests) == 4
    assert service.requests[-1].keys() == {"model", "messages", "response_format"}
