"""`recalld mcp`: the daemon as long-term memory for AI agents, over the Model Context Protocol.

A stdio MCP server (the official `mcp` SDK) for one namespace, speaking to the daemon through
`daemon.client.AsyncClient`: an agent adds one line to its config (`recalld mcp -n NAMESPACE`)
and gets four tools, recall, remember, forget and check_duplicate. Refusals of the daemon come
back as the tool's answer (`error` with the daemon's code), not as a crash of the server.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from daemon.client import AsyncClient, ClientError


def _refused(exc: ClientError) -> dict[str, Any]:
    answer: dict[str, Any] = {"error": {"status": exc.status, "code": exc.code, "message": str(exc)}}
    if exc.existing_id is not None:
        answer["existing_id"] = str(exc.existing_id)
    return answer


def build(namespace: str, socket: str | None = None) -> MCPServer:
    """The MCP server for `namespace` on the daemon at `socket` (None: as the CLI finds it)."""
    server: MCPServer = MCPServer(
        name="recalld",
        instructions=(
            f"Long-term memory (namespace {namespace!r}): call recall before answering from memory, "
            "remember what is worth keeping (check_duplicate first to avoid repeats), forget what is wrong."
        ),
    )
    client = AsyncClient(socket)

    @server.tool(description="Find remembered records by meaning and by words; best first, with snippets.")
    async def recall(query: str, k: int = 5) -> dict[str, Any]:
        try:
            answer = await client.recall(namespace, query, k=k)
        except ClientError as exc:
            return _refused(exc)
        return {
            "results": [
                {
                    "id": str(hit.id),
                    "title": hit.title,
                    "kind": hit.kind,
                    "score": hit.score,
                    "snippet": (hit.snippet or "").replace("<b>", "").replace("</b>", ""),
                    "routes": hit.routes,
                    "source_path": hit.source_path,
                }
                for hit in answer.results
            ],
            "degraded_routes": [{"route": d.route, "reason": d.reason} for d in answer.degraded_routes],
            "search_id": str(answer.search_id),
        }

    @server.tool(description="Remember a record: a short title and its text. Says if the title already exists.")
    async def remember(title: str, body: str, kind: str = "note") -> dict[str, Any]:
        try:
            created = await client.create_record(namespace, kind, title, body)
        except ClientError as exc:
            return _refused(exc)
        check = created.duplicate_check
        return {
            "id": str(created.id),
            "revision": created.revision,
            "duplicate_check": {"status": check.status, "similar": check.similar},
        }

    @server.tool(description="Forget a remembered record by its id: it is never recalled again.")
    async def forget(id: str) -> dict[str, Any]:
        try:
            return await client.forget_record(id)
        except ClientError as exc:
            return _refused(exc)
        except ValueError:
            return {"error": {"status": 400, "code": "invalid_id", "message": f"{id!r} is not a record id"}}

    @server.tool(description="Before remembering: records whose titles are close to this one, if any.")
    async def check_duplicate(title: str, kind: str = "note") -> dict[str, Any]:
        try:
            check = await client.check_duplicate(namespace, kind, title)
        except ClientError as exc:
            return _refused(exc)
        return {"status": check.status, "similar": check.similar, "reason": check.reason}

    return server
