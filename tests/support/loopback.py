"""A real aiohttp server on 127.0.0.1 (port 0) for the fake services tests talk to over the wire
(the embedding service, the chat server): asyncio only."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


@asynccontextmanager
async def loopback_server(posts: Mapping[str, Handler]) -> AsyncIterator[str]:
    """Serve `posts` (path -> handler of POSTs to it); yields the base URL, no path."""
    from aiohttp import web

    app = web.Application()
    for path, handler in posts.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
