"""The resolver's ASSIGNMENT_RESOLVER_* environment variables, read as aliases of `[resolver]`
keys (docs/DESIGN.md, "Canonical assignments"): ASSIGNMENT_RESOLVER_ENABLED=false switches the
resolver off without a new config file. Durations are Go-style ("15m", "180s", "1h30m") or plain seconds."""

from __future__ import annotations

import re
from collections.abc import Mapping

ALIASES = {
    "ASSIGNMENT_RESOLVER_ENABLED": "enabled",
    "ASSIGNMENT_RESOLVER_TICK_INTERVAL": "interval_s",
    "ASSIGNMENT_RESOLVER_MAX_LLM_ATTEMPTS": "max_attempts",
    "ASSIGNMENT_RESOLVER_LLM_MODEL": "model",
    "ASSIGNMENT_RESOLVER_LLM_TIMEOUT": "timeout_s",
}
_DURATIONS = frozenset({"interval_s", "timeout_s"})
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(text: str) -> str:
    """A Go duration ("15m", "1h30m", "180s", "500ms") or a number of seconds, as seconds; a
    string that is neither is returned as it is, for config validation to refuse by name."""
    text = text.strip()
    try:
        return repr(float(text))
    except ValueError:
        pass
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return text
    return repr(sum(float(n) * _UNIT_S[u] for n, u in parts))


def resolver_aliases(environ: Mapping[str, str]) -> dict[str, str]:
    """`[resolver]` keys set by the ASSIGNMENT_RESOLVER_* variables, as raw strings."""
    found: dict[str, str] = {}
    for name, key in ALIASES.items():
        if name in environ:
            raw = environ[name]
            found[key] = seconds(raw) if key in _DURATIONS else raw
    return found
