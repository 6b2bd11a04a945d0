"""The ratchet floor of a golden set (docs/EVAL.md): per vector space, the fused hit@5 count the set
must keep. Only a person raises it (`recalld eval --accept`); nothing lowers it.

A floor is a count and the number of questions it was counted over (`count` of `of`), never a
percentage: a set that grows keeps its floor's meaning ("at least 41 answered"), and one that
shrinks below its floor fails until a person edits the file. A space with no floor reports and
passes: a new model has no history to fall below, and `--accept` gives it one.

The rules (`judge`, `accept`) are pure; `read` and `write` are the file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

MEASURE = "fused hit@5 over all questions"
"""What `count` counts; written into the file so that a reader needs no code to know."""


@dataclass(frozen=True)
class SpaceIdentity:
    """The vector space a count was measured in: what decides which answers the vector route
    gives. Another provider, model, dimension or input template is another space."""

    provider: str
    model: str
    dimension: int
    template_version: int

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.model}:{self.dimension}:template-v{self.template_version}"

    @classmethod
    def of(cls, space: Mapping[str, Any]) -> SpaceIdentity:
        """From the daemon's space (readiness detail or generation): the four fields it is keyed by."""
        return cls(str(space["provider"]), str(space["model"]), int(space["dimension"]), int(space["template_version"]))


@dataclass(frozen=True)
class Floor:
    count: int
    of: int
    space: SpaceIdentity
    accepted_at: str = ""


class Verdict(StrEnum):
    AT_OR_ABOVE = "at_or_above_floor"
    BELOW = "below_floor"
    NO_FLOOR = "no_floor"


class Acceptance(StrEnum):
    FIRST = "first_floor"
    RAISED = "raised"
    UNCHANGED = "unchanged"
    REFUSED = "refused_to_lower"


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    count: int
    of: int
    floor: Floor | None

    @property
    def passed(self) -> bool:
        return self.verdict is not Verdict.BELOW

    def line(self) -> str:
        today = f"{self.count}/{self.of}"
        if self.floor is None:
            return f"no floor for this vector space yet: {today} passes (--accept records it)"
        was = f"{self.floor.count}/{self.floor.of}"
        if self.floor.of != self.of:
            was += f" (set then of {self.floor.of} questions, now {self.of})"
        if self.verdict is Verdict.BELOW:
            return f"BELOW THE FLOOR: {today}, the floor is {was}"
        return f"at or above the floor: {today}, the floor is {was}"


def judge(floors: Mapping[str, Floor], space: SpaceIdentity, count: int, of: int) -> Judgement:
    """Today's `count` of `of` against the floor of `space`; other spaces' floors play no part."""
    floor = floors.get(space.key)
    if floor is None:
        return Judgement(Verdict.NO_FLOOR, count, of, None)
    return Judgement(Verdict.BELOW if count < floor.count else Verdict.AT_OR_ABOVE, count, of, floor)


def accept(
    floors: Mapping[str, Floor], space: SpaceIdentity, count: int, of: int, *, at: str
) -> tuple[dict[str, Floor], Acceptance]:
    """The floors after a person accepted today's count for `space`: raised to it, never lowered
    (a lower count is refused and the floors come back unchanged); other spaces untouched."""
    out = dict(floors)
    floor = floors.get(space.key)
    if floor is None:
        out[space.key] = Floor(count, of, space, at)
        return out, Acceptance.FIRST
    if count < floor.count:
        return out, Acceptance.REFUSED
    if count == floor.count:
        return out, Acceptance.UNCHANGED
    out[space.key] = Floor(count, of, space, at)
    return out, Acceptance.RAISED


class FloorFileError(Exception):
    """The floor file exists but cannot be read as one; a person must look at it."""


def read(path: Path) -> dict[str, Floor]:
    """The floors in `path`; none when the file does not exist."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise FloorFileError(f"{path}: cannot read the floor file: {exc}") from None
    floors: dict[str, Floor] = {}
    try:
        for key, entry in data["floors"].items():
            space = SpaceIdentity.of(entry)
            if space.key != key:
                raise ValueError(f"the entry {key!r} describes the space {space.key!r}")
            count, of = int(entry["count"]), int(entry["of"])
            if not 0 <= count <= of:
                raise ValueError(f"{key}: count {count} of {of} is not a count of the questions")
            floors[key] = Floor(count, of, space, str(entry.get("accepted_at", "")))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FloorFileError(f"{path}: not a floor file ({type(exc).__name__}: {exc})") from None
    return floors


def write(path: Path, floors: Mapping[str, Floor]) -> None:
    """Replace the floor file in one rename, so a reader never sees half of it."""
    body = {
        "measure": MEASURE,
        "note": "Written by `recalld eval --accept`, which only raises a floor; lower one only by hand, knowingly.",
        "floors": {
            key: {
                "provider": f.space.provider,
                "model": f.space.model,
                "dimension": f.space.dimension,
                "template_version": f.space.template_version,
                "count": f.count,
                "of": f.of,
                "accepted_at": f.accepted_at,
            }
            for key, f in sorted(floors.items())
        },
    }
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(body, indent=2) + "\n")
        os.chmod(temporary, 0o644)  # a file for the repository, read by whoever checks it out
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
