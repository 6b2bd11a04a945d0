"""The direction of imports: `actors` is anyio-only and never reaches into I/O libraries or
`daemon`, no module of `actors` or `daemon` imports itself through others, and the scripts of
`bench/` share code through public names only.

Two views, each catching what the other cannot. Statically, every import statement of every
module, read with `ast`, function-local ones and `TYPE_CHECKING` ones included (a cycle hidden
in a function body is still a cycle, one among types still ties the layers together); this is
also the only way to see `asyncio`, which anyio itself loads. At run time, what importing all
of `actors` actually loads, so a third-party package that drags in aiohttp is caught too.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import actors

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "daemon")
OURS = (*PACKAGES, "bench")
OFF_LIMITS_TO_ACTORS = ("asyncio", "aiohttp", "asyncpg", "httpx", "daemon")
"""What `actors` must not import: the event loop and I/O libraries are the daemon's, and the
daemon depends on the actors, never the other way round."""


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of `packages` under `root`."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(module: str, source: str, *, is_package: bool) -> set[str]:
    """Every module name an import statement of `module` names, wherever it stands. For
    `from X import Y` both X and X.Y (Y may be a submodule); relative imports resolved."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    named: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            named.add(origin)
            named.update(f"{origin}.{alias.name}" for alias in node.names)
    return named


def import_graph(files: Mapping[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of `files` it imports."""
    graph = {}
    for module, path in files.items():
        named = imports_of(module, path.read_text(encoding="utf-8"), is_package=path.name == "__init__.py")
        graph[module] = {other for other in named if other in files and other != module}
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts (`[a, b, a]`), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor in on_path:
                return [*path[path.index(successor) :], successor]
            if successor not in done and (cycle := visit(successor)) is not None:
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done and (cycle := visit(start)) is not None:
            return cycle
    return None


# -- the scan itself, on tables


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        ({}, None),
        ({"a": ["b"], "b": ["c"], "c": []}, None),
        ({"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}, None),  # a diamond is no cycle
        ({"a": ["a"]}, ["a", "a"]),
        ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
        ({"a": ["b"], "b": ["c"], "c": ["a"]}, ["a", "b", "c", "a"]),
        ({"a": [], "x": ["y"], "y": ["z"], "z": ["y"]}, ["y", "z", "y"]),  # not through the first node
        ({"a": ["b"], "b": ["c"], "c": [], "d": ["b", "e"], "e": ["d"]}, ["d", "e", "d"]),  # after a finished part
    ],
)
def test_find_cycle(graph: dict[str, list[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


@pytest.mark.parametrize(
    ("module", "is_package", "source", "named"),
    [
        ("p.m", False, "import os.path", {"os.path"}),
        ("p.m", False, "from p import q", {"p", "p.q"}),
        ("p.m", False, "from . import q", {"p", "p.q"}),
        ("p.m", False, "from .q import f", {"p.q", "p.q.f"}),
        ("p.s.m", False, "from ..q import f", {"p.q", "p.q.f"}),
        ("p", True, "from .q import f", {"p.q", "p.q.f"}),
        ("p.m", False, "def f():\n    import p.q\n", {"p.q"}),  # hidden in a function
        ("p.m", False, "if TYPE_CHECKING:\n    from p.q import T\n", {"p.q", "p.q.T"}),
    ],
)
def test_imports_of(module: str, is_package: bool, source: str, named: set[str]) -> None:
    assert imports_of(module, source, is_package=is_package) == named


# -- the code base


def test_no_import_cycle_among_the_modules_of_actors_and_daemon() -> None:
    files = module_files(ROOT, PACKAGES)
    assert "actors.kernel.supervisor" in files and "daemon.control.server" in files
    cycle = find_cycle(import_graph(files))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_actors_import_neither_io_libraries_nor_daemon() -> None:
    files = module_files(ROOT, ["actors"])
    bad = sorted(
        f"{module} imports {name}"
        for module, path in files.items()
        for name in imports_of(module, path.read_text(encoding="utf-8"), is_package=path.name == "__init__.py")
        if name.split(".")[0] in OFF_LIMITS_TO_ACTORS
    )
    assert not bad, "; ".join(bad)


def test_importing_actors_loads_no_io_library_nor_daemon() -> None:
    """At run time, through whatever actors imports; asyncio is left to the static test above
    (anyio loads it)."""
    modules = [m.name for m in pkgutil.walk_packages(actors.__path__, "actors.")]
    assert "actors.kernel.supervisor" in modules and "actors.fusion" in modules
    off_limits = tuple(name for name in OFF_LIMITS_TO_ACTORS if name != "asyncio")
    program = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {off_limits!r})\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "", f"actors pulled in: {done.stdout.strip()}"


def test_bench_scripts_import_no_private_name() -> None:
    """What several scripts share lives in bench/harness.py under a public name; a script that
    reaches for another's `_helper` (or the daemon's) breaks when that module is refactored."""
    bad = sorted(
        f"{path.name} imports {node.module}.{alias.name}"
        for path in (ROOT / "bench").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS
        for alias in node.names
        if alias.name.startswith("_")
    )
    assert not bad, "; ".join(bad)


# -- the client side: what a client loads


WIRE_MAY_IMPORT = ("msgspec", "daemon.wire")
CLIENT_MODULES = ("daemon.client", "daemon.client_calls", "daemon.paths")
"""The client of the control socket: what a program talking to the daemon imports."""
SERVER_SIDE = ("aiohttp.web", "asyncpg", "faiss", "numpy", "onnxruntime", "actors", "daemon.config", "daemon.control")
"""What only the server needs: a client that loads any of these pays for a server it never runs
(0.9 s and 77 MB of imports before a command did anything)."""


def _third_party_or_ours(name: str) -> bool:
    top = name.split(".")[0]
    return top not in sys.stdlib_module_names and top != "__future__"


def test_wire_types_import_only_msgspec_and_each_other() -> None:
    files = {
        m: p for m, p in module_files(ROOT, ["daemon"]).items() if m == "daemon.wire" or m.startswith("daemon.wire.")
    }
    assert "daemon.wire.records" in files
    bad = sorted(
        f"{module} imports {name}"
        for module, path in files.items()
        for name in imports_of(module, path.read_text(encoding="utf-8"), is_package=path.name == "__init__.py")
        if _third_party_or_ours(name) and not any(name == ok or name.startswith(f"{ok}.") for ok in WIRE_MAY_IMPORT)
    )
    assert not bad, "; ".join(bad)


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    program = (
        "import importlib, sys\n"
        f"for name in {CLIENT_MODULES!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if any(m == s or m.startswith(s + '.') for s in {SERVER_SIDE!r}))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "", f"the client pulled in: {done.stdout.strip()}"
