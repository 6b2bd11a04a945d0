"""The input limits of the socket API: each is a config key, and a request over one is refused
with a 4xx that names it, before any work is done: `invalid_value` (413 `payload_too_large` for
the body), the key in the message and `limit: {"name": "section.key", "value": n}` beside
`error` in the body.

Without them a recall with 500,000 `kinds` cost 1.7 s of CPU and a record with 300,000
attributes was stored; the body size (`[server] max_body_bytes`) caps the whole request, these
cap what a request of an allowed size may still ask for.
"""

from __future__ import annotations

from typing import Any

import msgspec

from recalld.config import Config
from recalld.wire.errors import ApiError, ErrorCode


def over_limit(what: str, got: int | None, key: str, value: int, *, status: int = 400) -> ApiError:
    """`got` of `what` (None: unknown, only more), above the limit `key` ("section.name") of `value`."""
    section, name = key.split(".", 1)
    return ApiError(
        status,
        ErrorCode.PAYLOAD_TOO_LARGE if status == 413 else ErrorCode.INVALID_VALUE,
        f"{what}: {'more' if got is None else got}, at most {value} ([{section}] {name})",
        limit={"name": key, "value": value},
    )


def count_values(value: Any) -> int:
    """Every value in a JSON tree, containers and nested ones included (the root excluded)."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            count += 1
            stack.append(child)
    return count


def check_attributes(field: str, attributes: dict[str, Any], config: Config) -> None:
    """A record's attributes or a recall's attribute filter: how many values, how many bytes."""
    limits = config.records
    if (values := count_values(attributes)) > limits.max_attributes:
        raise over_limit(f"values in {field}", values, "records.max_attributes", limits.max_attributes)
    if (size := len(msgspec.json.encode(attributes))) > limits.max_attributes_bytes:
        raise over_limit(f"bytes of {field} as JSON", size, "records.max_attributes_bytes", limits.max_attributes_bytes)


def check_query(query: str, kinds: list[str] | None, config: Config) -> None:
    limits = config.recall
    if len(query) > limits.max_query_chars:
        raise over_limit("characters in the query", len(query), "recall.max_query_chars", limits.max_query_chars)
    if kinds is not None and len(kinds) > limits.max_filter_kinds:
        raise over_limit("kinds in the filter", len(kinds), "recall.max_filter_kinds", limits.max_filter_kinds)
