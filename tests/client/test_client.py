"""The Python client (daemon/client/__init__.py) against a real daemon: typed calls in the daemon's own
wire types, sync and async on both anyio backends."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import msgspec
import pytest

from recalld.client import AsyncClient, Client, ClientError
from recalld.wire.assignments import (
    AssignmentsOut,
    Dispute,
    DisputePage,
    ManualAssignment,
    ManualRemoved,
    ObservationIn,
    Observed,
)
from recalld.wire.duplicates import DuplicateCheck
from recalld.wire.recall import RecallResponse
from recalld.wire.records import RecordCreated, RecordOut
from tests.support import Daemon
from tests.support.assignments import FAST, SLOW_TICKS, entity
from tests.support.waits import eventually


def test_the_sync_client_writes_recalls_and_gives_feedback(daemon: Daemon, ns: str) -> None:
    with Client(daemon.socket) as recalld:
        created = recalld.create_record(ns, "rule", "Refund approvals", "Refunds above 500 EUR need two managers.")
        assert isinstance(created, RecordCreated) and created.revision == 1
        record = recalld.get_record(created.id)
        assert isinstance(record, RecordOut) and record.title == "Refund approvals"
        updated = recalld.update_record(created.id, ns, "rule", "Refund approvals", "Two managers, above 500 EUR.")
        assert updated.revision == 2 and updated.changed

        answer = recalld.recall(ns, "refunds two managers", k=3, routes=["fts"])
        assert isinstance(answer, RecallResponse) and [hit.id for hit in answer.results] == [created.id]
        assert recalld.feedback(answer.search_id, created.id, useful=True)
        assert recalld.list_records(ns)["records"][0]["id"] == str(created.id)
        check = recalld.check_duplicate(ns, "rule", "Refund approvals")
        assert isinstance(check, DuplicateCheck)
        assert "pending" in recalld.generations()
        assert isinstance(recalld.usage(ns), dict)

        with pytest.raises(ClientError) as refused:
            recalld.create_record(ns, "rule", "Refund approvals", "Two managers, above 500 EUR.")
        assert refused.value.status == 409 and refused.value.code == "exact_duplicate"
        assert refused.value.existing_id == created.id

        assert recalld.forget_record(created.id)["deleted"] is True
        with pytest.raises(ClientError) as missing:
            recalld.get_record(created.id)
        assert (missing.value.status, missing.value.code) == (404, "not_found")


def test_a_create_and_an_update_carry_every_field(daemon: Daemon, ns: str) -> None:
    chosen = uuid.uuid4()
    with Client(daemon.socket) as recalld:
        options = {"attributes": {"team": "ops"}, "source_path": "ops/disk.md", "id": chosen}
        created = recalld.create_record(ns, "runbook", "Disk full", "Rotate the logs.", **options)
        assert created.id == chosen
        record = recalld.get_record(chosen)
        assert (record.kind, record.attributes, record.source_path) == ("runbook", {"team": "ops"}, "ops/disk.md")
        recalld.update_record(chosen, ns, "howto", "Disk full", "Rotate the logs, then vacuum.", source_path="ops/d.md")
        record = recalld.get_record(chosen)
        assert (record.kind, record.body, record.attributes) == ("howto", "Rotate the logs, then vacuum.", {})
        assert record.source_path == "ops/d.md"


def test_without_a_path_both_clients_dial_the_socket_the_environment_names(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Client()`, as the README writes it: `$RECALLD_SOCKET`, and the error names what it dialled."""
    monkeypatch.setenv("RECALLD_SOCKET", str(daemon.socket))
    with Client() as recalld:
        assert recalld.socket_path == daemon.socket
        assert "pending" in recalld.generations()

    async def dial() -> dict[str, object]:
        async with AsyncClient() as recalld:
            return await recalld.generations()

    assert "pending" in anyio.run(dial)


def test_bad_arguments_fail_before_anything_is_sent(daemon: Daemon) -> None:
    with Client(daemon.socket) as recalld:
        for call in (recalld.get_record, recalld.forget_record):
            with pytest.raises(ValueError, match=r"'\.\./\.\./livez' is not a UUID"):
                call("../../livez")  # as a path segment it would be another route


