"""`recalld disputes decide` as the README and docs/OPERATIONS.md write it: `decide ID ACTION
[--value V]`, run as the real command against a real daemon (the resolver off, so a tie waits
as a pending dispute, which moderation may decide)."""

from __future__ import annotations

import json
from typing import Any

from tests.support.assignments import FAST, assignment, entity, tie
from tests.support.cli import recalld
from tests.support.waits import eventually


def test_decide_takes_the_dispute_id_then_the_action_as_the_docs_write_it(make_daemon: Any) -> None:
    daemon = make_daemon(env=FAST)
    key = entity()
    for characteristic in ("voltage", "colour"):
        tie(daemon, key, characteristic, "230 V", "220 V")
    voltage = eventually(lambda: assignment(daemon, key, "voltage"), 60, "the voltage tie assigned")["dispute"]["id"]
    colour = eventually(lambda: assignment(daemon, key, "colour"), 60, "the colour tie assigned")["dispute"]["id"]

    # the documented order: ID, then the action
    decided = recalld(daemon, "disputes", "decide", voltage, "override", "--value", "230 V", "--json")
    assert decided.returncode == 0, decided.stderr
    answer = json.loads(decided.stdout)
    assert (answer["id"], answer["state"], answer["decision"]) == (voltage, "resolved", "override")
    found = assignment(daemon, key, "voltage")
    assert found is not None and (found["value"], found["source"]) == ("230 V", "manual")

    # the order the parser once wanted (the action first) still means the same
    rejected = recalld(daemon, "disputes", "decide", "reject", colour, "--json")
    assert rejected.returncode == 0, rejected.stderr
    answer = json.loads(rejected.stdout)
    assert (answer["id"], answer["decision"]) == (colour, "reject")

    # neither word an action: a usage error naming the actions, nothing sent
    wrong = recalld(daemon, "disputes", "decide", voltage, "overide", "--value", "1 V")
    assert wrong.returncode == 2, (wrong.stdout, wrong.stderr)
    assert "approve, override, reject, escalate" in wrong.stderr
    found = assignment(daemon, key, "voltage")
    assert found is not None and found["value"] == "230 V"
