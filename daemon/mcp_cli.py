"""`recalld mcp -n NAMESPACE`: the wiring; the server (and the `mcp` SDK) load only when run."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser("mcp", help="serve a namespace as MCP tools over stdio, for AI agents")
    mcp.add_argument("--namespace", "-n", required=True)


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from daemon.mcp_server import build
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        print("recalld: `recalld mcp` needs the MCP SDK: pip install 'recalld[mcp]'", file=sys.stderr)
        return 1
    build(args.namespace, getattr(args, "socket", None)).run("stdio")
    return 0
