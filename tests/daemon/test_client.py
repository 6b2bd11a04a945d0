"""The Python client (daemon/client.py) against a real daemon: typed calls in the daemon's own
wire types, sync and async on both anyio backends (issue 22 item 5)."""

from __future__ import annotations

import uuid

import anyio
import pytest

from daemon.client import AsyncClient, Client, ClientError
from daemon.wire.duplicates import DuplicateCheck
from daemon.wire.recall import RecallResponse
from daemon.wire.records import RecordCreated, RecordOut
from tests.support import Daemon


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
    with Client(daemon.socket) as recalld, pytest.raises(ValueError):
        recalld.get_record("not-a-uuid")


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
