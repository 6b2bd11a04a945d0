"""bench/ is a package whose scripts run as `python -m bench.<name>` from the checkout's root: no
module edits the import path, no module imports itself back through another, none outgrows 500
lines (what several scripts share lives in bench/lib, one module per concern), and every script
answers `--help` when run as a module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

BENCH = ROOT / "bench"
MAX_LINES = 500


def modules() -> dict[str, Path]:
    """Dotted name -> file of every Python module under bench/ (a package's `__init__` by the
    package's name)."""
    found = {}
    for path in sorted(BENCH.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_bench_and_its_folders_of_modules_are_packages() -> None:
    folders = {path.parent for path in modules().values()} - {BENCH / "timeline"}
    assert BENCH in folders and BENCH / "lib" in folders
    missing = sorted(str(folder.relative_to(ROOT)) for folder in folders if not (folder / "__init__.py").exists())
    assert not missing, f"folders of modules without __init__.py: {missing}"


def test_no_module_touches_the_import_path() -> None:
    """`sys.path` read or written: a script that needs it is not run as a module of the package."""
    bad = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in modules().values()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )
    assert not bad, f"sys.path used at {bad}"


def test_no_module_outgrows_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The bench modules `name` imports (`from bench.lib import report` counts as bench.lib.report)."""
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {m for m in found if m in known and m != name}


def test_no_import_cycle() -> None:
    found = modules()
    graph = {name: imported(name, path, set(found)) for name, path in found.items()}
    cycles = []

    def visit(name: str, trail: list[str]) -> None:
        for other in sorted(graph[name]):
            if other in trail:
                cycles.append(" -> ".join([*trail[trail.index(other) :], other]))
            elif other not in done:
                visit(other, [*trail, other])
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    assert not cycles, cycles


def test_what_scripts_share_lives_in_bench_lib() -> None:
    """No module imports one of bench/'s scripts: what two of them share is in bench.lib, so that
    changing a script's report never breaks another."""
    found = modules()
    top = {name for name in scripts() if name.count(".") == 1}
    bad = sorted(
        f"{name} imports {other}"
        for name, path in found.items()
        for other in imported(name, path, set(found))
        if other in top
    )
    assert not bad, bad


def scripts() -> list[str]:
    """The modules that end in a `__main__` guard: the scripts."""
    return [
        name
        for name, path in modules().items()
        if any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in parsed(path).body)
    ]


HELP = """
import contextlib, io, runpy, sys
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code in (0, None) and "usage:" in out.getvalue():
            continue
        print(f"{name}: exit {exc.code}: {out.getvalue()[-300:]}")
    else:
        print(f"{name}: ran to its end with --help")
"""
"""Each script run as `python -m` runs it (`runpy.run_module` as `__main__`), all in one process:
the imports they share are paid once."""


def test_every_script_answers_help_as_a_module() -> None:
    names = scripts()
    assert "bench.recall" in names and "bench.golden.check_questions" in names
    done = subprocess.run(
        [sys.executable, "-c", HELP, *names], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "", done.stdout
