"""The ASSIGNMENT_RESOLVER_* variables as aliases of [resolver] (daemon/resolver_env.py)."""

from __future__ import annotations

import pytest

from recalld.config import ConfigError, build
from recalld.resolver_env import seconds


@pytest.mark.parametrize(
    ("text", "value"),
    [("15m", "900.0"), ("180s", "180.0"), ("1h30m", "5400.0"), ("500ms", "0.5"), ("42", "42.0"), ("soon", "soon")],
)
def test_durations(text: str, value: str) -> None:
    assert seconds(text) == value


def test_the_aliases_set_the_resolver() -> None:
    config = build(
        {},
        {
            "ASSIGNMENT_RESOLVER_ENABLED": "true",
            "RECALLD_RESOLVER_URL": "http://127.0.0.1:8081/v1",
            "ASSIGNMENT_RESOLVER_TICK_INTERVAL": "15m",
            "ASSIGNMENT_RESOLVER_MAX_LLM_ATTEMPTS": "2",
            "ASSIGNMENT_RESOLVER_LLM_MODEL": "qwen",
            "ASSIGNMENT_RESOLVER_LLM_TIMEOUT": "180s",
        },
    )
    r = config.resolver
    assert (r.enabled, r.interval_s, r.max_attempts, r.model, r.timeout_s) == (True, 900.0, 2, "qwen", 180.0)


def test_recalld_variables_win_and_both_win_over_the_file() -> None:
    document = {"resolver": {"enabled": True, "interval_s": 60.0}}
    config = build(
        document,
        {
            "ASSIGNMENT_RESOLVER_ENABLED": "false",
            "ASSIGNMENT_RESOLVER_TICK_INTERVAL": "2m",
            "RECALLD_RESOLVER_INTERVAL_S": "5",
        },
    )
    assert (config.resolver.enabled, config.resolver.interval_s) == (False, 5.0)


def test_a_bad_alias_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="interval_s"):
        build({}, {"ASSIGNMENT_RESOLVER_TICK_INTERVAL": "soon"})


@pytest.mark.parametrize("url", ["", "127.0.0.1:8080/v1", "ftp://x/v1"])
def test_an_enabled_resolver_needs_an_http_url(url: str) -> None:
    with pytest.raises(ConfigError, match=r"resolver\.url"):
        build({}, {"RECALLD_RESOLVER_ENABLED": "true", "RECALLD_RESOLVER_URL": url})
    assert not build({}, {"RECALLD_RESOLVER_URL": url}).resolver.enabled  # off: no URL needed
