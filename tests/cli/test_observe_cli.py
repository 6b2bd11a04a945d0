"""`recalld observe`, run as the real command against a real daemon whose assignment ticks are an
hour apart, so what it reports is read back as observed and not yet assigned: one observation
from the command line, or a JSON-lines file sent in batches the route takes, where a bad line is
named by its number and nothing of a refused batch is claimed as stored."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.store.embedded import EmbeddedPostgres
from recalld.wire.assignments import MAX_OBSERVATIONS
from tests.support import RECALLD, ROOT, Daemon, create_database, scratch_dir
from tests.support.assignments import SLOW_TICKS, entity
from tests.support.cli import recalld
from tests.support.waits import eventually


@pytest.fixture(scope="module")
def daemon(postgres: EmbeddedPostgres) -> Iterator[Daemon]:
    """This module's daemon, its assignment ticks an hour apart."""
    home = scratch_dir("recalld-test-")
    instance = Daemon(home, {**SLOW_TICKS, "RECALLD_STORE_DSN": create_database(postgres)}).start()
    yield instance
    code = instance.stop()
    shutil.rmtree(home, ignore_errors=True)
    assert code == 0, f"daemon did not exit cleanly ({code})"


def waiting(daemon: Daemon, key: str) -> dict[str, list[dict[str, Any]]]:
    """characteristic -> candidates, of what `key` has observed and not assigned yet."""
    status, body = daemon.call("GET", f"/v1/assignments/{key}")
    if status == 404:
        return {}
    assert status == 200 and body["assignments"] == [], body
    return {u["characteristic"]: u["candidates"] for u in body["unassigned"]}


def lines(key: str, count: int) -> list[str]:
    return [
        json.dumps({"entity": key, "characteristic": f"c{i:05d}", "supplier": "acme", "value": str(i), "trust": 0.5})
        for i in range(count)
    ]


