"""The dispute queue in PostgreSQL, and the single writer of resolutions (docs/DESIGN.md, "Canonical assignments").

`DisputeStore.apply` is the one function that finishes a dispute: the resolver's answers
(`auto:llm_resolved`), its refusals (moderation), administrators' force-resolve and supersede,
and moderators' decisions all go through it, so the transition table
(`recalld.actors.assignments.disputes.transition`) is checked under the row lock, and a dispute's state and
the canonical value it applies commit together. The resolver never writes canonical rows itself.

Under the same lock it compares the dispute's value set with the observations' own
(`recalld.store.assignments.current_value_set_hash`, the ticker's computation): an answer to a
value set that changed meanwhile (the resolver's, or a moderator's approve) is recorded with
reason `stale_answer` and never applied, the dispute is superseded, and the key is marked
changed so the next assignment tick queues the new values if they still tie. The ticker takes
the same row lock before it writes a key, so an answer and a tick over one key never interleave.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import asyncpg

from recalld.actors.assignments.disputes import GUARDED, DisputeState, Event, transition
from recalld.actors.assignments.verdict import ResolverReason
from recalld.actors.ports.assignments import Dispute, DisputeConflict, Outcome
from recalld.store import db
from recalld.store.assignments import AssignmentStore, current_value_set_hash, mark_changed, write_canonical

_COLUMNS = """id, entity, characteristic, state, tier, confidence, confidence_source, model_confidence,
              value_set_hash, candidates, tied, winning_value, selected_value, reason, attempts,
              resolved_hash, resolved_value, decision, created_at, updated_at"""


def _dispute(row: asyncpg.Record) -> Dispute:
    return Dispute(
        id=row["id"],
        entity=row["entity"],
        characteristic=row["characteristic"],
        state=DisputeState(row["state"]),
        value_set_hash=row["value_set_hash"],
        candidates=list(row["candidates"]),
        winning_value=row["winning_value"],
        attempts=row["attempts"],
        resolved_hash=row["resolved_hash"],
        resolved_value=row["resolved_value"],
    )


class DisputeStore:
    """Implements `recalld.actors.ports.assignments.DisputeQueue`; answers the admin routes."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def release_orphans(self) -> int:
        async with db.connection(self._pool) as conn:
            done = await conn.execute(
                "UPDATE disputes SET state = 'pending', updated_at = now() WHERE state = 'in_progress'"
            )
        return int(done.split()[-1])

    async def claim(self, *, limit: int) -> list[Dispute]:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                f"""UPDATE disputes SET state = 'in_progress', updated_at = now()
                    WHERE id IN (SELECT id FROM disputes WHERE state = 'pending'
                                 ORDER BY updated_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
                    RETURNING {_COLUMNS}""",
                limit,
            )
        return sorted((_dispute(r) for r in rows), key=lambda d: (d.entity, d.characteristic))

    async def force(self, dispute_id: uuid.UUID) -> Dispute:
        async with db.connection(self._pool) as conn, db.transaction(conn):
            row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM disputes WHERE id = $1 FOR UPDATE", dispute_id)
            if row is None:
                raise KeyError(dispute_id)
            prior = DisputeState(row["state"])
            if transition(prior, Event.FORCED) is None:
                raise DisputeConflict(f"a dispute in state {prior} cannot be sent to the resolver", prior)
            row = await conn.fetchrow(
                f"""UPDATE disputes SET state = 'in_progress', updated_at = now() WHERE id = $1
                    RETURNING {_COLUMNS}""",
                dispute_id,
            )
        return _dispute(row)

    async def apply(self, dispute_id: uuid.UUID, outcome: Outcome) -> DisputeState:
        async with db.connection(self._pool) as conn, db.transaction(conn):
            row = await conn.fetchrow(
                "SELECT entity, characteristic, state, value_set_hash, winning_value FROM disputes"
                " WHERE id = $1 FOR UPDATE",
                dispute_id,
            )
            if row is None:
                raise KeyError(dispute_id)
            entity, characteristic, prior = row["entity"], row["characteristic"], DisputeState(row["state"])
            current = await current_value_set_hash(conn, entity, characteristic)
            stale = current != row["value_set_hash"]
            after = transition(prior, outcome.event, stale=stale)
            if after is None:
                raise DisputeConflict(f"{outcome.event} does not apply to a dispute in state {prior}", prior)
            # an answer the transition turned into superseded: recorded, never applied
            refused = stale and after is DisputeState.SUPERSEDED and transition(prior, outcome.event) != after
            winner = row["winning_value"]
            if outcome.value is not None and outcome.source is not None and not refused:
                winner = await write_canonical(conn, entity, characteristic, outcome.value, outcome.source, current)
            reason = ResolverReason.STALE_ANSWER if refused else outcome.reason
            resolved = after is DisputeState.RESOLVED and not stale
            await conn.execute(
                """UPDATE disputes SET state = $2, winning_value = $3, updated_at = now(),
                          tier = coalesce($4, tier), confidence = coalesce($5, confidence),
                          confidence_source = coalesce($6, confidence_source),
                          model_confidence = coalesce($7, model_confidence),
                          selected_value = coalesce($8, selected_value),
                          reason = CASE WHEN $2 = 'resolved' THEN NULL ELSE coalesce($9, reason) END,
                          attempts = attempts + $10, decision = coalesce($11, decision),
                          resolved_hash = CASE WHEN $12 THEN value_set_hash ELSE resolved_hash END,
                          resolved_value = CASE WHEN $12 THEN $3 ELSE resolved_value END
                   WHERE id = $1""",
                dispute_id,
                str(after),
                winner,
                None if outcome.tier is None else str(outcome.tier),
                outcome.confidence,
                None if outcome.confidence_source is None else str(outcome.confidence_source),
                outcome.model_confidence,
                outcome.selected_value,
                None if reason is None else str(reason),
                outcome.attempts,
                None if refused else outcome.decision,
                resolved,
            )
            if stale and after not in GUARDED:
                # the ticker skipped this key while the dispute was guarded: its new values get a tick
                await mark_changed(conn, entity, characteristic)
        return after

    async def delete_finished_disputes_before(self, cutoff: dt.datetime) -> int:
        """Implements the sweeper's `DisputeRetention`. A tie that comes back after its dispute
        is gone is a new dispute (asked again), which is what retention means."""
        async with db.connection(self._pool) as conn:
            done = await conn.execute(
                """DELETE FROM disputes
                   WHERE state IN ('resolved', 'superseded', 'skipped_unchanged') AND updated_at < $1""",
                cutoff,
            )
        return int(done.split()[-1])

    async def counts(self) -> dict[tuple[str, str], int]:
        return await AssignmentStore(self._pool).dispute_counts()

    async def get(self, dispute_id: uuid.UUID) -> dict[str, Any] | None:
        async with db.connection(self._pool) as conn:
            row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM disputes WHERE id = $1", dispute_id)
        return None if row is None else dict(row)

    async def page(
        self, *, state: str | None, tier: str | None, limit: int, after: uuid.UUID | None
    ) -> list[dict[str, Any]]:
        """Disputes in id order after `after`, filtered by state and tier."""
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                f"""SELECT {_COLUMNS} FROM disputes
                    WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR tier = $2)
                      AND ($3::uuid IS NULL OR id > $3)
                    ORDER BY id LIMIT $4""",
                state,
                tier,
                after,
                limit,
            )
        return [dict(r) for r in rows]
