"""Default locations, following systemd's and XDG's conventions (one place for both daemon and CLI)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SOCKET_NAME = "recalld.sock"


def default_socket(environ: Mapping[str, str] = os.environ) -> Path:
    """`$RUNTIME_DIRECTORY` under systemd, else the per-user runtime dir, else /run or /tmp."""
    if environ.get("RUNTIME_DIRECTORY"):
        return Path(environ["RUNTIME_DIRECTORY"].split(":")[0]) / SOCKET_NAME
    if environ.get("XDG_RUNTIME_DIR"):
        return Path(environ["XDG_RUNTIME_DIR"]) / "recalld" / SOCKET_NAME
    if os.geteuid() == 0:
        return Path("/run/recalld") / SOCKET_NAME
    return Path(f"/tmp/recalld-{os.geteuid()}") / SOCKET_NAME


def default_data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`$STATE_DIRECTORY` under systemd, else `$XDG_STATE_HOME/recalld`, /var/lib/recalld for root."""
    if environ.get("STATE_DIRECTORY"):
        return Path(environ["STATE_DIRECTORY"].split(":")[0])
    if environ.get("XDG_STATE_HOME"):
        return Path(environ["XDG_STATE_HOME"]) / "recalld"
    if os.geteuid() == 0:
        return Path("/var/lib/recalld")
    return Path.home() / ".local" / "state" / "recalld"


def client_socket(explicit: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """What the CLI connects to: `--socket`, then `RECALLD_SOCKET`, then the default path."""
    if explicit:
        return Path(explicit)
    if environ.get("RECALLD_SOCKET"):
        return Path(environ["RECALLD_SOCKET"])
    return default_socket(environ)
