"""`recalld mcp`: the daemon as long-term memory for AI agents, over the Model Context Protocol.

A stdio MCP server (the official `mcp` SDK) for one namespace, speaking to the daemon through
`recalld.client.AsyncClient`: an agent adds one line to its config (`recalld mcp -n NAMESPACE`)
and gets four tools, recall, remember, forget and check_duplicate. A refusal of the daemon is a
failed tool call as MCP has it (`isError: true`), its text the SDK's `Error executing tool
NAME: ` and the refusal as JSON: the stable `code`, the `message`, the HTTP `status` and, for an
exact duplicate, the `existing_id`. It is no crash of the server: the session goes on.

stderr is the host's log of the server: warnings and errors only, no line per call.

The namespace is a boundary: every tool acts inside it, and a record of another namespace is,
to these tools, a record that does not exist (the same answer as a made-up id).

A line on stdin that is not a JSON-RPC message is answered as JSON-RPC 2.0 says (-32700 for
what is not JSON, -32600 for JSON that is no message), and the session goes on.
"""

# No `from __future__ import annotations` here: the tools' parameter types carry k's bound, known
# only when `build` runs, and the SDK reads them with `inspect.signature(eval_str=True)`, which
# resolves strings in the module's globals, not in `build`'s scope.

import importlib.metadata
import json
import uuid
from types import TracebackType
from typing import Annotated, Any, Final, Protocol, Self

import anyio
import mcp_types
import msgspec
import pydantic
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import Field

from recalld.client import AsyncClient, ClientError
from recalld.wire.duplicates import DuplicateCheck
from recalld.wire.errors import ErrorCode

AGENT_K: Final = 5
"""recall's k when the agent names none (at most the daemon's `recall.max_k`): a few records
keep an agent's context small."""

LOG_LEVEL: Final = "WARNING"
"""The SDK logs each handled request, and httpx each request to the daemon, at INFO: on a
stdio server that is a line in the host's log per call, so only warnings and errors pass."""


def refusal_of(status: int, code: str, message: str, existing_id: uuid.UUID | None = None) -> ToolError:
    """A failure the tool saw coming, raised as the SDK's `ToolError`: the SDK answers it
    `isError: true`, the text its `Error executing tool NAME: ` and the refusal as one JSON
    object (the stable `code` first), and logs it at INFO only."""
    refused: dict[str, Any] = {"code": code, "message": message, "status": status}
    if existing_id is not None:
        refused["existing_id"] = str(existing_id)
    return ToolError(json.dumps(refused))


def _refused(exc: ClientError) -> ToolError:
    return refusal_of(exc.status, exc.code or "error", str(exc), exc.existing_id)


def _check(check: DuplicateCheck) -> dict[str, Any]:
    """The whole duplicate check, every field present: what was compared out of how many, the
    threshold, and for a skip why, so that "no warning" is never silent about a skip."""
    return {
        "status": check.status,
        "threshold": check.threshold,
        "compared": check.compared,
        "of": check.of,
        "similar": msgspec.to_builtins(check.similar),
        "reason": check.reason,
    }


# -- JSON-RPC 2.0 over stdio: what the SDK's transport cannot read is answered, not dropped


def refusal(error: pydantic.ValidationError) -> mcp_types.JSONRPCError:
    """JSON-RPC 2.0's answer to a line that is no JSON-RPC message (the SDK's validation error of
    it): -32700 when it is not JSON, else -32600, with the id the line carries when it carries a
    valid one (null otherwise, as for a parse error)."""
    problems = error.errors()
    if any(problem["type"] == "json_invalid" for problem in problems):
        data = mcp_types.ErrorData(code=mcp_types.PARSE_ERROR, message="Parse error: the line is not JSON")
        return mcp_types.JSONRPCError(jsonrpc="2.0", id=None, error=data)
    # A field missing from one of the message shapes (`method`, `result`, ...) is reported with
    # the whole object as its input: where the id is, if it was sent.
    sent = next((p["input"] for p in problems if len(p["loc"]) == 2 and isinstance(p["input"], dict)), None)
    found = sent.get("id") if sent is not None else None
    request_id = found if isinstance(found, str | int) and not isinstance(found, bool) else None
    message = "Invalid Request: not a JSON-RPC 2.0 request, notification or response"
    if not isinstance(sent, dict):
        message += " (one JSON object a line; batches are not part of MCP)"
    data = mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=message)
    return mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=data)


