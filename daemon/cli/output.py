"""Where a command's words go, and the exit statuses it ends with.

A command writes its answer on stdout (`Output.print`, `Output.json`) and its progress and
complaints on stderr (`Output.err`). Text that comes from the store or from the command line
(titles, paths, namespaces, the daemon's error messages) passes through `shown` first: printed
raw, it could drive the terminal.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from typing import Any, TextIO

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
"""Done; failed (the daemon refused, or is not there); the command line or a file it names is
not usable."""
EXIT_INTERRUPTED = 130
"""A command that stops on Ctrl-C itself, as a shell reports one Ctrl-C ended (128 + SIGINT), and
as the entry point (`recalld.cli.main`) reports one it catches."""

# Bidirectional controls reorder the text that follows them on screen (CVE-2021-42574). Other
# format characters (zero-width joiners in emoji, soft hyphens) and other spaces are harmless.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _unsafe(ch: str) -> bool:
    """All of these lie in the Basic Multilingual Plane, so `\\uXXXX` spells each of them."""
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI_CONTROLS


def shown(text: str, *, keep: str = "") -> str:
    """`text` safe for a terminal: control characters (ESC, the C1 codes), line separators and
    bidi overrides written as `\\uXXXX`. Titles, paths and error messages come from the store,
    i.e. from whoever wrote the record; printed raw, they could move the cursor, rewrite earlier
    lines or reorder what follows. `keep` names characters to leave alone (JSON's newlines)."""
    if text.isprintable():  # the common case; every character escaped below is unprintable
        return text
    return "".join(f"\\u{ord(ch):04x}" if _unsafe(ch) and ch not in keep else ch for ch in text)


class Output:
    """A command's two streams (the process's stdout and stderr unless given)."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr

    def print(self, text: str = "", *, end: str = "\n") -> None:
        """A line of the answer, as given: what came from outside is `shown` already."""
        print(text, end=end, file=self.stdout)

    def err(self, text: str = "", *, end: str = "\n") -> None:
        """Progress or a complaint, as given (`\\r` rewrites a progress line)."""
        print(text, end=end, file=self.stderr)

    def json(self, value: Any) -> None:
        """JSON as the daemon sent it, readable (indented, non-ASCII as is) and terminal-safe: the
        characters `shown` escapes can only occur inside strings, where `\\uXXXX` is their JSON
        spelling, so the output still parses to the same value."""
        self.print(shown(json.dumps(value, indent=2, ensure_ascii=False), keep="\n"))
