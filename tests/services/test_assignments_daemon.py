"""Canonical assignments, disputes and moderation over a real daemon's socket (docs/DESIGN.md, "Canonical
assignments")."""

from __future__ import annotations

import json
import re
import threading
import uuid
from typing import Any

import msgspec

from recalld.wire.assignments import AssignmentsOut
from tests.support import Daemon, create_database
from tests.support.assignments import FAST, SLOW_TICKS, assignment, entity, tie
from tests.support.cli import recalld
from tests.support.fake_llm import ChatService, Reply, threaded_chat_server
from tests.support.other_users import as_user
from tests.support.waits import eventually


def test_with_the_resolver_off_disputes_wait_while_assignments_tick(make_daemon: Any) -> None:
    daemon = make_daemon(env={**FAST, "ASSIGNMENT_RESOLVER_ENABLED": "false"})
    key = entity()
    tie(daemon, key, "voltage", "230", "220")
    found = eventually(lambda: assignment(daemon, key, "voltage"), 60, "the tied voltage assigned")
    assert found["source"] == "auto:latest" and found["value"] == "220"
    assert found["dispute"]["state"] == "pending"
    # later observations keep being assigned; the dispute still waits for a resolver
    tie(daemon, key, "width", "1.2 m", "120 cm")
    assert (
        eventually(lambda: assignment(daemon, key, "width"), 60, "the width assigned")["source"]
        == "auto:trust_weighted"
    )
    status, body = daemon.call("GET", f"/admin/disputes/{found['dispute']['id']}")
    assert (status, body["state"]) == (200, "pending")
    status, ready = daemon.call("GET", "/readyz")
    assert ready["checks"]["resolver"] == {"status": "pass", "detail": {"state": "off"}}
    _, caps = daemon.call("GET", "/v1/capabilities")
    available = {c["name"]: c["available"] for c in caps["capabilities"]}
    assert (available["assignments.v1"], available["resolver.v1"]) == (True, False)
    # the CLI shows the same queue
    listed = recalld(daemon, "disputes", "list", "--state", "pending", "--json")
    assert listed.returncode == 0, listed.stderr
    assert found["dispute"]["id"] in {d["id"] for d in json.loads(listed.stdout)["disputes"]}
    shown = recalld(daemon, "assignments", key)
    assert "voltage = 220  auto:latest  [dispute pending]" in shown.stdout
    # force-resolve needs a value while the resolver is off
    status, body = daemon.call("POST", f"/admin/disputes/{found['dispute']['id']}/force-resolve")
    assert (status, body["error"]["code"]) == (409, "conflict")
    refused = recalld(daemon, "disputes", "force-resolve", found["dispute"]["id"])
    assert refused.returncode == 1 and "conflict" in refused.stderr
    done = recalld(daemon, "disputes", "force-resolve", found["dispute"]["id"], "--value", "230", "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["state"], body["decision"]) == ("resolved", "force")
    assert assignment(daemon, key, "voltage")["source"] == "manual"  # type: ignore[index]
    # a finished dispute is refused naming its state, whatever the resolver's
    status, body = daemon.call("POST", f"/admin/disputes/{found['dispute']['id']}/force-resolve")
    assert (status, body["error"]["code"], body["state"]) == (409, "dispute_closed", "resolved")
    tie(daemon, key, "colour", "red", "crimson")
    colour = eventually(lambda: assignment(daemon, key, "colour"), 60, "the colour assigned")["dispute"]["id"]
    assert daemon.call("DELETE", f"/admin/disputes/{colour}")[0] == 200
    status, body = daemon.call("POST", f"/admin/disputes/{colour}/force-resolve")
    assert (status, body["error"]["code"], body["state"]) == (409, "dispute_closed", "superseded")
    assert "superseded" in body["error"]["message"] and "resolver is off" not in body["error"]["message"]
    status, body = daemon.call("POST", f"/admin/moderation/{colour}/decide", {"action": "approve"})
    assert (status, body["error"]["code"], body["state"]) == (409, "dispute_closed", "superseded")


def test_moderation_decisions_apply_through_the_single_writer(make_daemon: Any) -> None:
    service = ChatService(
        {
            "colour": Reply(value="red", confidence=0.3),
            "finish": Reply(value="matte", confidence=0.2),
            "size": Reply(value="M", confidence=0.1),
            "shape": Reply(kind="garbage"),
        }
    )
    with threaded_chat_server(service) as url:
        daemon = make_daemon(
            env={
                **FAST,
                "RECALLD_RESOLVER_ENABLED": "true",
                "RECALLD_RESOLVER_URL": url,
                "RECALLD_RESOLVER_INTERVAL_S": "0.2",
            }
        )
        key = entity()
        for name, (a, b) in {
            "colour": ("red", "crimson"),
            "finish": ("matte", "gloss"),
            "size": ("M", "L"),
            "shape": ("round", "oval"),
        }.items():
            tie(daemon, key, name, a, b)

        def moderated() -> dict[str, str] | None:
            _, body = daemon.call("GET", "/admin/disputes?state=manual_review")
            mine = {d["characteristic"]: d for d in body["disputes"] if d["entity"] == key}
            return mine if len(mine) == 4 else None

        queue = eventually(moderated, 60, "the moderation queue")
        assert queue["colour"]["tier"] == "low" and queue["colour"]["selected_value"] == "red"
        assert queue["shape"]["reason"] == "unparseable_answer"
        decide = lambda name, body: daemon.call("POST", f"/admin/moderation/{queue[name]['id']}/decide", body)  # noqa: E731
        # approve: the resolver's answer, as auto:llm_resolved
        status, body = decide("colour", {"action": "approve"})
        assert (status, body["state"], body["decision"]) == (200, "resolved", "approve")
        assert assignment(daemon, key, "colour") | {"candidates": None} == {
            "characteristic": "colour",
            "value": "red",
            "source": "auto:llm_resolved",
            "candidates": None,
            "dispute": {"id": queue["colour"]["id"], "state": "resolved", "tier": "low"},
        }
        # a decided dispute cannot be decided again, and the answer says why
        status, body = decide("colour", {"action": "reject"})
        assert (status, body["error"]["code"], body["state"]) == (409, "dispute_closed", "resolved")
        status, body = decide("colour", {"action": "approve"})
        assert (status, body["error"]["code"], body["state"]) == (409, "dispute_closed", "resolved")
        assert "resolved" in body["error"]["message"]
        # override: the value given, as a manual assignment
        assert decide("finish", {"action": "override", "value": "satin"})[0] == 200
        assert assignment(daemon, key, "finish")["value"] == "satin"  # type: ignore[index]
        assert assignment(daemon, key, "finish")["source"] == "manual"  # type: ignore[index]
        # reject keeps the chain's value; escalate keeps the dispute in moderation
        before = assignment(daemon, key, "size")
        assert decide("size", {"action": "reject"})[1]["state"] == "resolved"
        assert assignment(daemon, key, "size")["value"] == before["value"]  # type: ignore[index]
        status, body = decide("shape", {"action": "approve"})  # nothing usable to approve
        assert (status, body["error"]["code"], body["state"]) == (409, "no_answer_to_approve", "manual_review")
        assert decide("shape", {"action": "escalate"})[1]["state"] == "manual_review"
        # bad decisions are 4xx, never half applied
        assert decide("shape", {"action": "override"})[1]["error"]["code"] == "invalid_value"
        assert decide("shape", {"action": "approve", "value": "x"})[1]["error"]["code"] == "invalid_value"
        assert decide("shape", {"action": "shrug"})[1]["error"]["code"] == "invalid_request"
        status, body = daemon.call("POST", f"/admin/moderation/{uuid.uuid4()}/decide", {"action": "reject"})
        assert (status, body["error"]["code"]) == (404, "not_found")
        status, body = daemon.call("POST", "/admin/moderation/nope/decide", {"action": "reject"})
        assert (status, body["error"]["code"]) == (400, "invalid_id")
        # supersede (DELETE): terminal
        status, body = daemon.call("DELETE", f"/admin/disputes/{queue['shape']['id']}")
        assert (status, body["state"]) == (200, "superseded")
        status, body = daemon.call("DELETE", f"/admin/disputes/{queue['shape']['id']}")
        assert (status, body["error"]["code"], body["state"]) == (409, "dispute_closed", "superseded")
        # the list filters and pages
        status, body = daemon.call("GET", "/admin/disputes?state=resolved&limit=1")
        assert status == 200 and len(body["disputes"]) == 1 and body["next"]
        status, body = daemon.call("GET", f"/admin/disputes?state=resolved&limit=1&after={body['next']}")
        assert status == 200 and len(body["disputes"]) == 1
        assert daemon.call("GET", "/admin/disputes?state=open")[0] == 400
        assert daemon.call("GET", "/admin/disputes?tier=low")[0] == 200
        metrics = daemon.call("GET", "/metrics")[1]
        assert 'recalld_resolver_llm_calls_total{outcome="ok"} 4.0' in metrics
        assert "recalld_disputes{state=" in metrics


def test_bad_observations_are_refused_whole(make_daemon: Any) -> None:
    daemon = make_daemon(env=FAST)
    key = entity()
    good = {"entity": key, "characteristic": "c", "supplier": "s", "value": "1", "trust": 0.5}
    for bad, code in [
        ({**good, "trust": 1.5}, "invalid_value"),
        ({**good, "trust": "high"}, "invalid_request"),
        ({**good, "entity": ""}, "invalid_value"),
        ({**good, "value": "a\u0000b"}, "invalid_value"),
        ({**good, "observed_at": "2026-01-01T00:00:00"}, "invalid_value"),
        ({**good, "observed_at": "yesterday"}, "invalid_request"),
        ({**good, "colour": "red"}, "invalid_request"),
        ({**good, "entity": "x" * 201}, "invalid_value"),
    ]:
        status, body = daemon.call("POST", "/v1/observations", {"observations": [good, bad]})
        assert (status, body["error"]["code"]) == (400, code), bad
    assert daemon.call("POST", "/v1/observations", {"observations": []})[0] == 400
    assert daemon.call("GET", f"/v1/assignments/{key}")[0] == 404  # nothing of the batches was written


def test_non_admin_peers_get_403_on_every_admin_route(make_daemon: Any) -> None:
    # uid 65534 may write and read every namespace, assignments included: still no admin
    daemon = make_daemon(env={**FAST, "RECALLD_ACCESS_WRITERS": '{"65534" = ["*"]}'})
    daemon.socket.parent.chmod(0o755)
    daemon.socket.chmod(0o666)
    some = uuid.uuid4()
    routes = [
        ("GET", "/admin/disputes"),
        ("GET", f"/admin/disputes/{some}"),
        ("DELETE", f"/admin/disputes/{some}"),
        ("POST", f"/admin/disputes/{some}/force-resolve"),
        ("POST", f"/admin/moderation/{some}/decide"),
    ]
    decision = {"action": "reject", "value": "x"}
    for method, target in routes:
        answer = as_user(daemon, 65534, method, target, decision if method == "POST" else None)
        assert answer["status"] == 403, (method, target, answer)
    # while the same peer may use the assignment routes its rights cover
    assert as_user(daemon, 65534, "GET", f"/v1/assignments/{entity()}")["status"] == 404


def test_two_daemons_on_one_database_never_run_a_resolver_tick_at_once(make_daemon: Any, postgres: Any) -> None:
    names = [f"c{i}" for i in range(6)]
    service = ChatService({name: Reply(value="a", confidence=0.9, delay_s=0.3) for name in names})
    with threaded_chat_server(service) as url:
        env = {
            **FAST,
            "RECALLD_STORE_DSN": create_database(postgres),
            "RECALLD_RESOLVER_ENABLED": "true",
            "RECALLD_RESOLVER_URL": url,
            "RECALLD_RESOLVER_INTERVAL_S": "0.1",
            "RECALLD_RESOLVER_BATCH": "1",
        }
        first, second = make_daemon(env=env), make_daemon(env=env)
        key = entity()
        for name in names:
            tie(first if name < "c3" else second, key, name, "a", "b")

        def all_resolved() -> bool:
            return all((assignment(second, key, name) or {}).get("source") == "auto:llm_resolved" for name in names)

        eventually(all_resolved, 60, "every dispute resolved")
    assert len(service.requests) == len(names)  # each dispute asked once
    assert service.most_in_flight == 1  # never two ticks at once, though both daemons tick every 0.1 s


def resolver_env(url: str) -> dict[str, str]:
    return {
        **FAST,
        "RECALLD_RESOLVER_ENABLED": "true",
        "RECALLD_RESOLVER_URL": url,
        "RECALLD_RESOLVER_INTERVAL_S": "0.2",
    }


def dispute(daemon: Daemon, dispute_id: str) -> dict[str, Any]:
    status, body = daemon.call("GET", f"/admin/disputes/{dispute_id}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def observe(daemon: Daemon, key: str, characteristic: str, supplier: str, value: str) -> None:
    observation = {"entity": key, "characteristic": characteristic, "supplier": supplier, "value": value, "trust": 0.5}
    assert daemon.call("POST", "/v1/observations", {"observations": [observation]})[0] == 202


def test_a_late_answer_never_overwrites_what_the_suppliers_settled_meanwhile(make_daemon: Any) -> None:
    gate = threading.Event()
    service = ChatService({"voltage": Reply(value="220", confidence=0.95)}, gates={"voltage": gate})
    with threaded_chat_server(service) as url:
        daemon = make_daemon(env=resolver_env(url))
        key = entity()
        tie(daemon, key, "voltage", "230", "220")
        eventually(lambda: service.requests, 60, "the resolver asking")  # the answer waits for the gate
        dispute_id = eventually(
            lambda: (assignment(daemon, key, "voltage") or {}).get("dispute", {}).get("id"),
            60,
            "the voltage dispute opened",
        )
        assert dispute(daemon, dispute_id)["state"] == "in_progress"
        status, body = daemon.call("POST", f"/admin/moderation/{dispute_id}/decide", {"action": "approve"})
        assert (status, body["error"]["code"], body["state"]) == (409, "dispute_in_progress", "in_progress")
        observe(daemon, key, "voltage", "globex", "230")  # globex corrects itself
        eventually(
            lambda: (assignment(daemon, key, "voltage") or {}).get("source") == "auto:trust_weighted",
            60,
            "the voltage assigned by trust",
        )
        gate.set()  # the answer "220" (confidence 0.95) arrives now
        late = eventually(
            lambda: (found := dispute(daemon, dispute_id))["state"] != "in_progress" and found,
            60,
            "the dispute no longer in progress",
        )
        assert service.answered == ["voltage"]
        assert (late["state"], late["reason"], late["selected_value"], late["tier"]) == (
            "superseded",
            "stale_answer",
            "220",
            "high",
        )
        # ticks after it leave the settled value: another key assigned means a tick ran
        tie(daemon, key, "width", "1.2 m", "120 cm")
        eventually(lambda: assignment(daemon, key, "width"), 60, "the width assigned")
        now = assignment(daemon, key, "voltage")
        assert now is not None and (now["value"], now["source"]) == ("230", "auto:trust_weighted")
    assert len(service.requests) == 1


def test_an_approve_applies_only_to_the_values_it_answered(make_daemon: Any) -> None:
    service = ChatService({"voltage": Reply(value="220", confidence=0.3), "colour": Reply(value="red", confidence=0.3)})
    with threaded_chat_server(service) as url:
        daemon = make_daemon(env=resolver_env(url))
        key = entity()
        tie(daemon, key, "voltage", "230", "220")
        tie(daemon, key, "colour", "red", "crimson")

        def moderated(characteristic: str) -> dict[str, Any] | None:
            found = assignment(daemon, key, characteristic) or {}
            return found if found.get("dispute", {}).get("state") == "manual_review" else None

        voltage = eventually(lambda: moderated("voltage"), 60, "the voltage under moderation")["dispute"]["id"]
        assert dispute(daemon, voltage)["selected_value"] == "220"
        # the values change while the dispute waits for a moderator: the answer is stale
        observe(daemon, key, "voltage", "globex", "230")
        eventually(
            lambda: (assignment(daemon, key, "voltage") or {}).get("source") == "auto:trust_weighted",
            60,
            "the voltage assigned by trust",
        )
        status, body = daemon.call("POST", f"/admin/moderation/{voltage}/decide", {"action": "approve"})
        assert (status, body["error"]["code"], body["state"]) == (409, "stale_answer", "superseded")
        assert (assignment(daemon, key, "voltage") or {})["value"] == "230"
        assert dispute(daemon, voltage)["reason"] == "stale_answer"
        # a dispute reopened on new values keeps nothing of its earlier answer to approve
        colour = eventually(lambda: moderated("colour"), 60, "the colour under moderation")["dispute"]["id"]
        assert daemon.call("POST", f"/admin/moderation/{colour}/decide", {"action": "reject"})[0] == 200
        service.script["colour"] = Reply(kind="http500")  # the new values' call fails: attempts run out
        observe(daemon, key, "colour", "acme", "scarlet")
        reopened = eventually(
            lambda: moderated("colour") and dispute(daemon, colour).get("reason") == "attempts_exhausted",
            60,
            "the colour reopened with its attempts exhausted",
        )
        assert reopened
        shown = dispute(daemon, colour)
        assert {"selected_value", "tier", "confidence", "decision"}.isdisjoint(shown)
        status, body = daemon.call("POST", f"/admin/moderation/{colour}/decide", {"action": "approve"})
        assert (status, body["error"]["code"], body["state"]) == (409, "no_answer_to_approve", "manual_review")
        assert (assignment(daemon, key, "colour") or {})["source"] == "auto:latest"


def test_an_observed_characteristic_shows_before_its_first_tick_with_when_that_tick_is(make_daemon: Any) -> None:
    daemon = make_daemon(env=SLOW_TICKS)
    key = entity()
    tie(daemon, key, "voltage", "230 V", "220 V")
    status, raw = daemon.call("GET", f"/v1/assignments/{key}")
    assert status == 200, raw
    assert raw["assignments"] == []  # no tick yet
    [waiting] = raw["unassigned"]
    assert waiting["characteristic"] == "voltage"
    assert sorted(waiting["candidates"], key=lambda c: c["value"]) == [
        {"value": "220 V", "trust": 0.5, "suppliers": ["globex"], "raws": ["220 V"]},
        {"value": "230 V", "trust": 0.5, "suppliers": ["acme"], "raws": ["230 V"]},
    ]
    assert 0 < raw["next_tick_in_s"] <= 3600
    # the answer is exactly its wire type: nothing the type lacks, nothing it names missing
    typed = msgspec.json.decode(json.dumps(raw), type=AssignmentsOut)
    assert msgspec.to_builtins(typed) == raw
    # once set by hand, it is assigned (before any tick) and no longer waiting
    assert daemon.call("PUT", f"/v1/assignments/{key}/voltage", {"value": "230 V"})[0] == 200
    status, raw = daemon.call("GET", f"/v1/assignments/{key}")
    assert [(a["characteristic"], a["value"], a["source"]) for a in raw["assignments"]] == [
        ("voltage", "230 V", "manual")
    ]
    assert raw["unassigned"] == []
    assert msgspec.to_builtins(msgspec.json.decode(json.dumps(raw), type=AssignmentsOut)) == raw
    assert daemon.call("GET", f"/v1/assignments/{entity()}")[0] == 404  # neither observed nor assigned


def test_the_assignments_command_says_what_waits_for_the_next_tick_and_when_it_is(make_daemon: Any) -> None:
    daemon = make_daemon(env=SLOW_TICKS)
    key = entity()
    tie(daemon, key, "voltage", "230 V", "220 V")
    assert daemon.call("PUT", f"/v1/assignments/{key}/colour", {"value": "red"})[0] == 200
    shown = recalld(daemon, "assignments", key)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "colour = red  manual"
    waiting = re.fullmatch(r"voltage: no canonical value yet; the next assignment tick is in (\d+) s", lines[1])
    assert waiting and 0 < int(waiting.group(1)) <= 3600 and len(lines) == 2, shown.stdout
    as_json = recalld(daemon, "assignments", key, "--json")
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert [u["characteristic"] for u in answer["unassigned"]] == ["voltage"] and answer["next_tick_in_s"] > 0
    missing = recalld(daemon, "assignments", entity())
    assert missing.returncode == 1 and "not_found" in missing.stderr
