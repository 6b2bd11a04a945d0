"""`recalld serve`: the daemon itself. Its modules (aiohttp, asyncpg, FAISS, the model) load when
it runs, not when the CLI starts: a client command never pays for them."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from recalld import paths
from recalld.cli.output import EXIT_FAIL, EXIT_USAGE, Output
from recalld.cli.parser import Subparsers


def register(sub: Subparsers) -> None:
    serve = sub.add_parser("serve", help="run the daemon")
    serve.add_argument(
        "--config", help="TOML config file (default: $RECALLD_CONFIG, then built-in defaults, see config/recalld.toml)"
    )
    serve.add_argument("--data-dir", help="state directory (embedded PostgreSQL, generations)")
    serve.add_argument("--socket", dest="socket", default=argparse.SUPPRESS, help="control socket path")


def run(args: argparse.Namespace, out: Output) -> int:
    import anyio

    from recalld import app, log
    from recalld.config import ConfigError, load

    try:
        config = load(args.config or os.environ.get("RECALLD_CONFIG") or None)
    except ConfigError as exc:
        out.err(f"recalld: {exc}")
        return EXIT_USAGE
    log.setup(config.log.level)
    # Records live in the data directory's files: nothing recalld creates is open to group or
    # others, whatever umask it inherited (systemd's UMask= covers only the unit). A stricter one
    # is kept. The control socket sets its own mode ([server] socket_mode).
    os.umask(os.umask(app.PRIVATE_UMASK) | app.PRIVATE_UMASK)
    # absolute: the embedded PostgreSQL's tools run from / and would misread a relative path
    data_dir = Path(args.data_dir or config.store.data_dir or paths.default_data_dir()).absolute()
    socket_path = Path(args.socket or config.server.socket or paths.default_socket()).absolute()
    try:
        return anyio.run(
            lambda: app.serve(config, data_dir=data_dir, socket_path=socket_path),
            backend="asyncio",
            backend_options={"use_uvloop": True},  # asyncio on libuv: the same code, less CPU per request
        )
    except Exception as exc:
        cause = app.startup_error(exc)
        if cause is None:
            raise
        out.err(f"recalld: {type(cause).__name__}: {cause}")
        return EXIT_FAIL
