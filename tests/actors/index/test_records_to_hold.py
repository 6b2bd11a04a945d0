"""Which failed records of a catch-up batch are set aside: the ones whose own input failed,
unless nothing in the batch was embedded and several failed that way, or another failed for the
provider's sake (then it is the provider)."""

from __future__ import annotations

import uuid

import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.index.catch_up import records_to_hold
from recalld.actors.ports.index import RecordToIndex


def failed(*reasons: Reason) -> list[tuple[RecordToIndex, EmbeddingError]]:
    return [
        (RecordToIndex(uuid.uuid4(), 1, "ns", f"record {i}", "body"), EmbeddingError(reason, "x"))
        for i, reason in enumerate(reasons)
    ]


@pytest.mark.parametrize(
    ("reasons", "embedded", "held"),
    [
        # one refused input among good ones: only it waits
        ((Reason.INPUT_REJECTED,), 15, [0]),
        # a vector validation rejects, per row: the input's too
        ((Reason.EMBEDDING_NOT_FINITE, Reason.EMBEDDING_ZERO_VECTOR), 3, [0, 1]),
        ((Reason.EMBEDDING_NOT_NORMALIZED,), 1, [0]),
        # a lone record, refused: held (asking again every poll is what holds prevent)
        ((Reason.INPUT_REJECTED,), 0, [0]),
        # everything refused and nothing embedded: the provider, not the inputs
        ((Reason.INPUT_REJECTED, Reason.INPUT_REJECTED), 0, []),
        ((Reason.EMBEDDING_NOT_FINITE,) * 5, 0, []),
        # provider trouble is never the input's
        ((Reason.PROVIDER_UNAVAILABLE, Reason.CIRCUIT_OPEN, Reason.DEADLINE_EXCEEDED), 4, []),
        ((Reason.PROVIDER_REJECTED,), 4, []),
        ((Reason.EMBEDDING_DIMENSION_MISMATCH,), 4, []),
        # mixed: the refused input waits, the timed-out one ends the pass (the caller's business)
        ((Reason.INPUT_REJECTED, Reason.PROVIDER_TIMEOUT), 2, [0]),
        # nothing embedded, one refused input and the circuit open for the rest: a broken
        # provider's probe drew that input, which says nothing about it
        ((Reason.EMBEDDING_NOT_FINITE, Reason.CIRCUIT_OPEN), 0, []),
        ((Reason.INPUT_REJECTED, Reason.PROVIDER_UNAVAILABLE, Reason.PROVIDER_UNAVAILABLE), 0, []),
    ],
)
def test_records_to_hold(reasons: tuple[Reason, ...], embedded: int, held: list[int]) -> None:
    failures = failed(*reasons)
    assert records_to_hold(failures, embedded=embedded) == [failures[i] for i in held]
