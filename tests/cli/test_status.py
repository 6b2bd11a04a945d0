"""`recalld status` and `GET /admin/roles`: who holds each role of those sharing the database."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from recalld.actors.assignments.resolver import LOCK as RESOLVER_LOCK
from recalld.store.roles import lock_key
from tests.support import Daemon
from tests.support.cli import recalld
from tests.support.waits import eventually


def roles(daemon: Daemon) -> dict[str, dict[str, Any]]:
    status, answer = daemon.call("GET", "/admin/roles")
    assert status == 200, answer
    return {role["role"]: role for role in answer["roles"]}


def test_status_names_this_daemon_and_another_members_session_as_holders(daemon: Daemon) -> None:
    eventually(lambda: roles(daemon)["builder"]["here"], 30, "this daemon holds the builder lock")

    async def while_another_member_holds_the_resolver_role() -> tuple[int, str, dict[str, dict[str, Any]]]:
        # the resolver is off on this daemon: nobody else takes its lock
        other = await asyncpg.connect(
            daemon.env["RECALLD_STORE_DSN"], server_settings={"application_name": "recalld other-host"}
        )
        try:
            assert await other.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(RESOLVER_LOCK))
            shown = await asyncio.to_thread(recalld, daemon, "status", check=True)
            return other.get_server_pid(), shown.stdout, await asyncio.to_thread(roles, daemon)
        finally:
            await other.close()

    pid, printed, held = asyncio.run(while_another_member_holds_the_resolver_role())
    assert held["builder"]["here"] and held["builder"]["holder"]["application_name"].startswith("recalld builder ")
    resolver = held["resolver ticker"]
    assert not resolver["here"] and resolver["lock"] == RESOLVER_LOCK
    assert (resolver["holder"]["application_name"], resolver["holder"]["pid"]) == ("recalld other-host", pid)
    lines = {line.split("  ")[0].strip(): line for line in printed.splitlines()}
    assert lines["builder"].endswith("this daemon"), printed
    assert f"recalld other-host (pid {pid})" in lines["resolver ticker"], printed
    assert printed.splitlines()[0].startswith("recalld on ") and "ready" in printed.splitlines()[0], printed
    # once that session ends, the role is free again
    assert roles(daemon)["resolver ticker"]["holder"] is None
