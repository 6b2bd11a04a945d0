"""What every client-side command shares: a `Client` on the socket the command line names, and
one way to end when the daemon refuses or is not there.

A command group that talks to the daemon runs its commands through `connected`; nothing here
loads anything of the server.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import msgspec

from recalld import paths
from recalld.cli.output import EXIT_FAIL, EXIT_USAGE, Output, shown
from recalld.client import Client, ClientError, InvalidId

ClientCommand = Callable[[Client, argparse.Namespace, Output], int]
"""A command's body: the client, the parsed command line, where to write; its exit status."""


def connected(args: argparse.Namespace, out: Output, command: ClientCommand) -> int:
    """`command`'s exit status, run with a client of the socket `--socket` (else `$RECALLD_SOCKET`,
    else the default) names, closed after. A refusal by the daemon, a record id that is no UUID
    and an answer that is not the daemon's are each one line and exit 1; no daemon at all is that
    line and where it was looked for, exit 1; an argument that is not valid UTF-8, exit 2. Output
    cut short by the reader (a broken pipe) is left to the entry point."""
    socket = paths.client_socket(args.socket)
    client = Client(socket)
    try:
        return command(client, args, out)
    except ClientError as exc:
        out.err(f"recalld: {shown(error_line(exc))}")
        return EXIT_FAIL
    except InvalidId as exc:  # refused by the client, before anything was sent
        out.err(f"recalld: {shown(str(exc))}")
        return EXIT_FAIL
    except msgspec.DecodeError as exc:
        out.err(shown(f"recalld: the answer from {socket} is not one recalld can read: {exc}"))
        return EXIT_FAIL
    except BrokenPipeError:
        raise  # our reader left (`| head`), not the daemon: recalld.cli ends quietly
    except ConnectionError as exc:
        out.err(f"recalld: {shown(str(exc))}")
        out.err(shown(not_reachable_advice(socket, args.socket)))
        return EXIT_FAIL
    except UnicodeEncodeError:
        # an argument that is not valid UTF-8 (Python keeps its bytes as surrogates)
        out.err("recalld: arguments must be valid UTF-8")
        return EXIT_USAGE
    finally:
        client.close()


def error_line(exc: ClientError) -> str:
    """A refusal in one line; a 409 names the record that is already there."""
    line = str(exc)
    if exc.existing_id is not None:
        line += f" (existing record: {exc.existing_id}; `recalld get {exc.existing_id}` shows it)"
    return line


def not_reachable_advice(socket: Path, given: str | None) -> str:
    """What to do when no daemon answers at `socket`, and where that path came from."""
    source = "--socket" if given else ("$RECALLD_SOCKET" if os.environ.get("RECALLD_SOCKET") else "the default")
    return (
        f"  tried {socket} ({source}). Is the daemon running? Start it with `recalld serve`; if it runs "
        "elsewhere, name its socket with --socket PATH or RECALLD_SOCKET=PATH"
    )
