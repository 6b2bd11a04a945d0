"""`GET /admin/roles`: which daemon of those sharing the database holds each role now (docs/OPERATIONS.md,
"Running a fleet"), for `recalld status`."""

from __future__ import annotations

import socket

from aiohttp import web

from recalld.control.context import SERVICES, ok, peer
from recalld.wire.service import Roles


async def roles(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    services.access.require_admin(peer(request))
    held = await services.roles.roles() if services.roles is not None else []
    return ok(Roles(host=socket.gethostname(), roles=held))


def install(app: web.Application) -> None:
    app.router.add_get("/admin/roles", roles)
