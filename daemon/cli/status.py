"""`recalld status`: this daemon at a glance, for an operator of one daemon or of a fleet: ready or
not, the generation it serves and how far it lags, and who holds each role (docs/OPERATIONS.md,
"Running a fleet")."""

from __future__ import annotations

import argparse
from typing import Any

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client, ClientError


def register(sub: Subparsers) -> None:
    status = sub.add_parser("status", help="readiness, the generation served, and who holds each role")
    status.add_argument("--json", action="store_true", help="the daemon's three answers as one JSON object")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _status)


def _answer(call: Any) -> tuple[Any, ClientError | None]:
    try:
        return call(), None
    except ClientError as exc:
        return exc.body, exc


def _status(client: Client, args: argparse.Namespace, out: Output) -> int:
    ready, not_ready = _answer(client.ready)
    generations, no_index = _answer(client.generations)
    roles, refused = _answer(client.roles)
    code = EXIT_OK if not_ready is None else EXIT_FAIL
    if args.json:
        out.json({"ready": ready, "generations": generations, "roles": roles})
        return code
    state = ready.get("status", "fail") if isinstance(ready, dict) else "fail"
    verdict = {"pass": "ready", "warn": "ready, degraded"}.get(state, "not ready")
    host = roles.get("host") if refused is None else None
    out.print(shown(f"recalld{f' on {host}' if host else ''}: {verdict} ({state})"))
    if no_index is None:
        out.print(shown(_serving(generations)))
    else:
        out.print(f"vector index: {shown(str(no_index))}")
    if refused is not None:
        out.print(f"roles: {shown(str(refused))}")
        return code
    width = max(len(role["role"]) for role in roles["roles"])
    for role in roles["roles"]:
        out.print(shown(f"{role['role']:<{width}}  {_holder(role)}"))
    return code


def _serving(generations: dict[str, Any]) -> str:
    serving, lag = generations.get("serving") or {}, generations.get("lag") or {}
    served = serving.get("generation")
    line = f"serving {served} ({serving.get('files')})" if served else "serving no generation yet"
    if serving.get("building"):
        line += f", building a copy of {serving['building']}"
    behind = "behind the pointer" if lag.get("behind") else "up to date"
    seconds = lag.get("seconds")
    return f"{line}; {behind}" + (f", every vector stored over {seconds:.1f} s ago searchable" if seconds else "")


def _holder(role: dict[str, Any]) -> str:
    holder = role.get("holder")
    if role.get("here"):
        return "this daemon"
    if holder is None:
        return "free" if role["lock"] == "builder" else "free (held for one step at a time)"
    where = ", ".join(str(part) for part in (holder.get("client_addr"), f"pid {holder.get('pid')}") if part)
    return f"{holder.get('application_name') or 'another session'} ({where}) since {holder.get('since')}"
