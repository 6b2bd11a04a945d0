"""mypy --strict over `recalld` and `bench/`, as the installed names see them.

The daemon/ folder is the package `recalld` and actors/ is `recalld.actors` (pyproject.toml's
package-dir); mypy finds modules by folder names and runs no import hooks, so it is pointed at a
tree of links laid out as the installed package is: `recalld/` (daemon/'s entries, with `actors`
beside them) and `bench/`. Run it as `.venv/bin/python -m tests.support.typecheck`;
tests/test_lint.py runs it too.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def link_tree(into: Path) -> Path:
    """`into/recalld` and `into/bench`, made of links to the checkout's files; returns `into`."""
    package = into / "recalld"
    package.mkdir()
    for entry in (ROOT / "daemon").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "actors").symlink_to(ROOT / "actors")
    (into / "bench").symlink_to(ROOT / "bench")
    return into


def run_mypy() -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="recalld-typecheck-") as work:
        tree = link_tree(Path(work))
        command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
        command += ["--cache-dir", str(ROOT / ".mypy_cache"), "-p", "recalld", "-p", "bench"]
        return subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=900)


if __name__ == "__main__":
    done = run_mypy()
    print(done.stdout, end="")
    print(done.stderr, end="", file=sys.stderr)
    sys.exit(done.returncode)
