"""Tests marked `exclusive` run alone when the suite runs in several workers (pytest-xdist).

Most of the suite waits: on a daemon starting, on PostgreSQL, on a condition. Two workers keep
both cores busy through those waits. A few tests measure the machine itself, such as CPU time
per recall, or a deadline that only holds on an otherwise quiet machine. Those carry
`@pytest.mark.exclusive`, and no other worker runs a test while they run.

The workers share a readers-writer lock made of two files and `flock`. Every test holds the
`tests` lock shared; an exclusive test holds it alone. The `turnstile` lock stops the other
workers from taking the shared lock again and again while an exclusive test waits for it. It is
the classic turnstile: a writer holds it while it waits, and readers pass through it on the way
in. Without xdist nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import is_worker, remove_run_dir, share_run_dir

MARKER = "exclusive"

# Not RECALLD_*: the daemons the tests start refuse variables of theirs they do not know.
LOCK_DIR = "TESTS_EXCLUSIVE_LOCK_DIR"
"""The environment variable naming the run's lock files' directory: made by the controller
(pytest's first process), inherited by the workers it starts, removed at the end."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: no other test runs beside it when the suite runs in several workers")
    share_run_dir(config, LOCK_DIR, "recalld-test-locks-")


def pytest_unconfigure(config: pytest.Config) -> None:
    remove_run_dir(config, LOCK_DIR)


def _lock_dir(config: pytest.Config) -> Path | None:
    # Not an xdist worker: one test at a time anyway.
    return Path(os.environ[LOCK_DIR]) if is_worker(config) else None


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    directory = _lock_dir(item.config)
    if directory is None:
        yield
        return
    turnstile, tests = _open(directory / "turnstile"), _open(directory / "tests")
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if item.get_closest_marker(MARKER) is not None:
            fcntl.flock(tests, fcntl.LOCK_EX)
        else:
            fcntl.flock(tests, fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
    finally:
        os.close(tests)  # closing the descriptor releases its lock
        os.close(turnstile)
