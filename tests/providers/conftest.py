from __future__ import annotations

from collections.abc import Iterator

import pytest

from recalld.providers.local import LocalProvider


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalProvider]:
    """The real local model, loaded once for the whole session (about 0.3 s)."""
    provider = LocalProvider()
    provider.load()
    yield provider
