"""`recalld mcp` driven by the MCP SDK's own stdio client against a real daemon: the tools an
agent sees, remember, recall, check_duplicate and forget end to end, and how a refusal looks."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from recalld.config import RecallConfig
from tests.support import ROOT, Daemon, namespace

pytestmark = [pytest.mark.anyio]


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    if result.structured_content is not None:
        found: dict[str, Any] = result.structured_content
        return found.get("result", found) if set(found) == {"result"} else found
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def refused(result: Any) -> dict[str, Any]:
    """A failed tool call as MCP hosts read it: `isError` set, the daemon's refusal (its stable
    `code`, `message`, HTTP `status`) as JSON in the text, after the SDK's words."""
    assert result.is_error, result
    assert result.structured_content is None, result
    said, brace, refusal = result.content[0].text.partition("{")
    assert said.startswith("Error executing tool "), said
    data: dict[str, Any] = json.loads(brace + refusal)
    assert {"code", "message", "status"} <= set(data), data
    return data


def mcp_server(daemon: Daemon, ns: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """`recalld mcp -n ns` for `daemon`, as an agent's config starts it."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "recalld", "mcp", "-n", ns, "--socket", str(daemon.socket)],
        cwd=str(ROOT),
        env={k: v for k, v in os.environ.items() if k != "RECALLD_SOCKET"} | (env or {}),
    )


async def test_an_agent_remembers_recalls_and_forgets_through_mcp(daemon: Daemon, ns: str) -> None:
    async with stdio_client(mcp_server(daemon, ns)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert tools == {"recall", "remember", "forget", "check_duplicate"}

        kept = answer(await session.call_tool("remember", {"title": "Deploy window", "body": "Deploys on Tuesdays."}))
        assert kept["revision"] == 1
        again = refused(await session.call_tool("remember", {"title": "Deploy window", "body": "Deploys on Tuesdays."}))
        assert again["code"] == "exact_duplicate" and again["existing_id"] == kept["id"], again
        check = answer(await session.call_tool("check_duplicate", {"title": "Deploy window"}))
        assert check["status"] in ("clear", "warned", "skipped")

        found = answer(await session.call_tool("recall", {"query": "when do we deploy", "k": 3}))
        assert [hit["id"] for hit in found["results"]][:1] == [kept["id"]]
        assert "Tuesdays" in found["results"][0]["snippet"] or found["results"][0]["title"] == "Deploy window"

        gone = answer(await session.call_tool("forget", {"id": kept["id"]}))
        assert gone["deleted"] is True
        bad = refused(await session.call_tool("forget", {"id": "nonsense"}))
        assert bad["code"] == "invalid_id", bad
    status, _ = daemon.call("GET", f"/v1/records/{kept['id']}")
    assert status == 404


async def test_remember_answers_the_whole_duplicate_check(daemon: Daemon, ns: str) -> None:
    """The agent sees what the daemon said of its title: the threshold, how many titles were
    compared out of how many, and for a skip why; not the status alone."""
    async with stdio_client(mcp_server(daemon, ns)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        kept = answer(await session.call_tool("remember", {"title": "Rotate the signing keys", "body": "Yearly."}))
        second = answer(
            await session.call_tool("remember", {"title": "Page the on-call engineer", "body": "By phone."})
        )
        dry = answer(await session.call_tool("check_duplicate", {"title": "Rotate the signing keys"}))
    status, direct = daemon.call(
        "POST", "/v1/duplicates/check", {"namespace": ns, "kind": "note", "title": "Rotate the signing keys"}
    )
    assert status == 200, direct
    fields = {"status", "threshold", "compared", "of", "similar", "reason"}
    for check in (kept["duplicate_check"], second["duplicate_check"], dry):
        assert set(check) == fields, check
        assert check["threshold"] == direct["threshold"]
    assert (kept["duplicate_check"]["compared"], kept["duplicate_check"]["of"]) == (0, 0)
    assert second["duplicate_check"]["of"] == 1, second
    assert dry["of"] == direct["of"] >= 1 and 0 <= dry["compared"] <= dry["of"], dry
    assert isinstance(dry["similar"], list) and dry["reason"] is None


@pytest.fixture
def without_provider(make_daemon: Any) -> Daemon:
    """A daemon with no embedding provider: every duplicate check is skipped, for a reason."""
    daemon: Daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none"})
    return daemon


async def test_a_skipped_check_says_why_through_mcp(without_provider: Daemon, ns: str) -> None:
    async with stdio_client(mcp_server(without_provider, ns)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        kept = answer(await session.call_tool("remember", {"title": "Deploy window", "body": "Tuesdays."}))
    check = kept["duplicate_check"]
    assert check["status"] == "skipped" and check["reason"], check
    assert {"threshold", "compared", "of"} <= set(check), check


async def test_an_mcp_server_acts_inside_its_namespace_only(daemon: Daemon) -> None:
    """`recalld mcp -n public` is handed one namespace: a record of another is, to its tools, a
    record that does not exist (the same answer as a made-up id, so nothing leaks), and stays."""
    public, secret = namespace(), namespace()
    status, theirs = daemon.call(
        "POST", "/v1/records", {"namespace": secret, "kind": "note", "title": "Deploy window", "body": "Tuesdays."}
    )
    assert status == 201, theirs
    async with stdio_client(mcp_server(daemon, public)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        ours = answer(await session.call_tool("remember", {"title": "Deploy window", "body": "Fridays, never."}))
        foreign = refused(await session.call_tool("forget", {"id": theirs["id"]}))
        made_up = refused(await session.call_tool("forget", {"id": str(uuid.uuid4())}))
        found = answer(await session.call_tool("recall", {"query": "deploy window", "k": 5}))
        gone = answer(await session.call_tool("forget", {"id": ours["id"]}))
    assert ours["revision"] == 1, "the same title in another namespace is no duplicate"
    assert foreign["code"] == "not_found", foreign
    assert foreign == made_up, "a foreign id answers as one that does not exist"
    assert [hit["id"] for hit in found["results"]] == [ours["id"]]
    assert gone["deleted"] is True
    status, kept = daemon.call("GET", f"/v1/records/{theirs['id']}")
    assert status == 200 and kept["namespace"] == secret, "the other namespace's record is untouched"
    assert daemon.call("GET", f"/v1/records/{ours['id']}")[0] == 404


async def test_a_refused_call_is_a_tool_error_carrying_the_daemons_code(daemon: Daemon, ns: str) -> None:
    """Hosts tell a failed tool call by `isError`: each refusal of the daemon (bad input, an
    unknown id) and each input the server itself refuses comes back with it set and the stable
    code in the content; the session goes on serving."""
    too_long = "x" * (RecallConfig().max_query_chars + 1)
    async with stdio_client(mcp_server(daemon, ns)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        long_query = refused(await session.call_tool("recall", {"query": too_long}))
        unknown = refused(await session.call_tool("forget", {"id": str(uuid.uuid4())}))
        malformed = refused(await session.call_tool("forget", {"id": "nonsense"}))
        still = answer(await session.call_tool("recall", {"query": "anything"}))
    assert (long_query["status"], long_query["code"]) == (400, "invalid_value"), long_query
    assert "max_query_chars" in long_query["message"], long_query
    assert (unknown["status"], unknown["code"]) == (404, "not_found"), unknown
    assert (malformed["status"], malformed["code"]) == (400, "invalid_id"), malformed
    assert still["results"] == [], still


async def test_calls_leave_no_line_on_stderr(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    """stderr is the host's log of the server: calls, answered or refused, write nothing there
    (no line per HTTP request to the daemon, no line per handled request)."""
    with (tmp_path / "stderr").open("w+") as errlog:
        async with (
            stdio_client(mcp_server(daemon, ns), errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            kept = answer(await session.call_tool("remember", {"title": "Quiet server", "body": "No noise."}))
            answer(await session.call_tool("check_duplicate", {"title": "Quiet server"}))
            for _ in range(3):
                answer(await session.call_tool("recall", {"query": "quiet", "k": 2}))
            refused(await session.call_tool("forget", {"id": str(uuid.uuid4())}))
            answer(await session.call_tool("forget", {"id": kept["id"]}))
        errlog.seek(0)
        written = errlog.read()
    assert written == "", written


async def test_the_server_names_recallds_version(daemon: Daemon, ns: str) -> None:
    async with stdio_client(mcp_server(daemon, ns)) as (read, write), ClientSession(read, write) as session:
        started = await session.initialize()
    assert started.server_info.name == "recalld"
    assert started.server_info.version == importlib.metadata.version("recalld"), started.server_info


async def test_every_parameter_is_described_and_k_bounded_as_the_daemon_accepts(daemon: Daemon, ns: str) -> None:
    async with stdio_client(mcp_server(daemon, ns)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name: tool.input_schema for tool in (await session.list_tools()).tools}
    for name, schema in tools.items():
        for parameter, spec in schema["properties"].items():
            assert spec.get("description"), (name, parameter, spec)
    k = tools["recall"]["properties"]["k"]
    assert (k["minimum"], k["maximum"]) == (1, RecallConfig().max_k), k
    assert str(RecallConfig().max_k) in k["description"], k


@pytest.fixture
def narrow_k(make_daemon: Any) -> Daemon:
    """A daemon whose `recall.max_k` is set, by environment, below the default."""
    daemon: Daemon = make_daemon(env={"RECALLD_RECALL_MAX_K": "12"})
    return daemon


async def test_k_is_bounded_by_the_configured_max_k(narrow_k: Daemon, ns: str) -> None:
    """`recalld mcp` started with the daemon's configuration declares the daemon's `recall.max_k`,
    and refuses a k above it as a failed call."""
    server = mcp_server(narrow_k, ns, env={"RECALLD_RECALL_MAX_K": "12"})
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name: tool.input_schema for tool in (await session.list_tools()).tools}
        within = answer(await session.call_tool("recall", {"query": "anything", "k": 12}))
        over = await session.call_tool("recall", {"query": "anything", "k": 13})
    k = tools["recall"]["properties"]["k"]
    assert (k["minimum"], k["maximum"]) == (1, 12), k
    assert within["results"] == [], within
    assert over.is_error, over


# -- JSON-RPC 2.0 over stdio, byte by byte (the SDK's client cannot send what is malformed)


async def _reply(stdout: Any, buffered: bytearray) -> dict[str, Any]:
    """The next line the server writes, as JSON."""
    while b"\n" not in buffered:
        buffered.extend(await stdout.receive())
    line, _, rest = bytes(buffered).partition(b"\n")
    buffered[:] = rest
    found: dict[str, Any] = json.loads(line)
    return found


@pytest.mark.parametrize(
    ("sent", "code", "reply_id"),
    [
        (b"{not json", -32700, None),
        (b"[]", -32600, None),
        (b'"a string"', -32600, None),
        (b'{"jsonrpc": "2.0", "id": 7}', -32600, 7),
        (b'{"jsonrpc": "2.0", "id": "x-1", "method": 12}', -32600, "x-1"),
        (b'{"id": 8, "method": "ping"}', -32600, 8),
    ],
)
async def test_malformed_json_rpc_is_answered_with_its_error(
    daemon: Daemon, sent: bytes, code: int, reply_id: Any
) -> None:
    """JSON-RPC 2.0: what is not JSON is a parse error (-32700), JSON that is no request an
    invalid request (-32600), each answered with the request's id where one can be read (null
    otherwise); the server then goes on serving."""
    command = [sys.executable, "-m", "recalld", "mcp", "-n", namespace(), "--socket", str(daemon.socket)]
    env = {k: v for k, v in os.environ.items() if k != "RECALLD_SOCKET"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    async with await anyio.open_process(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL) as process:
        assert process.stdin is not None and process.stdout is not None
        buffered = bytearray()
        with anyio.fail_after(30):
            await process.stdin.send(sent + b"\n")
            refused = await _reply(process.stdout, buffered)
            await process.stdin.send(json.dumps(initialize).encode() + b"\n")
            served = await _reply(process.stdout, buffered)
        process.kill()
    assert refused["jsonrpc"] == "2.0" and refused["id"] == reply_id, refused
    assert refused["error"]["code"] == code, refused
    assert served["id"] == 1 and served["result"]["serverInfo"]["name"] == "recalld", served
