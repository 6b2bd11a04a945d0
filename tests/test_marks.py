"""What a test needs is a mark (tests/conftest.py): `pg` for the users of the PostgreSQL fixtures,
`process` for the users of the daemon fixtures, neither for a test that uses none."""

from __future__ import annotations

from typing import Any

import pytest


def marks(request: pytest.FixtureRequest) -> set[str]:
    return {name for name in ("pg", "process") if request.node.get_closest_marker(name) is not None}


def test_a_test_of_the_store_needs_postgresql(fresh_dsn: str, request: pytest.FixtureRequest) -> None:
    assert marks(request) == {"pg"}


def test_a_test_that_may_start_daemons_is_a_process_test(make_daemon: Any, request: pytest.FixtureRequest) -> None:
    assert marks(request) == {"pg", "process"}


def test_a_test_of_pure_code_needs_neither(request: pytest.FixtureRequest) -> None:
    assert marks(request) == set()
