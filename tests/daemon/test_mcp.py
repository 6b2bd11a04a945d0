"""`recalld mcp` driven by the MCP SDK's own stdio client against a real daemon (issue 22 item 6):
the tools an agent sees, and remember, recall, check_duplicate and forget end to end."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.support import ROOT, Daemon

pytestmark = [pytest.mark.anyio]


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    if result.structured_content is not None:
        found: dict[str, Any] = result.structured_content
        return found.get("result", found) if set(found) == {"result"} else found
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


async def test_an_agent_remembers_recalls_and_forgets_through_mcp(daemon: Daemon, ns: str) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "daemon", "mcp", "-n", ns, "--socket", str(daemon.socket)],
        cwd=str(ROOT),
        env={k: v for k, v in os.environ.items() if k != "RECALLD_SOCKET"},
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert tools == {"recall", "remember", "forget", "check_duplicate"}

        kept = answer(await session.call_tool("remember", {"title": "Deploy window", "body": "Deploys on Tuesdays."}))
        assert kept["revision"] == 1
        again = answer(await session.call_tool("remember", {"title": "Deploy window", "body": "Deploys on Tuesdays."}))
        assert again["error"]["code"] == "exact_duplicate" and again["existing_id"] == kept["id"]
        check = answer(await session.call_tool("check_duplicate", {"title": "Deploy window"}))
        assert check["status"] in ("clear", "warned", "skipped")

        found = answer(await session.call_tool("recall", {"query": "when do we deploy", "k": 3}))
        assert [hit["id"] for hit in found["results"]][:1] == [kept["id"]]
        assert "Tuesdays" in found["results"][0]["snippet"] or found["results"][0]["title"] == "Deploy window"

        gone = answer(await session.call_tool("forget", {"id": kept["id"]}))
        assert gone["deleted"] is True
        bad = answer(await session.call_tool("forget", {"id": "nonsense"}))
        assert bad["error"]["code"] == "invalid_id"
    status, _ = daemon.call("GET", f"/v1/records/{kept['id']}")
    assert status == 404
