"""`recalld mcp -n NAMESPACE`: the wiring; the server (and the `mcp` SDK) load only when run."""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path

from recalld.cli.output import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Output
from recalld.cli.parser import Subparsers
from recalld.paths import client_socket


def register(sub: Subparsers) -> None:
    mcp = sub.add_parser("mcp", help="serve a namespace as MCP tools over stdio, for AI agents")
    mcp.add_argument("--namespace", "-n", required=True)
    mcp.add_argument(
        "--config",
        help="the daemon's TOML config file, for its limits (default: $RECALLD_CONFIG, then built-in defaults)",
    )


def checkout_of(package: Path) -> Path | None:
    """The source checkout whose code runs (its root), or None for an installed package, from
    where the `daemon` package lies: in a checkout (run from it, or installed editable) its
    parent holds recalld's pyproject.toml; an installed package lies in site-packages, with no
    project file beside it."""
    root = package.parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    section = project.get("project")
    return root if isinstance(section, dict) and section.get("name") == "recalld" else None


def missing_sdk_hint(checkout: Path | None) -> str:
    """What to run for the MCP SDK: a checkout installs itself again, editable, with the extra;
    an installed package installs its extra by name."""
    if checkout is None:
        return "recalld: `recalld mcp` needs the MCP SDK: pip install 'recalld[mcp]'"
    return f"recalld: `recalld mcp` needs the MCP SDK: pip install -e '.[mcp]' in the checkout ({checkout})"


def max_k(args: argparse.Namespace) -> int:
    """The daemon's `recall.max_k`, asked of it (GET /v1/capabilities); while no daemon answers,
    its configuration's, read as `recalld serve` reads it (ConfigError when that cannot be read)."""
    from recalld.client import Client, ClientError

    try:
        with Client(client_socket(getattr(args, "socket", None))) as client:
            return client.capabilities().limits.max_k
    except (ConnectionError, ClientError):
        from recalld.config import load

        return load(args.config or os.environ.get("RECALLD_CONFIG") or None).recall.max_k


def run(args: argparse.Namespace, out: Output) -> int:
    """A server of its own on stdio, with a client of its own (`recalld.client.mcp`)."""
    from recalld.config import ConfigError

    try:
        limit = max_k(args)
    except ConfigError as exc:
        out.err(f"recalld: {exc}")
        return EXIT_USAGE
    try:
        from recalld.client.mcp import build
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        # the recalld package's folder: the checkout's daemon/, or site-packages/recalld
        out.err(missing_sdk_hint(checkout_of(Path(__file__).parents[1])))
        return EXIT_FAIL
    build(args.namespace, getattr(args, "socket", None), max_k=limit).run("stdio")
    return EXIT_OK
