"""The layers of `recalld` and the direction of imports between them.

- `recalld.actors` (the actors/ folder) is anyio-only: no I/O library, nothing of the rest of
  `recalld`; the rest of `recalld` (the daemon/ folder) may import it.
- `recalld.actors.kernel` is generic (supervision, mailboxes, batching, tickers, the breaker): it
  imports nothing of recalld beyond itself, so no domain type creeps into it.
- `recalld.actors.ports` holds Protocols and plain data: it imports other ports and the pure
  value modules they name, never an actor (nothing that runs: an embedder, a manager, a ticker).
- `recalld.wire` holds the control socket's msgspec types: msgspec and the standard library only.
- `recalld.client` is what a program talking to the daemon loads: no server module.
- `recalld.services` answer what the routes ask for and never import `recalld.control`.
- No module of `recalld` imports itself through others, and no module imports another's private
  (`_underscored`) names; the scripts of `bench/` share code through public names only.

Two views, each catching what the other cannot. Statically, every import statement of every
module, read with `ast`, function-local ones and `TYPE_CHECKING` ones included (a cycle hidden
in a function body is still a cycle, one among types still ties the layers together); this is
also the only way to see `asyncio`, which anyio itself loads. At run time, what importing a layer
actually loads, so a third-party package that drags in aiohttp is caught too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"recalld": ROOT / "daemon", "recalld.actors": ROOT / "actors"}
"""Installed package -> the folder it is (pyproject.toml's package-dir)."""
OFF_LIMITS_TO_ACTORS = ("asyncio", "aiohttp", "asyncpg", "httpx")
"""I/O libraries `recalld.actors` must not import: the event loop and I/O are the daemon's."""


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of `recalld`."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if package == "recalld" and parts[:1] == ("actors",):
                continue
            name = ".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))
            found[name] = path
    return found


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def imports_by_module(files: Mapping[str, Path]) -> dict[str, set[str]]:
    return {
        module: imports_of(module, path.read_text(encoding="utf-8"), is_package=path.name == "__init__.py")
        for module, path in files.items()
    }


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


def test_no_import_cycle_among_the_modules_of_recalld() -> None:
    files = module_files()
    assert "recalld.actors.kernel.supervisor" in files and "recalld.control.server" in files
    cycle = find_cycle(import_graph(files))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_actors_import_neither_io_libraries_nor_the_rest_of_recalld() -> None:
    actors = {m: p for m, p in module_files().items() if within(m, "recalld.actors")}
    bad = sorted(
        f"{module} imports {name}"
        for module, named in imports_by_module(actors).items()
        for name in named
        if name.split(".")[0] in OFF_LIMITS_TO_ACTORS
        or (within(name, "recalld") and not within(name, "recalld.actors"))
    )
    assert not bad, "; ".join(bad)


def loaded_by(modules: Iterable[str], forbidden: Iterable[str]) -> list[str]:
    """The modules of `forbidden` (and below them) that importing `modules` loads, in a fresh
    interpreter."""
    program = (
        "import importlib, sys\n"
        f"for name in {sorted(modules)!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {sorted(forbidden)!r}))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    return [name for name in done.stdout.strip().split(",") if name]


def test_importing_actors_loads_no_io_library_nor_the_rest_of_recalld() -> None:
    """At run time, through whatever actors imports; asyncio is left to the static test above
    (anyio loads it)."""
    modules = [m for m in module_files() if within(m, "recalld.actors")]
    assert "recalld.actors.kernel.supervisor" in modules and "recalld.actors.recall.fusion" in modules
    forbidden = [name for name in OFF_LIMITS_TO_ACTORS if name != "asyncio"]
    forbidden += [m for m in module_files() if not within(m, "recalld.actors") and m != "recalld"]
    assert loaded_by(modules, forbidden) == []


def test_bench_scripts_import_no_private_name() -> None:
    """What several scripts share lives in bench/lib under a public name; a module that reaches
    for another's `_helper` (or the daemon's) breaks when that module is refactored."""
    bad = sorted(
        f"{path.relative_to(ROOT)} imports {node.module}.{alias.name}"
        for path in (ROOT / "bench").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("recalld", "bench")
        for alias in node.names
        if alias.name.startswith("_")
    )
    assert not bad, "; ".join(bad)


def test_no_module_imports_another_modules_private_names() -> None:
    bad = sorted(
        f"{path.relative_to(ROOT)} imports {node.module}.{alias.name}"
        for module, path in module_files().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and within(node.module or "", "recalld") and node.module != module
        for alias in node.names
        if alias.name.startswith("_")
    )
    assert not bad, "; ".join(bad)


# -- the layers inside recalld


WIRE_MAY_IMPORT = ("msgspec", "recalld.wire")
CLIENT_MAY_IMPORT = ("recalld.client", "recalld.wire", "recalld.paths")
"""Besides third-party libraries: what the client side is built of."""
SERVER_SIDE = (
    "aiohttp.web",
    "asyncpg",
    "faiss",
    "numpy",
    "onnxruntime",
    "recalld.actors",
    "recalld.config",
    "recalld.control",
)
"""What only the server needs: a client that loads any of these pays for a server it never runs
(0.9 s and 77 MB of imports before a command did anything)."""


def _third_party_or_ours(name: str) -> bool:
    top = name.split(".")[0]
    return top not in sys.stdlib_module_names and top != "__future__"


def layer(package: str) -> dict[str, set[str]]:
    return imports_by_module({m: p for m, p in module_files().items() if within(m, package)})


def test_wire_types_import_only_msgspec_and_each_other() -> None:
    named = layer("recalld.wire")
    assert "recalld.wire.records" in named
    bad = sorted(
        f"{module} imports {name}"
        for module, names in named.items()
        for name in names
        if _third_party_or_ours(name) and not any(within(name, ok) for ok in WIRE_MAY_IMPORT)
    )
    assert not bad, "; ".join(bad)


def test_the_client_imports_no_server_module() -> None:
    named = layer("recalld.client")
    assert "recalld.client.calls" in named
    bad = sorted(
        f"{module} imports {name}"
        for module, names in named.items()
        for name in names
        if within(name, "recalld") and name != "recalld" and not any(within(name, ok) for ok in CLIENT_MAY_IMPORT)
    )
    assert not bad, "; ".join(bad)


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    assert loaded_by(["recalld", "recalld.client", "recalld.client.calls"], SERVER_SIDE) == []
    done = subprocess.run(
        [sys.executable, "-c", "from recalld import AsyncClient, Client, ClientError; print(Client.__module__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "recalld.client"


def test_services_never_import_control() -> None:
    named = layer("recalld.services")
    assert "recalld.services.recall" in named
    bad = sorted(f"{m} imports {n}" for m, names in named.items() for n in names if within(n, "recalld.control"))
    assert not bad, "; ".join(bad)


def test_the_kernel_imports_nothing_of_recalld_but_itself() -> None:
    named = layer("recalld.actors.kernel")
    assert "recalld.actors.kernel.breaker" in named
    bad = sorted(
        f"{m} imports {n}"
        for m, names in named.items()
        for n in names
        if within(n, "recalld") and not within(n, "recalld.actors.kernel")
    )
    assert not bad, "; ".join(bad)


RUNNING_PARTS = (
    "embedder",
    "manager",
    "ticker",
    "resolver",
    "sweeper",
    "catch_up",
    "dispatch",
    "supervisor",
    "mailbox",
)
"""Module stems of what runs in actors/: a port that imported one would tie the contract to an
implementation."""


def test_ports_import_no_actor_that_runs() -> None:
    named = layer("recalld.actors.ports")
    assert "recalld.actors.ports.index" in named
    bad = sorted(
        f"{m} imports {n}"
        for m, names in named.items()
        for n in names
        if within(n, "recalld.actors") and any(part in RUNNING_PARTS for part in n.split("."))
    )
    assert not bad, "; ".join(bad)