def test_what_the_cli_asks_each_has_a_typed_method(daemon: Daemon, ns: str) -> None:
    """Records and recall in their wire types, holding the daemon's JSON exactly (what `--json`
    prints from them); the routes without a wire type answer their JSON."""
    with Client(daemon.socket) as recalld:
        created = recalld.create_record(ns, "rule", "Boiler service", "Every autumn, before the frost.")
        assert exactly(recalld.get_record(created.id), daemon.call("GET", f"/v1/records/{created.id}")[1])
        updated = recalld.update_record(created.id, ns, "rule", "Boiler service", "Every October.")
        assert (updated.revision, updated.changed, updated.duplicate_check) == (2, True, None)

        # no vector candidate is as similar as 1: full text alone answers
        answer = recalld.recall(ns, "boiler october", thresholds={"vector": 1.0})
        assert answer.fusion.thresholds == {"vector": 1.0}, answer.fusion
        assert [(hit.id, hit.routes) for hit in answer.results] == [(created.id, {"fts": 1})]
        raw = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "boiler october", "routes": ["fts"]})[1]
        again = recalld.recall(ns, "boiler october", routes=["fts"])
        assert exactly(msgspec.structs.replace(again, timings_ms=raw["timings_ms"], search_id=raw["search_id"]), raw)

        assert recalld.live() == {"status": "pass"}
        assert recalld.ready()["status"] in ("pass", "warn")
        audit = recalld.audit_duplicates(ns, kind="rule", limit=1)
        assert (audit["scanned"], audit["of"], audit["next"]) == (1, 1, None), audit
        assert recalld.evals(golden="never-run")["runs"] == []
        build_id = recalld.rebuild_generations()["build_id"]
        assert build_id in [build["id"] for build in recalld.generations()["builds"]]
        with pytest.raises(ClientError) as unknown:
            recalld.activate_generation("no/such generation")  # one path segment, whatever it holds
        assert (unknown.value.status, unknown.value.code) == (404, "not_found")


def test_no_daemon_is_a_connection_error(tmp_path: object) -> None:
    with Client(f"{tmp_path}/nobody.sock") as recalld, pytest.raises(ConnectionError, match="not reachable"):
        recalld.generations()


@pytest.mark.anyio
@pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)
async def test_the_async_client_on_both_backends(daemon: Daemon, ns: str) -> None:
    async with AsyncClient(daemon.socket) as recalld:
        created = await recalld.create_record(ns, "doc", "Pager rota", "One engineer carries the pager each week.")
        assert (await recalld.get_record(created.id)).body.startswith("One engineer")
        answer = await recalld.recall(ns, "who carries the pager", routes=["fts"])
        assert [hit.id for hit in answer.results] == [created.id]
        assert answer.fusion.name and isinstance(answer.search_id, uuid.UUID)
        with pytest.raises(ClientError) as refused:
            await recalld.create_record(ns, "doc", "Pager rota", "One engineer carries the pager each week.")
        assert refused.value.existing_id == created.id
        raw = await recalld.request("GET", "/livez")
        assert raw == {"status": "pass"}
        assert (await recalld.forget_record(created.id))["deleted"] is True


def exactly(typed: object, raw: object) -> bool:
    """Whether a typed answer holds the raw JSON of the same route exactly: no field the type
    lacks, none it names missing."""
    return bool(msgspec.to_builtins(typed) == raw)


