"""Duplicate title pairs scored against a threshold: how many duplicates it catches and how many
distinct pairs it raises as false alarms, the threshold chosen on the tuned pairs only (most of
2 x caught - false alarms: a missed duplicate costs more than a false alarm, since the check only
warns) and then applied unchanged to the held-out pairs."""

from __future__ import annotations

from collections.abc import Callable

Row = dict[str, object]
"""One pair of tests/fixtures/duplicates/*.json: titles `a` and `b`, `duplicate`, `held_out`, `langs`."""
Figures = tuple[int, int, int, int]
"""(duplicates caught, duplicates, distinct pairs raised, distinct pairs)."""


def judged(rows: list[Row], score: Callable[[Row], float], threshold: float) -> tuple[int, int, int, int]:
    dups = [r for r in rows if r["duplicate"]]
    distinct = [r for r in rows if not r["duplicate"]]
    return (
        sum(score(r) >= threshold for r in dups),
        len(dups),
        sum(score(r) >= threshold for r in distinct),
        len(distinct),
    )


def figures(rows: list[Row], score: Callable[[Row], float]) -> dict[str, object]:
    tuned = [r for r in rows if not r["held_out"]]
    held = [r for r in rows if r["held_out"]]
    candidates = sorted({round(score(r), 3) for r in tuned})

    def weight(t: float) -> tuple[int, float]:
        caught, _, alarms, _ = judged(tuned, score, t)
        return 2 * caught - alarms, t

    chosen = max(candidates, key=weight)
    reaching = [t for t in candidates if judged(tuned, score, t)[0] >= 0.95 * judged(tuned, score, t)[1]]
    at95 = max(reaching) if reaching else None
    return {
        "threshold": chosen,
        "tuned": judged(tuned, score, chosen),
        "held_out": judged(held, score, chosen),
        "at95": None if at95 is None else (at95, judged(tuned, score, at95), judged(held, score, at95)),
    }


def cell(f: tuple[int, int, int, int]) -> str:
    return f"{f[0]}/{f[1]} caught, {f[2]}/{f[3]} false alarms"
