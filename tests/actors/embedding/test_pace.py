"""BulkPace: an indexing call carries what the provider lately took `target_s` for."""

from __future__ import annotations

import pytest

from recalld.actors.embedding.pace import BULK_LANE, CHECK_LANE, QUERY_LANE, BulkPace, lane_of

# (observed calls as (texts, seconds), target_s, max_batch, expected batch)
CASES = [
    ([], 0.5, 32, 1),  # nothing measured yet: one text measures
    ([(1, 0.05)], 0.5, 32, 10),
    ([(1, 0.01)], 0.5, 32, 32),  # never beyond max_batch
    ([(4, 4.0)], 0.5, 32, 1),  # a slow provider: never below one
    ([(10, 0.5), (10, 1.5)], 0.5, 32, 6),  # 0.05 then 0.15 s a text, smoothed: 0.08
    ([(10, 0.0)], 0.5, 32, 32),  # too fast to measure
    ([(0, 1.0), (5, float("nan"))], 0.5, 32, 1),  # nothing to learn from: still unmeasured
]


@pytest.mark.parametrize(("observed", "target_s", "max_batch", "expected"), CASES)
def test_batch_follows_the_providers_recent_speed(
    observed: list[tuple[int, float]], target_s: float, max_batch: int, expected: int
) -> None:
    pace = BulkPace(target_s, max_batch)
    for texts, seconds in observed:
        pace.observe(texts, seconds)
    assert pace.batch == expected


def test_lanes_put_queries_first_and_indexing_last() -> None:
    assert lane_of("query") == lane_of("probe") == QUERY_LANE
    assert lane_of("dedupe") == lane_of("eval") == CHECK_LANE
    assert lane_of("index") == BULK_LANE
    assert QUERY_LANE < CHECK_LANE < BULK_LANE


@pytest.mark.parametrize(("target_s", "max_batch", "smoothing"), [(0, 1, 0.3), (1, 0, 0.3), (1, 1, 0)])
def test_nonsense_settings_are_refused(target_s: float, max_batch: int, smoothing: float) -> None:
    with pytest.raises(ValueError):
        BulkPace(target_s, max_batch, smoothing=smoothing)
