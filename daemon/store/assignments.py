"""Observations and canonical assignments in PostgreSQL (docs/DESIGN.md).

The assignment ticker's batch (`assign_changed`) is one transaction: the changed keys it takes,
the canonical rows it writes and the disputes it upserts commit together or not at all, so a
canonical row and its dispute never disagree. Canonical rows are written by two functions only:
`write_canonical` here (the chain's winners, and manual assignments) and the single writer of
resolutions, `recalld.store.assignments_disputes.DisputeStore.apply`, which calls it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from recalld.actors.assignments.disputes import DisputeState, Event, candidates_hash, transition
from recalld.actors.assignments.strategy import Candidate, Choice, Source, Vote, candidates
from recalld.actors.assignments.values import normalise
from recalld.actors.ports.assignments import AssignReport
from recalld.store import db
from recalld.wire import assignments as wire

log = logging.getLogger("recalld.store.assignments")

AUTOMATIC = (Source.TRUST_WEIGHTED, Source.MODE, Source.LATEST, Source.LLM_RESOLVED)


@dataclass(frozen=True)
class Observation:
    entity: str
    characteristic: str
    supplier: str
    value: str
    trust: float
    observed_at: dt.datetime | None


async def write_canonical(
    conn: asyncpg.Connection, entity: str, characteristic: str, value: str, source: Source, value_hash: str
) -> str:
    """Write one canonical row by the rules of its source, and return the value now in place.

    A manual row is replaced only by a manual one; the chain does not replace an auto:llm_resolved
    row of the same value set (the resolver already decided that tie)."""
    chain = source in (Source.TRUST_WEIGHTED, Source.MODE, Source.LATEST)
    current: str | None = await conn.fetchval(
        """INSERT INTO canonical_assignments AS c (entity, characteristic, value, source, value_set_hash)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (entity, characteristic) DO UPDATE
              SET value = EXCLUDED.value, source = EXCLUDED.source,
                  value_set_hash = EXCLUDED.value_set_hash, updated_at = now()
            WHERE EXCLUDED.source = 'manual'
               OR (c.source <> 'manual'
                   AND NOT ($6 AND c.source = 'auto:llm_resolved' AND c.value_set_hash = EXCLUDED.value_set_hash))
           RETURNING value""",
        entity,
        characteristic,
        value,
        str(source),
        value_hash,
        chain,
    )
    if current is None:
        current = await conn.fetchval(
            "SELECT value FROM canonical_assignments WHERE entity = $1 AND characteristic = $2", entity, characteristic
        )
    assert current is not None
    return current


def wire_candidates(found: Sequence[Candidate]) -> list[wire.Candidate]:
    return [wire.Candidate(value=c.value, trust=c.trust, suppliers=list(c.suppliers), raws=list(c.raws)) for c in found]


def candidates_json(found: Sequence[Candidate]) -> list[dict[str, Any]]:
    """As a dispute stores them (and `GET /admin/disputes` answers them)."""
    as_json: list[dict[str, Any]] = msgspec.to_builtins(wire_candidates(found))
    return as_json


def _dispute_ref(row: asyncpg.Record | None) -> wire.DisputeRef | None:
    return None if row is None else wire.DisputeRef(id=row["id"], state=row["state"], tier=row["tier"])


def _vote(row: asyncpg.Record) -> Vote:
    return Vote(row["supplier"], row["normalised"], row["value"], row["trust"], row["observed_at"])


async def current_value_set_hash(conn: asyncpg.Connection, entity: str, characteristic: str) -> str:
    """The value set hash of the observations of (entity, characteristic) as they are now,
    computed as the ticker computes a dispute's (`candidates_hash` of the chain's candidates)."""
    rows = await conn.fetch(
        "SELECT * FROM observations WHERE entity = $1 AND characteristic = $2", entity, characteristic
    )
    return candidates_hash(candidates([_vote(r) for r in rows]))


async def mark_changed(conn: asyncpg.Connection, entity: str, characteristic: str) -> None:
    """Have the next assignment tick run the chain over (entity, characteristic) again."""
    await conn.execute("INSERT INTO assignments_changed VALUES ($1, $2) ON CONFLICT DO NOTHING", entity, characteristic)


class AssignmentStore:
    """Implements `recalld.actors.ports.assignments.Assignments`; answers the observation and assignment routes."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def observe(self, batch: Sequence[Observation]) -> int:
        """Store a batch in one transaction; an observation older than the supplier's stored one
        of the same characteristic is kept out. Returns how many were taken."""
        now = dt.datetime.now(dt.UTC)
        taken = 0
        # rows locked in one order by every batch, so two batches sharing keys cannot deadlock;
        # the sort is stable, so of two observations of one key the later in the batch wins
        ordered = sorted(batch, key=lambda o: (o.entity, o.characteristic, o.supplier))
        async with db.connection(self._pool) as conn, db.transaction(conn):
            for item in ordered:
                row = await conn.fetchval(
                    """INSERT INTO observations AS o (entity, characteristic, supplier, value, normalised, trust,
                                                      observed_at)
                       VALUES ($1, $2, $3, $4, $5, $6, $7)
                       ON CONFLICT (entity, characteristic, supplier) DO UPDATE
                          SET value = EXCLUDED.value, normalised = EXCLUDED.normalised, trust = EXCLUDED.trust,
                              observed_at = EXCLUDED.observed_at, received_at = now()
                        WHERE EXCLUDED.observed_at >= o.observed_at
                       RETURNING 1""",
                    item.entity,
                    item.characteristic,
                    item.supplier,
                    item.value,
                    normalise(item.value).value,
                    item.trust,
                    item.observed_at or now,
                )
                if row is None:
                    continue
                taken += 1
                await mark_changed(conn, item.entity, item.characteristic)
        return taken

    async def assign_changed(self, decide: Callable[[Sequence[Vote]], Choice], *, limit: int) -> AssignReport:
        report = AssignReport()
        async with db.connection(self._pool) as conn, db.transaction(conn):
            keys = await conn.fetch(
                """DELETE FROM assignments_changed WHERE (entity, characteristic) IN (
                       SELECT entity, characteristic FROM assignments_changed
                       ORDER BY entity, characteristic LIMIT $1 FOR UPDATE SKIP LOCKED)
                   RETURNING entity, characteristic""",
                limit,
            )
            if not keys:
                return report
            rows = await conn.fetch(
                """SELECT o.* FROM observations o
                   JOIN unnest($1::text[], $2::text[]) AS k(entity, characteristic)
                     ON o.entity = k.entity AND o.characteristic = k.characteristic""",
                [k["entity"] for k in keys],
                [k["characteristic"] for k in keys],
            )
            votes: dict[tuple[str, str], list[Vote]] = {}
            for row in rows:
                votes.setdefault((row["entity"], row["characteristic"]), []).append(_vote(row))
            for (entity, characteristic), found in sorted(votes.items()):
                choice = decide(found)
                await self._assign(conn, entity, characteristic, choice, report)
                report.keys += 1
        return report

    async def _assign(
        self, conn: asyncpg.Connection, entity: str, characteristic: str, choice: Choice, report: AssignReport
    ) -> None:
        value_hash = candidates_hash(choice.candidates)
        # the dispute row before the canonical one, in the single writer's order: no deadlock
        prior = await conn.fetchrow(
            "SELECT state, value_set_hash FROM disputes WHERE entity = $1 AND characteristic = $2 FOR UPDATE",
            entity,
            characteristic,
        )
        winner = await write_canonical(conn, entity, characteristic, choice.value, choice.source, value_hash)
        prior_state = DisputeState(prior["state"]) if prior is not None else None
        if not choice.disputed:
            if transition(prior_state, Event.SETTLED) is not None:
                await conn.execute(
                    """UPDATE disputes SET state = 'superseded', winning_value = $3, updated_at = now()
                       WHERE entity = $1 AND characteristic = $2""",
                    entity,
                    characteristic,
                    winner,
                )
                report.settled += 1
            return
        same = prior is not None and prior["value_set_hash"] == value_hash
        if transition(prior_state, Event.TIED, same_hash=same) is None:
            return  # the guard: in progress, in moderation, or already decided on this value set
        await conn.execute(
            """INSERT INTO disputes (entity, characteristic, state, value_set_hash, candidates, tied, winning_value)
               VALUES ($1, $2, 'pending', $3, $4, $5, $6)
               ON CONFLICT (entity, characteristic) DO UPDATE
                  SET state = 'pending', value_set_hash = EXCLUDED.value_set_hash,
                      candidates = EXCLUDED.candidates, tied = EXCLUDED.tied,
                      winning_value = EXCLUDED.winning_value, updated_at = now(),
                      tier = NULL, confidence = NULL, confidence_source = NULL, model_confidence = NULL,
                      selected_value = NULL, reason = NULL, decision = NULL,
                      attempts = CASE WHEN disputes.value_set_hash = EXCLUDED.value_set_hash
                                      THEN disputes.attempts ELSE 0 END""",
            entity,
            characteristic,
            value_hash,
            candidates_json(choice.candidates),
            [str(s) for s in choice.tied],
            winner,
        )
        report.enqueued += 1

    async def dispute_counts(self) -> dict[tuple[str, str], int]:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                "SELECT state, coalesce(tier, '') AS tier, count(*) AS n FROM disputes GROUP BY 1, 2"
            )
        return {(r["state"], r["tier"]): int(r["n"]) for r in rows}

    async def assignments(self, entity: str) -> wire.AssignmentsOut | None:
        """Each characteristic's canonical row with its candidates and open dispute, and each
        characteristic observed but not assigned yet with its candidates (`next_tick_in_s` is
        the ticker's to say: left null); None when the entity has neither observations nor
        assignments."""
        # one snapshot: a characteristic is either assigned or waiting, never both nor neither
        async with db.connection(self._pool) as conn, db.transaction(conn, isolation="repeatable_read", readonly=True):
            canon = await conn.fetch(
                "SELECT characteristic, value, source FROM canonical_assignments WHERE entity = $1 ORDER BY 1", entity
            )
            observed = await conn.fetch("SELECT * FROM observations WHERE entity = $1", entity)
            disputes = await conn.fetch(
                """SELECT characteristic, id, state, tier FROM disputes
                   WHERE entity = $1 AND state <> 'superseded'""",
                entity,
            )
        if not canon and not observed:
            return None
        votes: dict[str, list[Vote]] = {}
        for row in observed:
            votes.setdefault(row["characteristic"], []).append(_vote(row))
        by_key = {d["characteristic"]: d for d in disputes}
        assigned = [
            wire.Assignment(
                characteristic=row["characteristic"],
                value=row["value"],
                source=row["source"],
                candidates=wire_candidates(candidates(votes.get(row["characteristic"], []))),
                dispute=_dispute_ref(by_key.get(row["characteristic"])),
            )
            for row in canon
        ]
        named = {row["characteristic"] for row in canon}
        waiting = [
            wire.Unassigned(characteristic=characteristic, candidates=wire_candidates(candidates(found)))
            for characteristic, found in sorted(votes.items())
            if characteristic not in named
        ]
        return wire.AssignmentsOut(entity=entity, assignments=assigned, unassigned=waiting, next_tick_in_s=None)

    async def assign_manually(self, entity: str, characteristic: str, value: str) -> None:
        """A manual assignment: kept over anything automatic until it is removed."""
        async with db.connection(self._pool) as conn, db.transaction(conn):
            value_hash = await current_value_set_hash(conn, entity, characteristic)
            await write_canonical(conn, entity, characteristic, value, Source.MANUAL, value_hash)

    async def unassign_manually(self, entity: str, characteristic: str) -> bool:
        """Remove a manual assignment; the next tick assigns the characteristic from its votes."""
        async with db.connection(self._pool) as conn, db.transaction(conn):
            gone = await conn.fetchval(
                """DELETE FROM canonical_assignments WHERE entity = $1 AND characteristic = $2 AND source = 'manual'
                   RETURNING 1""",
                entity,
                characteristic,
            )
            if gone is None:
                return False
            await conn.execute(
                """INSERT INTO assignments_changed
                   SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM observations WHERE entity = $1 AND characteristic = $2)
                   ON CONFLICT DO NOTHING""",
                entity,
                characteristic,
            )
        return True
