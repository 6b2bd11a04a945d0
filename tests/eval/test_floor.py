"""The ratchet floor: raise, refuse to lower, unknown space, two spaces side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld.eval.floor import (
    Acceptance,
    Floor,
    FloorFileError,
    SpaceIdentity,
    Verdict,
    accept,
    judge,
    read,
    write,
)

MINILM = SpaceIdentity("local", "all-MiniLM-L6-v2", 384, 2)
NOMIC = SpaceIdentity("ollama", "nomic-embed-text", 768, 2)
MINILM_T3 = SpaceIdentity("local", "all-MiniLM-L6-v2", 384, 3)  # another template: another space
AT = "2026-12-02T00:00:00Z"


def floors(*entries: tuple[SpaceIdentity, int, int]) -> dict[str, Floor]:
    return {space.key: Floor(count, of, space, AT) for space, count, of in entries}


@pytest.mark.parametrize(
    ("known", "space", "count", "of", "verdict", "passed"),
    [
        (floors((MINILM, 40, 45)), MINILM, 41, 45, Verdict.AT_OR_ABOVE, True),
        (floors((MINILM, 40, 45)), MINILM, 40, 45, Verdict.AT_OR_ABOVE, True),  # the floor itself passes
        (floors((MINILM, 40, 45)), MINILM, 39, 45, Verdict.BELOW, False),
        # a set that grew keeps its floor as a count
        (floors((MINILM, 40, 45)), MINILM, 40, 50, Verdict.AT_OR_ABOVE, True),
        # one that shrank under its floor fails until a person edits the file
        (floors((MINILM, 40, 45)), MINILM, 38, 40, Verdict.BELOW, False),
        # unknown space: reports and passes, whatever today's count
        ({}, MINILM, 0, 45, Verdict.NO_FLOOR, True),
        (floors((NOMIC, 44, 45)), MINILM, 10, 45, Verdict.NO_FLOOR, True),
        (floors((MINILM, 40, 45)), MINILM_T3, 1, 45, Verdict.NO_FLOOR, True),
        # two spaces side by side: each judged by its own floor only
        (floors((MINILM, 40, 45), (NOMIC, 44, 45)), MINILM, 41, 45, Verdict.AT_OR_ABOVE, True),
        (floors((MINILM, 40, 45), (NOMIC, 44, 45)), NOMIC, 41, 45, Verdict.BELOW, False),
    ],
)
def test_judge(
    known: dict[str, Floor], space: SpaceIdentity, count: int, of: int, verdict: Verdict, passed: bool
) -> None:
    judgement = judge(known, space, count, of)
    assert judgement.verdict is verdict
    assert judgement.passed is passed
    assert (judgement.count, judgement.of) == (count, of)


@pytest.mark.parametrize(
    ("known", "space", "count", "of", "outcome", "after"),
    [
        ({}, MINILM, 30, 45, Acceptance.FIRST, floors((MINILM, 30, 45))),
        (floors((MINILM, 40, 45)), MINILM, 42, 45, Acceptance.RAISED, floors((MINILM, 42, 45))),
        (floors((MINILM, 40, 45)), MINILM, 40, 45, Acceptance.UNCHANGED, floors((MINILM, 40, 45))),
        # never lowered, not even by --accept
        (floors((MINILM, 40, 45)), MINILM, 39, 45, Acceptance.REFUSED, floors((MINILM, 40, 45))),
        (floors((MINILM, 40, 45)), MINILM, 0, 45, Acceptance.REFUSED, floors((MINILM, 40, 45))),
        # two spaces: accepting one leaves the other as it was, even when the other is higher
        (
            floors((MINILM, 40, 45), (NOMIC, 44, 45)),
            MINILM,
            41,
            45,
            Acceptance.RAISED,
            floors((MINILM, 41, 45), (NOMIC, 44, 45)),
        ),
        (
            floors((NOMIC, 44, 45)),
            MINILM,
            20,
            45,
            Acceptance.FIRST,
            floors((MINILM, 20, 45), (NOMIC, 44, 45)),
        ),
    ],
)
def test_accept_raises_and_never_lowers(
    known: dict[str, Floor],
    space: SpaceIdentity,
    count: int,
    of: int,
    outcome: Acceptance,
    after: dict[str, Floor],
) -> None:
    before = dict(known)
    result, acceptance = accept(known, space, count, of, at=AT)
    assert acceptance is outcome
    assert result == after
    assert known == before  # the caller's floors are not changed in place


def test_space_identity_key_tells_every_field_apart() -> None:
    keys = {
        s.key
        for s in (
            MINILM,
            NOMIC,
            MINILM_T3,
            SpaceIdentity("local", "all-MiniLM-L6-v2", 768, 2),
            SpaceIdentity("openai", "all-MiniLM-L6-v2", 384, 2),
        )
    }
    assert len(keys) == 5
    daemon_space = {"provider": "local", "model": "all-MiniLM-L6-v2", "dimension": 384, "template_version": 2}
    assert SpaceIdentity.of(daemon_space | {"metric": "ip", "normalized": True}) == MINILM


def test_the_file_round_trips_and_refuses_what_is_not_a_floor_file(tmp_path: Path) -> None:
    path = tmp_path / "floor.json"
    assert read(path) == {}
    both = floors((MINILM, 40, 45), (NOMIC, 44, 45))
    write(path, both)
    assert read(path) == both
    assert '"count": 40' in path.read_text() and '"of": 45' in path.read_text()
    assert "%" not in path.read_text()
    for bad in ("{", '{"floors": []}', '{"floors": {"x": {"provider": "local"}}}'):
        path.write_text(bad)
        with pytest.raises(FloorFileError):
            read(path)
    wrong_key = '{"floors": {"other": {"provider": "local", "model": "m", "dimension": 1, "template_version": 1, '
    path.write_text(wrong_key + '"count": 1, "of": 2}}}')
    with pytest.raises(FloorFileError, match="describes the space"):
        read(path)
    path.write_text(wrong_key.replace('"other"', '"local:m:1:template-v1"') + '"count": 3, "of": 2}}}')
    with pytest.raises(FloorFileError, match="not a count"):
        read(path)