class _Frames(Protocol):
    async def receive(self) -> SessionMessage | Exception: ...
    async def aclose(self) -> None: ...


class _Replies(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


class AnsweredFrames:
    """The transport's incoming frames less those that are not JSON-RPC messages, each of which
    is answered on `replies` as it passes (`refusal`).

    The SDK's stdio transport hands such a line on as the validation error it raised, and its
    dispatcher logs and drops that: the client would wait for an answer that never comes. Here,
    between the transport and the server, is the one place that sees both the error and the
    way back to the client. Frames keep their order; the sender's context (`last_context`) is
    the transport's."""

    def __init__(self, frames: _Frames, replies: _Replies) -> None:
        self._frames = frames
        self._replies = replies

    @property
    def last_context(self) -> Any:
        return getattr(self._frames, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            frame = await self._frames.receive()
            if not isinstance(frame, pydantic.ValidationError):
                return frame
            await self._replies.send(SessionMessage(refusal(frame)))

    async def aclose(self) -> None:
        await self._frames.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()


class _Server(MCPServer):
    """The SDK's server, its stdio frames passed through `AnsweredFrames`."""

    async def run_stdio_async(self) -> None:
        async with stdio_server() as (frames, replies):
            server = self._lowlevel_server
            await server.run(AnsweredFrames(frames, replies), replies, server.create_initialization_options())


def build(namespace: str, socket: str | None = None, *, max_k: int) -> MCPServer:
    """The MCP server for `namespace` on the daemon at `socket` (None: as the CLI finds it);
    recall's k is declared, and checked, between 1 and `max_k` (the daemon's `recall.max_k`)."""
    server: MCPServer = _Server(
        name="recalld",
        version=importlib.metadata.version("recalld"),
        log_level=LOG_LEVEL,
        instructions=(
            f"Long-term memory (namespace {namespace!r}): call recall before answering from memory, "
            "remember what is worth keeping (check_duplicate first to avoid repeats), forget what is wrong."
        ),
    )
    client = AsyncClient(socket)
    Query = Annotated[str, Field(description="What to look for, in words or a question.")]
    K = Annotated[
        int,
        Field(
            ge=1,
            le=max_k,
            description=f"How many records at most, best first: 1 to {max_k} (the daemon's recall.max_k).",
        ),
    ]
    Title = Annotated[str, Field(description="The record's title: short, one line, what it is about.")]
    Body = Annotated[str, Field(description="The record's text: what to remember.")]
    Kind = Annotated[str, Field(description="The record's kind, a label to tell records apart (e.g. note, rule).")]
    RecordId = Annotated[str, Field(description="The record's id, as remember or recall gave it.")]
    default_k = min(AGENT_K, max_k)

    @server.tool(description="Find remembered records by meaning and by words; best first, with snippets.")
    async def recall(query: Query, k: K = default_k) -> dict[str, Any]:
        try:
            answer = await client.recall(namespace, query, k=k)
        except ClientError as exc:
            raise _refused(exc) from None
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
    async def remember(title: Title, body: Body, kind: Kind = "note") -> dict[str, Any]:
        try:
            created = await client.create_record(namespace, kind, title, body)
        except ClientError as exc:
            raise _refused(exc) from None
        return {"id": str(created.id), "revision": created.revision, "duplicate_check": _check(created.duplicate_check)}

    @server.tool(description="Forget a remembered record by its id: it is never recalled again.")
    async def forget(id: RecordId) -> dict[str, Any]:
        try:
            record_id = uuid.UUID(id)
        except ValueError:
            raise refusal_of(400, ErrorCode.INVALID_ID, f"{id!r} is not a record id") from None
        try:
            # the daemon forgets it only if it lives in this namespace; another's is not found
            answer: dict[str, Any] = await client.forget_record(record_id, namespace=namespace)
        except ClientError as exc:
            raise _refused(exc) from None
        return answer

    @server.tool(description="Before remembering: records whose titles are close to this one, if any.")
    async def check_duplicate(title: Title, kind: Kind = "note") -> dict[str, Any]:
        try:
            check = await client.check_duplicate(namespace, kind, title)
        except ClientError as exc:
            raise _refused(exc) from None
        return _check(check)

    return server