def test_one_observation_from_the_command_line(daemon: Daemon) -> None:
    key = entity()
    at = "2026-01-31T12:00:00Z"
    done = recalld(daemon, "observe", key, "voltage", "acme", "230 V", "--trust", "0.7", "--observed-at", at)
    assert (done.returncode, done.stdout) == (0, "accepted 1 observation, stored 1\n"), done.stderr
    assert waiting(daemon, key) == {
        "voltage": [{"value": "230 V", "trust": 0.7, "suppliers": ["acme"], "raws": ["230 V"]}]
    }
    older = recalld(daemon, "observe", key, "voltage", "acme", "220 V", "--observed-at", "2026-01-01T00:00:00+01:00")
    assert older.returncode == 0, older.stderr
    assert older.stdout.startswith("accepted 1 observation, stored 0 (")  # older than acme's stored one
    assert waiting(daemon, key)["voltage"][0]["value"] == "230 V"
    as_json = recalld(daemon, "observe", key, "colour", "acme", "red", "--json")
    assert (as_json.returncode, json.loads(as_json.stdout)) == (0, {"accepted": 1, "stored": 1}), as_json.stderr
    assert waiting(daemon, key)["colour"][0]["trust"] == 0.5, "the default trust"
    refused = recalld(daemon, "observe", key, "voltage", "acme", "1 V", "--trust", "1.5")
    assert refused.returncode == 1 and "invalid_value" in refused.stderr and "trust" in refused.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["kettle", "wattage", "acme"],
        ["kettle", "wattage", "acme", "1500 W", "--file", "-"],
        ["kettle", "wattage", "acme", "1500 W", "--observed-at", "yesterday"],
    ],
    ids=["nothing", "three of four", "both forms", "a bad time"],
)
def test_a_command_line_that_says_no_one_thing_is_a_usage_error(daemon: Daemon, args: list[str]) -> None:
    done = recalld(daemon, "observe", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "usage: recalld observe" in done.stderr
    assert waiting(daemon, "kettle") == {}, "nothing sent"


def test_a_file_is_sent_in_batches_the_route_takes(daemon: Daemon, tmp_path: Path) -> None:
    key = entity()
    count = 2 * MAX_OBSERVATIONS + 500  # one request of them all would be refused
    path = tmp_path / "observations.jsonl"
    path.write_text("\n".join(lines(key, count)[:10]) + "\n\n" + "\n".join(lines(key, count)[10:]) + "\n")
    done = recalld(daemon, "observe", "--file", str(path))
    assert (done.returncode, done.stdout) == (0, f"accepted {count} observations, stored {count}\n"), done.stderr
    assert len(waiting(daemon, key)) == count
    # stdin, as `-`
    other = entity()
    piped = recalld(daemon, "observe", "--file", "-", "--json", input="\n".join(lines(other, 3)))
    assert (piped.returncode, json.loads(piped.stdout)) == (0, {"accepted": 3, "stored": 3}), piped.stderr
    assert sorted(waiting(daemon, other)) == ["c00000", "c00001", "c00002"]


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("{not json", "JSON is malformed"),
        ('{"entity": "x", "characteristic": "c", "supplier": "s", "value": "1"}', "missing required field `trust`"),
        (
            '{"entity": "x", "characteristic": "c", "supplier": "s", "value": "1", "trust": 0.5, "colour": "red"}',
            "colour",
        ),
        ('{"entity": "x", "characteristic": "c", "supplier": "s", "value": "1", "trust": 1.5}', "trust must be"),
        (
            '{"entity": "x", "characteristic": "c", "supplier": "s", "value": "1", "trust": 0.5, "observed_at": "2026-01-01T00:00:00"}',
            "time zone",
        ),
    ],
    ids=["not JSON", "a field missing", "an unknown field", "refused by the daemon", "a time without zone"],
)
def test_a_bad_line_is_named_and_nothing_of_its_batch_is_claimed(
    daemon: Daemon, tmp_path: Path, bad: str, said: str
) -> None:
    key = entity()
    given = lines(key, MAX_OBSERVATIONS + 500)
    bad_line = MAX_OBSERVATIONS + 203  # in the second batch
    given[bad_line - 1] = bad
    path = tmp_path / "observations.jsonl"
    path.write_text("\n".join(given) + "\n")
    done = recalld(daemon, "observe", "--file", str(path))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"{path} line {bad_line}: " in done.stderr and said in done.stderr, done.stderr
    first = MAX_OBSERVATIONS + 1
    assert (
        f"lines before {first}: accepted {MAX_OBSERVATIONS}, stored {MAX_OBSERVATIONS}; nothing from line {first} on was stored"
        in done.stderr
    ), done.stderr
    assert done.stdout == ""
    assert len(waiting(daemon, key)) == MAX_OBSERVATIONS, "the first batch, and nothing after it"


def test_a_batch_that_gets_no_answer_is_not_claimed_either_way(make_daemon: Any) -> None:
    """The daemon goes away after the first batch: the second is said to be maybe stored, maybe not."""
    own = make_daemon(env=SLOW_TICKS)
    key = entity()
    given = lines(key, MAX_OBSERVATIONS + 500)
    env = {**os.environ, "RECALLD_SOCKET": str(own.socket)}
    feeding = subprocess.Popen(
        [*RECALLD, "observe", "--file", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert feeding.stdin is not None
    feeding.stdin.write("\n".join(given[:MAX_OBSERVATIONS]) + "\n")
    feeding.stdin.flush()
    eventually(lambda: len(waiting(own, key)) == MAX_OBSERVATIONS, 60, "the first batch stored")
    own.stop()
    out, err = feeding.communicate("\n".join(given[MAX_OBSERVATIONS:]) + "\n", timeout=120)
    assert feeding.returncode == 1, (out, err)
    first, last = MAX_OBSERVATIONS + 1, MAX_OBSERVATIONS + 500
    assert (
        f"lines before {first}: accepted {MAX_OBSERVATIONS}, stored {MAX_OBSERVATIONS}; lines {first} to {last} may"
        " or may not be stored" in err
    ), err
    assert "not reachable" in err and out == ""
