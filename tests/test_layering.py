"""The direction of imports: `actors` is anyio-only and never reaches into I/O libraries."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import actors


def test_importing_actors_loads_neither_aiohttp_nor_asyncpg_nor_daemon() -> None:
    modules = [m.name for m in pkgutil.walk_packages(actors.__path__, "actors.")]
    assert "actors.kernel.supervisor" in modules and "actors.fusion" in modules
    program = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'asyncpg', 'daemon'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "", f"actors pulled in: {done.stdout.strip()}"
