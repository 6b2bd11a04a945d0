"""The `recalld` executable's entry point: the CLI (`recalld.cli.commands`) behind what any command-line
tool owes its terminal.

- Ctrl-C ends a command with exit status 130 and one line, never a traceback, wherever it lands:
  while Python is still importing the CLI, or a command that does not handle it itself.
- Output cut short by the reader (`recalld ... | head`) ends the command quietly, with the
  status of a process stopped by SIGPIPE (141), as `cat` and `grep` end.

Nothing is imported here before the guard is in place: importing the CLI is part of what an
interrupt may cut.
"""

from __future__ import annotations

import os
import sys

EXIT_INTERRUPTED = 130
"""128 + SIGINT, as a shell reports a command Ctrl-C ended."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE."""


def main() -> int:
    # httpcore, under httpx, imports trio whenever it is installed (for async locks), which took
    # longer than the rest of a client command's start-up (0.14 s here). No command runs on trio
    # (the daemon and the MCP server run on asyncio, the CLI's client is sync): mark it missing
    # for this process, and httpcore goes without.
    sys.modules.setdefault("trio", None)  # type: ignore[arg-type]
    try:
        from recalld.cli.commands import main as run

        code = run()
        sys.stdout.flush()  # a broken pipe shows here when the output was buffered
        return code
    except KeyboardInterrupt:
        print("\nrecalld: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python would complain again when it flushes stdout at exit: point it at nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
