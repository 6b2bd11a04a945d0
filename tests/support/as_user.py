"""Run a `recalld` command as another user: `python tests/support/as_user.py UID GROUPS ARGS...`.

The suite runs as root and its interpreter lives under root's 0700 home, which another uid cannot
read: so everything the command needs is imported while still root, and only then does the
process drop to `UID` (primary group `UID`, supplementary groups `GROUPS`, comma-separated or
`-`) for good, the way a login of that user would run it. The uid needs no account.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    # the whole import graph of a client command, and of `serve` up to its binding the socket
    import encodings.idna  # noqa: F401
    import importlib.readers  # noqa: F401

    import anyio._backends._asyncio  # noqa: F401
    import certifi
    import uvloop  # noqa: F401

    import recalld.app
    import recalld.cli.commands
    import recalld.log

    certifi.where()  # httpx reads its CA bundle through importlib.resources, cached from here on
    uid = int(sys.argv[1])
    groups = [] if sys.argv[2] == "-" else [int(g) for g in sys.argv[2].split(",")]
    os.setgroups(groups)
    os.setgid(uid)
    os.setuid(uid)
    return recalld.cli.commands.main(sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
