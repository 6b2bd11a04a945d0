"""Observations, canonical rows and the dispute upsert guard in real PostgreSQL
(daemon/store/assignments.py, daemon/store/assignments_disputes.py), and the tickers' advisory locks."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import asyncpg
import pytest

from recalld.actors.assignments.disputes import DisputeState, Event, Tier
from recalld.actors.assignments.strategy import Source
from recalld.actors.assignments.ticker import AssignmentTicker, TickerSettings
from recalld.actors.assignments.verdict import ConfidenceSource, ResolverReason
from recalld.actors.gc.sweeper import Sweeper, SweepSettings
from recalld.actors.ports.assignments import DisputeConflict, Outcome
from recalld.store.assignments import AssignmentStore, Observation
from recalld.store.assignments_disputes import DisputeStore
from recalld.store.roles import PgTickLocks
from recalld.store.search import SearchLog
from recalld.store.vectors import PgVectorStore
from recalld.wire import assignments as wire

pytestmark = pytest.mark.anyio


def entity() -> str:
    return "e-" + uuid.uuid4().hex[:8]


async def observe(store: AssignmentStore, key: str, *pairs: tuple[str, str, float]) -> None:
    await store.observe([Observation(key, "power", supplier, value, trust, None) for supplier, value, trust in pairs])


async def state(pool: asyncpg.Pool, key: str) -> tuple[str | None, str | None, str | None]:
    """(dispute state, canonical value, canonical source)"""
    async with pool.acquire() as conn:
        d = await conn.fetchval("SELECT state FROM disputes WHERE entity = $1", key)
        c = await conn.fetchrow("SELECT value, source FROM canonical_assignments WHERE entity = $1", key)
    return d, c["value"] if c else None, c["source"] if c else None


def ticker(pool: asyncpg.Pool) -> AssignmentTicker:
    return AssignmentTicker(AssignmentStore(pool), PgTickLocks(pool), TickerSettings(interval_s=60.0))


@pytest.mark.parametrize(
    ("a", "b", "value"),
    [
        ("1,5 kW", "1500 W", "1500 W"),
        ("120 cm", "1.2 m", "1.2 m"),
        ("0.23 kV", "230 V", "230 V"),
        ("Red", "red", "red"),
    ],
)
async def test_normalised_values_agree_instead_of_disputing(pool: asyncpg.Pool, a: str, b: str, value: str) -> None:
    store, key = AssignmentStore(pool), entity()
    await observe(store, key, ("acme", a, 0.5), ("globex", b, 0.5))
    await ticker(pool).tick_once()
    assert await state(pool, key) == (None, value, "auto:trust_weighted")
    found = await store.assignments(key)
    assert found is not None and found.unassigned == []
    assert found.assignments[0].candidates == [
        wire.Candidate(value=value, trust=1.0, suppliers=["acme", "globex"], raws=sorted([a, b]))
    ]


async def test_long_serials_that_differ_in_their_last_digit_are_a_dispute_not_one_made_up_value(
    pool: asyncpg.Pool,
) -> None:
    store, key = AssignmentStore(pool), entity()
    a, b = "1234567890123456789012345678901", "1234567890123456789012345678902"
    await observe(store, key, ("acme", a, 0.5), ("globex", b, 0.5))
    await ticker(pool).tick_once()
    dispute, value, source = await state(pool, key)
    assert (dispute, source) == ("pending", "auto:latest")
    assert value in (a, b)


async def test_a_tie_writes_latest_and_enqueues_a_dispute_in_the_same_tick(pool: asyncpg.Pool) -> None:
    store, key = AssignmentStore(pool), entity()
    await observe(store, key, ("acme", "1 W", 0.5), ("globex", "2 W", 0.5))
    report = await ticker(pool).tick_once()
    assert report is not None and (report.keys, report.enqueued) == (1, 1)
    assert await state(pool, key) == ("pending", "1 W", "auto:latest")
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM disputes WHERE entity = $1", key)
    assert row["tied"] == ["trust_weighted", "mode", "latest"]
    assert row["winning_value"] == "1 W"
    assert [c["value"] for c in row["candidates"]] == ["1 W", "2 W"]
    # a supplier changes its mind: the tie is gone, the pending dispute settled
    await observe(store, key, ("globex", "1 W", 0.5))
    await ticker(pool).tick_once()
    assert await state(pool, key) == ("superseded", "1 W", "auto:trust_weighted")


async def test_manual_assignments_are_never_overwritten_by_the_chain(pool: asyncpg.Pool) -> None:
    store, key = AssignmentStore(pool), entity()
    await observe(store, key, ("acme", "1 W", 0.9))
    await ticker(pool).tick_once()
    await store.assign_manually(key, "power", "7 W")
    await observe(store, key, ("globex", "2 W", 1.0))
    await ticker(pool).tick_once()
    assert (await state(pool, key))[1:] == ("7 W", "manual")
    assert await store.unassign_manually(key, "power")
    await ticker(pool).tick_once()
    assert (await state(pool, key))[1:] == ("2 W", "auto:trust_weighted")


# The ticker's upsert under the prior-state guard: prior -> (after the same tie, after a new one)
GUARD = {
    DisputeState.PENDING: ("pending", "pending"),
    DisputeState.IN_PROGRESS: ("in_progress", "in_progress"),
    DisputeState.MANUAL_REVIEW: ("manual_review", "manual_review"),
    DisputeState.RESOLVED: ("resolved", "pending"),
    DisputeState.SUPERSEDED: ("superseded", "pending"),
    DisputeState.SKIPPED_UNCHANGED: ("skipped_unchanged", "pending"),
}


@pytest.mark.parametrize("prior", list(GUARD))
async def test_the_upsert_guard_for_every_prior_state(pool: asyncpg.Pool, prior: DisputeState) -> None:
    store, key = AssignmentStore(pool), entity()
    await observe(store, key, ("acme", "1 W", 0.5), ("globex", "2 W", 0.5))
    await ticker(pool).tick_once()
    async with pool.acquire() as conn:
        await conn.execute("UPDATE disputes SET state = $2, winning_value = 'x' WHERE entity = $1", key, str(prior))
    same, changed = GUARD[prior]
    await observe(store, key, ("acme", "1 W", 0.5))  # the same value set, observed again
    await ticker(pool).tick_once()
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT state, winning_value FROM disputes WHERE entity = $1", key)
    assert row["state"] == same
    assert (row["winning_value"] == "x") == (same != "pending")  # an untouched row is not written at all
    await observe(store, key, ("acme", "3 W", 0.5))  # a new value set
    await ticker(pool).tick_once()
    assert (await state(pool, key))[0] == changed


async def test_the_single_writer_checks_the_transition_under_the_row_lock(pool: asyncpg.Pool) -> None:
    store, disputes, key = AssignmentStore(pool), DisputeStore(pool), entity()
    await observe(store, key, ("acme", "1 W", 0.5), ("globex", "2 W", 0.5))
    await ticker(pool).tick_once()
    [claimed] = await disputes.claim(limit=10)
    with pytest.raises(DisputeConflict):
        await disputes.apply(claimed.id, Outcome(Event.DECIDED, value="2 W", source=Source.MANUAL))
    assert await disputes.apply(claimed.id, Outcome(Event.TO_MODERATION)) is DisputeState.MANUAL_REVIEW
    override = Outcome(Event.DECIDED, value="2 W", source=Source.MANUAL, decision="override")
    assert await disputes.apply(claimed.id, override) is DisputeState.RESOLVED
    assert await state(pool, key) == ("resolved", "2 W", "manual")
    with pytest.raises(KeyError):
        await disputes.apply(uuid.uuid4(), override)


async def test_two_daemons_never_run_the_same_tick_at_once(pool: asyncpg.Pool) -> None:
    locks, others = PgTickLocks(pool), PgTickLocks(pool)
    store, key = AssignmentStore(pool), entity()
    await observe(store, key, ("acme", "1 W", 0.5))
    async with locks.hold("canonical_assignment") as held:
        assert held
        async with others.hold("canonical_assignment") as again:
            assert not again
        async with others.hold("canonical_assignment_resolver") as other_lock:
            assert other_lock  # the two tickers do not block each other
        assert await ticker(pool).tick_once() is None  # skipped: nothing taken
        assert await state(pool, key) == (None, None, None)
    report = await ticker(pool).tick_once()  # released: the next tick runs
    assert report is not None and report.keys == 1


async def test_concurrent_batches_over_the_same_keys_never_deadlock(pool: asyncpg.Pool) -> None:
    store, key = AssignmentStore(pool), entity()
    batch = [Observation(key, f"c{i:02d}", "acme", str(i), 0.5, None) for i in range(40)]

    async def write(items: list[Observation]) -> None:
        for _ in range(5):
            await store.observe(items)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(write, batch)
        tasks.start_soon(write, batch[::-1])
    found = await store.assignments(key)
    assert found is not None and found.assignments == []  # observed, not yet assigned
    # nothing failed, nothing half written: each of the 40, once, with its one value
    assert [(u.characteristic, [c.value for c in u.candidates]) for u in found.unassigned] == [
        (f"c{i:02d}", [str(i)]) for i in range(40)
    ]


async def test_the_sweeper_deletes_finished_disputes_past_their_retention_only(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    store, disputes = AssignmentStore(pool), DisputeStore(pool)
    keys = {state: entity() for state in DisputeState}
    for key in keys.values():
        await observe(store, key, ("acme", "1 W", 0.5), ("globex", "2 W", 0.5))
    await ticker(pool).tick_once()
    async with pool.acquire() as conn:
        for state, key in keys.items():
            await conn.execute(
                "UPDATE disputes SET state = $2, updated_at = now() - interval '100 days' WHERE entity = $1",
                key,
                str(state),
            )
    fresh = entity()  # finished, but within the retention
    await observe(store, fresh, ("acme", "1 W", 0.5), ("globex", "2 W", 0.5))
    await ticker(pool).tick_once()
    async with pool.acquire() as conn:
        await conn.execute("UPDATE disputes SET state = 'resolved' WHERE entity = $1", fresh)
    sweeper = Sweeper(
        PgVectorStore(pool),
        SearchLog(pool),
        tmp_path,
        leased=set,
        settings=SweepSettings(dispute_retention_s=90 * 86400),
        disputes=disputes,
    )
    report = await sweeper.sweep_once()
    assert report.disputes == 3
    async with pool.acquire() as conn:
        left = {r["entity"] for r in await conn.fetch("SELECT entity FROM disputes")}
    finished = {DisputeState.RESOLVED, DisputeState.SUPERSEDED, DisputeState.SKIPPED_UNCHANGED}
    assert left == {key for state, key in keys.items() if state not in finished} | {fresh}


LATE_ANSWER = Outcome(
    Event.RESOLVED,
    value="220 V",
    source=Source.LLM_RESOLVED,
    tier=Tier.HIGH,
    confidence=0.95,
    confidence_source=ConfidenceSource.MODEL,
    model_confidence=0.95,
    selected_value="220 V",
    attempts=1,
)


async def dispute_row(pool: asyncpg.Pool, key: str) -> asyncpg.Record:
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM disputes WHERE entity = $1", key)
    assert row is not None
    return row


async def test_an_answer_to_a_value_set_that_changed_while_it_was_asked_is_recorded_not_applied(
    pool: asyncpg.Pool,
) -> None:
    store, disputes, key = AssignmentStore(pool), DisputeStore(pool), entity()
    await observe(store, key, ("acme", "230 V", 0.5), ("globex", "220 V", 0.5))
    await ticker(pool).tick_once()
    [claimed] = await disputes.claim(limit=10)  # the resolver is asking the LLM now
    await observe(store, key, ("globex", "230 V", 0.5))  # meanwhile globex corrects itself
    await ticker(pool).tick_once()
    assert await state(pool, key) == ("in_progress", "230 V", "auto:trust_weighted")
    # the late answer: recorded on the dispute, which is superseded; the settled value stays
    assert await disputes.apply(claimed.id, LATE_ANSWER) is DisputeState.SUPERSEDED
    assert await state(pool, key) == ("superseded", "230 V", "auto:trust_weighted")
    row = await dispute_row(pool, key)
    assert (row["selected_value"], row["tier"], row["confidence"], row["reason"]) == (
        "220 V",
        "high",
        0.95,
        "stale_answer",
    )
    assert row["resolved_hash"] is None  # nothing was resolved: a return to 230/220 is asked afresh
    # and later ticks leave it so: the suppliers agree
    await observe(store, key, ("acme", "230 V", 0.5))
    await ticker(pool).tick_once()
    assert await state(pool, key) == ("superseded", "230 V", "auto:trust_weighted")


async def test_a_late_answer_to_a_tie_that_still_ties_on_new_values_queues_the_new_tie(pool: asyncpg.Pool) -> None:
    store, disputes, key = AssignmentStore(pool), DisputeStore(pool), entity()
    await observe(store, key, ("acme", "230 V", 0.5), ("globex", "220 V", 0.5))
    await ticker(pool).tick_once()
    [claimed] = await disputes.claim(limit=10)
    await observe(store, key, ("acme", "240 V", 0.5))  # 240 against 220: still a tie
    await ticker(pool).tick_once()  # the in_progress dispute is left alone by the guard
    assert (await dispute_row(pool, key))["state"] == "in_progress"
    assert await disputes.apply(claimed.id, LATE_ANSWER) is DisputeState.SUPERSEDED
    assert (await state(pool, key))[1] != "220 V" or (await state(pool, key))[2] != "auto:llm_resolved"
    report = await ticker(pool).tick_once()  # the writer marked the key: the new tie is queued
    assert report is not None and report.enqueued == 1
    row = await dispute_row(pool, key)
    assert row["state"] == "pending"
    assert sorted(c["value"] for c in row["candidates"]) == ["220 V", "240 V"]
    assert (row["selected_value"], row["tier"], row["reason"]) == (None, None, None)
    assert (await state(pool, key))[2] == "auto:latest"


async def test_an_override_of_a_dispute_whose_values_changed_still_applies(pool: asyncpg.Pool) -> None:
    store, disputes, key = AssignmentStore(pool), DisputeStore(pool), entity()
    await observe(store, key, ("acme", "230 V", 0.5), ("globex", "220 V", 0.5))
    await ticker(pool).tick_once()
    [claimed] = await disputes.claim(limit=10)
    await disputes.apply(claimed.id, Outcome(Event.TO_MODERATION, reason=ResolverReason.ATTEMPTS_EXHAUSTED))
    await observe(store, key, ("globex", "230 V", 0.5))
    await ticker(pool).tick_once()
    override = Outcome(Event.DECIDED, value="235 V", source=Source.MANUAL, decision="override")
    assert await disputes.apply(claimed.id, override) is DisputeState.RESOLVED
    assert await state(pool, key) == ("resolved", "235 V", "manual")


async def test_a_dispute_reopened_on_new_values_keeps_nothing_of_its_earlier_answer(pool: asyncpg.Pool) -> None:
    store, disputes, key = AssignmentStore(pool), DisputeStore(pool), entity()
    await observe(store, key, ("acme", "230 V", 0.5), ("globex", "220 V", 0.5))
    await ticker(pool).tick_once()
    [claimed] = await disputes.claim(limit=10)
    answer = Outcome(
        Event.TO_MODERATION,
        tier=Tier.LOW,
        confidence=0.3,
        confidence_source=ConfidenceSource.LOGPROBS,
        model_confidence=0.9,
        selected_value="220 V",
        reason=ResolverReason.LOW_CONFIDENCE,
        attempts=1,
    )
    await disputes.apply(claimed.id, answer)
    await disputes.apply(claimed.id, Outcome(Event.DECIDED, decision="reject"))
    row = await dispute_row(pool, key)
    assert (row["state"], row["selected_value"], row["decision"]) == ("resolved", "220 V", "reject")
    # a new value set reopens it: the earlier answer and decision are gone, so a moderator's
    # approve has nothing of the old value set to apply
    await observe(store, key, ("acme", "240 V", 0.5))
    await ticker(pool).tick_once()
    row = await dispute_row(pool, key)
    assert row["state"] == "pending"
    cleared = ("tier", "confidence", "confidence_source", "model_confidence", "selected_value", "reason", "decision")
    assert {name: row[name] for name in cleared} == dict.fromkeys(cleared)
    assert row["attempts"] == 0


async def test_an_entity_lists_what_is_assigned_and_what_waits_for_its_first_tick(pool: asyncpg.Pool) -> None:
    store, key = AssignmentStore(pool), entity()
    assert await store.assignments(key) is None, "neither observed nor assigned"
    await observe(store, key, ("acme", "1 W", 0.5))
    found = await store.assignments(key)
    assert found is not None and found.assignments == []
    assert found.unassigned == [
        wire.Unassigned(
            characteristic="power",
            candidates=[wire.Candidate(value="1 W", trust=0.5, suppliers=["acme"], raws=["1 W"])],
        )
    ]
    await ticker(pool).tick_once()
    await store.observe([Observation(key, "colour", "acme", "red", 0.5, None)])
    found = await store.assignments(key)
    assert found is not None
    assert [(a.characteristic, a.value, a.source) for a in found.assignments] == [
        ("power", "1 W", "auto:trust_weighted")
    ]
    assert [u.characteristic for u in found.unassigned] == ["colour"], "assigned power no longer waits"
    await store.assign_manually(key, "colour", "blue")
    found = await store.assignments(key)
    assert found is not None and [a.characteristic for a in found.assignments] == ["colour", "power"]
    assert found.unassigned == []
    other = entity()
    await store.assign_manually(other, "size", "M")  # assigned, never observed: no candidates, nothing waits
    found = await store.assignments(other)
    assert found is not None and found.unassigned == [] and found.assignments[0].candidates == []