def test_observations_assignments_and_disputes_in_their_wire_types(make_daemon: Any) -> None:
    daemon = make_daemon(env=FAST)  # ticks every 0.2 s, the resolver off: a tie waits as a pending dispute
    key = entity()
    with Client(daemon.socket) as recalld:
        observed = recalld.observe(
            [
                ObservationIn(entity=key, characteristic=name, supplier=supplier, value=value, trust=0.5)
                for name in ("voltage", "colour", "size")
                for supplier, value in (("acme", f"{name} a"), ("globex", f"{name} b"))
            ]
        )
        assert observed == Observed(accepted=6, stored=6)
        with pytest.raises(ValueError):
            recalld.observe([])  # refused here, nothing sent
        assigned = eventually(
            lambda: recalld.assignments(key), 60, "three assignments", accept=lambda found: len(found.assignments) == 3
        )
        assert isinstance(assigned, AssignmentsOut) and assigned.unassigned == []
        raw = daemon.call("GET", f"/v1/assignments/{key}")[1]
        assert exactly(msgspec.structs.replace(assigned, next_tick_in_s=raw["next_tick_in_s"]), raw)
        ids = {a.characteristic: a.dispute.id for a in assigned.assignments if a.dispute is not None}
        assert sorted(ids) == ["colour", "size", "voltage"]

        page = recalld.disputes(state="pending", limit=2)
        assert isinstance(page, DisputePage) and len(page.disputes) == 2 and page.next is not None
        assert exactly(page, daemon.call("GET", "/admin/disputes?state=pending&limit=2")[1])
        rest = recalld.disputes(state="pending", after=page.next)
        assert {d.id for d in page.disputes + rest.disputes} >= set(ids.values())
        voltage = recalld.dispute(ids["voltage"])
        assert isinstance(voltage, Dispute) and voltage.state == "pending" and len(voltage.candidates) == 2
        assert exactly(voltage, daemon.call("GET", f"/admin/disputes/{ids['voltage']}")[1])

        decided = recalld.decide(ids["voltage"], "override", value="voltage a")
        assert (decided.state, decided.decision) == ("resolved", "override")
        assert exactly(decided, daemon.call("GET", f"/admin/disputes/{ids['voltage']}")[1])
        assert recalld.decide(ids["colour"], "escalate").state == "manual_review"
        assert recalld.force_resolve(ids["colour"], value="colour b").decision == "force"
        assert recalld.supersede(ids["size"]).state == "superseded"
        with pytest.raises(ClientError) as closed:
            recalld.decide(ids["size"], "reject")
        assert (closed.value.status, closed.value.code, closed.value.body["state"]) == (
            409,
            "dispute_closed",
            "superseded",
        )
        with pytest.raises(ClientError) as bad:
            recalld.dispute("nope")  # the daemon checks ids
        assert (bad.value.status, bad.value.code) == (400, "invalid_id")

        manual = recalld.assign(key, "size", "M")
        assert manual == ManualAssignment(entity=key, characteristic="size", value="M", source="manual")
        assert {a.characteristic: a.value for a in recalld.assignments(key).assignments}["size"] == "M"
        assert recalld.unassign(key, "size") == ManualRemoved(entity=key, characteristic="size", deleted=True)
        with pytest.raises(ClientError) as gone:
            recalld.unassign(key, "size")
        assert gone.value.status == 404
        with pytest.raises(ClientError) as missing:
            recalld.assignments(entity())
        assert missing.value.status == 404


@pytest.fixture
def slow_ticks(make_daemon: Any) -> Daemon:
    """A daemon whose assignment ticks are an hour apart (started before the test's event loop)."""
    started: Daemon = make_daemon(env=SLOW_TICKS)
    return started


@pytest.mark.anyio
@pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)
async def test_the_async_client_observes_assigns_and_moderates(slow_ticks: Daemon) -> None:
    daemon, key = slow_ticks, entity()
    async with AsyncClient(daemon.socket) as recalld:
        observation = ObservationIn(entity=key, characteristic="voltage", supplier="acme", value="230 V", trust=0.5)
        assert await recalld.observe([observation]) == Observed(accepted=1, stored=1)
        waiting = await recalld.assignments(key)
        assert [u.characteristic for u in waiting.unassigned] == ["voltage"] and waiting.next_tick_in_s
        assert (await recalld.assign(key, "voltage", "230 V")).source == "manual"
        assert (await recalld.unassign(key, "voltage")).deleted
        assert (await recalld.disputes()).disputes == []
        for call in (
            recalld.dispute(uuid.uuid4()),
            recalld.force_resolve(uuid.uuid4()),
            recalld.supersede(uuid.uuid4()),
            recalld.decide(uuid.uuid4(), "reject"),
        ):
            with pytest.raises(ClientError) as missing:
                await call
            assert missing.value.status == 404
