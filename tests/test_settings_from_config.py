"""The actors' settings and the config sections that set them cannot drift apart: each field of a
section is read into the settings (or is declared not a setting, and why), and a default config
builds exactly the settings' own defaults, which the sections take rather than restate."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from recalld.actors.embedding.settings import EmbedderSettings
from recalld.actors.index.settings import IndexSettings
from recalld.config import EmbeddingConfig, IndexConfig

ROOT = Path("/generations")


class Reading:
    """A config section that remembers which of its fields were read."""

    def __init__(self, section: msgspec.Struct) -> None:
        self._section = section
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self._section, name)


Make = Callable[[Any], object]

CASES: list[tuple[type[msgspec.Struct], Make, object, set[str]]] = [
    (
        EmbeddingConfig,
        EmbedderSettings.from_config,
        EmbedderSettings(),
        # which provider to make and how to reach it: daemon/providers reads them, not the embedder
        {"provider", "url", "model", "api_key"},
    ),
    (
        IndexConfig,
        lambda config: IndexSettings.from_config(config, root=ROOT),
        IndexSettings(root=ROOT),
        # with the data directory, it becomes `root`, which the daemon passes in
        {"directory"},
    ),
]
IDS = [section.__name__ for section, *_ in CASES]


@pytest.mark.parametrize(("section", "make", "defaults", "not_settings"), CASES, ids=IDS)
def test_every_field_of_a_section_is_read_into_the_settings(
    section: type[msgspec.Struct], make: Make, defaults: object, not_settings: set[str]
) -> None:
    reading = Reading(section())
    make(reading)
    assert reading.read == set(section.__struct_fields__) - not_settings


@pytest.mark.parametrize(("section", "make", "defaults", "not_settings"), CASES, ids=IDS)
def test_a_default_section_builds_the_settings_defaults(
    section: type[msgspec.Struct], make: Make, defaults: object, not_settings: set[str]
) -> None:
    assert make(section()) == defaults


@pytest.mark.parametrize(
    ("section", "field", "value", "setting", "expected"),
    [
        (EmbeddingConfig, "max_wait_ms", 250.0, "max_wait_s", 0.25),
        (EmbeddingConfig, "template_version", 2, "template_version", 2),
        (IndexConfig, "chunk_chars", 2000, "chunk_chars", 2000),
        (IndexConfig, "hold_s", 30.0, "hold_s", 30.0),
        (IndexConfig, "hnsw_ef_search", 64, "hnsw_ef_search", 64),
    ],
)
def test_a_configured_value_reaches_its_setting(
    section: type[msgspec.Struct], field: str, value: object, setting: str, expected: object
) -> None:
    make = next(make for s, make, *_ in CASES if s is section)
    assert getattr(make(section(**{field: value})), setting) == expected
