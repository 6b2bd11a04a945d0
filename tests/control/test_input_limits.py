"""Every input limit is a config key, and a request over it is refused with a 4xx that names it,
before anything is written: body size, k, deadline, query length, kinds in a filter, attribute
count and size (of a record and of a filter)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from recalld.config import Config, RecallConfig, RecordsConfig
from recalld.control.limits import check_attributes, check_query, count_values
from recalld.wire.errors import ApiError
from tests.support import Daemon, namespace
from tests.support.snapshot import settled_snapshot, store_snapshot

COUNTS = [
    ({}, 0),
    ({"a": 1}, 1),
    ({"a": [1, 2, 3]}, 4),
    ({"a": {"b": {"c": None}}, "d": "x"}, 4),
    ({"a": [[], {}]}, 3),
]


@pytest.mark.parametrize(("attributes", "values"), COUNTS)
def test_count_values(attributes: dict[str, Any], values: int) -> None:
    assert count_values(attributes) == values


SMALL = Config(
    records=RecordsConfig(max_attributes=3, max_attributes_bytes=64),
    recall=RecallConfig(max_query_chars=10, max_filter_kinds=2),
)
REFUSED = [
    ("4 attribute values", lambda: check_attributes("attributes", {"a": [1, 2, 3]}, SMALL), "records.max_attributes"),
    ("65 bytes", lambda: check_attributes("attributes", {"a": "x" * 57}, SMALL), "records.max_attributes_bytes"),
    ("11 characters", lambda: check_query("q" * 11, None, SMALL), "recall.max_query_chars"),
    ("3 kinds", lambda: check_query("q", ["a", "b", "c"], SMALL), "recall.max_filter_kinds"),
]
ALLOWED = [
    lambda: check_attributes("attributes", {"a": [1, 2]}, SMALL),
    lambda: check_attributes("attributes", {"a": "x" * 56}, SMALL),
    lambda: check_query("q" * 10, ["a", "b"], SMALL),
]


@pytest.mark.parametrize(("case", "check", "key"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_request_over_a_limit_is_refused_naming_it(case: str, check: Any, key: str) -> None:
    with pytest.raises(ApiError) as refused:
        check()
    assert refused.value.status == 400 and refused.value.code == "invalid_value"
    assert refused.value.extra["limit"]["name"] == key
    section, name = key.split(".")
    assert f"[{section}] {name}" in refused.value.message


@pytest.mark.parametrize("check", ALLOWED)
def test_a_request_at_a_limit_is_allowed(check: Any) -> None:
    check()


def test_the_daemon_refuses_each_limit_by_name_and_writes_nothing(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(env={"RECALLD_SERVER_MAX_BODY_BYTES": str(1024 * 1024)})
    ns = namespace()
    dsn = daemon.env["RECALLD_STORE_DSN"]
    record = {"namespace": ns, "kind": "doc", "title": "t", "body": "b"}
    recall = {"namespace": ns, "query": "q"}
    cases = [
        ("POST", "/v1/records", {**record, "attributes": {f"a{i}": i for i in range(1001)}}, "records.max_attributes"),
        ("POST", "/v1/records", {**record, "attributes": {"a": "x" * 300_000}}, "records.max_attributes_bytes"),
        ("POST", "/v1/recall", {**recall, "kinds": [f"k{i}" for i in range(101)]}, "recall.max_filter_kinds"),
        ("POST", "/v1/recall", {**recall, "attributes": {f"a{i}": 1 for i in range(1001)}}, "records.max_attributes"),
        ("POST", "/v1/recall", {**recall, "query": "q" * 4097}, "recall.max_query_chars"),
        ("POST", "/v1/recall", {**recall, "k": 201}, "recall.max_k"),
        ("POST", "/v1/recall", {**recall, "deadline_ms": 60_001}, "recall.max_deadline_ms"),
        ("POST", "/v1/recall", {**recall, "kinds": ["k" * 65]}, "records.max_kind_chars"),
        ("POST", "/v1/records", {**record, "title": "t" * 1001}, "records.max_title_chars"),
        ("POST", "/v1/records", {**record, "namespace": "n" * 129}, "records.max_namespace_chars"),
        ("POST", "/v1/records", {**record, "kind": "k" * 65}, "records.max_kind_chars"),
        ("POST", "/v1/records", {**record, "body": "b" * 1_100_000}, "server.max_body_bytes"),
    ]
    before = settled_snapshot(dsn, quiet_s=0.2)
    for method, path, body, key in cases:
        status, answer = daemon.call(method, path, raw=json.dumps(body).encode())
        assert 400 <= status < 500 and answer["limit"]["name"] == key, (key, status, answer)
        assert key.split(".")[1] in answer["error"]["message"]
    after = store_snapshot(dsn)
    assert after == before, [table for table in after if after[table] != before.get(table)]


def test_the_limits_come_from_config(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(env={"RECALLD_RECALL_MAX_FILTER_KINDS": "2", "RECALLD_RECORDS_MAX_ATTRIBUTES": "1"})
    ns = namespace()
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "q", "kinds": ["a", "b", "c"]})
    assert status == 400 and answer["limit"] == {"name": "recall.max_filter_kinds", "value": 2}
    assert daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "q", "kinds": ["a", "b"]})[0] == 200
    record = {"namespace": ns, "kind": "doc", "title": "t", "body": "b", "attributes": {"a": 1, "b": 2}}
    status, answer = daemon.call("POST", "/v1/records", record)
    assert status == 400 and answer["limit"] == {"name": "records.max_attributes", "value": 1}
    assert msgspec.json.decode(msgspec.json.encode(answer))["error"]["code"] == "invalid_value"
