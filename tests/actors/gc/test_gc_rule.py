"""The sweeper's deletion rule, case by case: never current, never leased, never inside the window."""

from __future__ import annotations

import datetime as dt

import pytest

from recalld.actors.gc.sweeper import generation_removable
from recalld.actors.ports.index import GenerationRow

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def row(
    gid: str, *, built: dt.timedelta, deactivated: dt.timedelta | None = None, state: str = "verified"
) -> GenerationRow:
    return GenerationRow(
        id=gid,
        space_id="vs1-x",
        directory=f"/g/{gid}",
        manifest_sha256="0" * 64,
        index_type="Flat",
        count=1,
        source_watermark=1,
        tombstone_watermark=1,
        state=state,
        built_at=NOW - built,
        deactivated_at=None if deactivated is None else NOW - deactivated,
    )


@pytest.mark.parametrize(
    ("case", "generation", "current", "previous", "leased", "removable"),
    [
        ("current, however old", row("a", built=10 * HOUR), "a", None, set(), False),
        ("leased by a search", row("b", built=10 * HOUR, deactivated=9 * HOUR), "c", None, {"b"}, False),
        ("rollback target inside the window", row("b", built=2 * HOUR, deactivated=0.5 * HOUR), "c", "b", set(), False),
        ("rollback target past the window", row("b", built=5 * HOUR, deactivated=2 * HOUR), "c", "b", set(), True),
        ("rollback target, hand-over time unknown", row("b", built=5 * HOUR), "c", "b", set(), False),
        (
            "older generation inside the window",
            row("d", built=3 * HOUR, deactivated=0.2 * HOUR),
            "c",
            "b",
            set(),
            False,
        ),
        ("older generation past the window", row("d", built=3 * HOUR, deactivated=1.5 * HOUR), "c", "b", set(), True),
        ("built but never current, recent", row("e", built=0.1 * HOUR), "c", "b", set(), False),
        ("built but never current, old", row("e", built=2 * HOUR), "c", "b", set(), True),
        ("already deleted", row("f", built=9 * HOUR, deactivated=8 * HOUR, state="deleted"), "c", "b", set(), False),
        ("exactly at the window edge", row("g", built=3 * HOUR, deactivated=1 * HOUR), "c", None, set(), True),
    ],
)
def test_generation_removable(
    case: str, generation: GenerationRow, current: str, previous: str | None, leased: set[str], removable: bool
) -> None:
    verdict = generation_removable(
        generation, current=current, previous=previous, leased=leased, now=NOW, window_s=3600
    )
    assert verdict is removable, case
