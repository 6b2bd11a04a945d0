"""`recalld mcp`'s wiring, before any MCP: the daemon's config it reads, and without the SDK the
hint that says how to install it, for how recalld itself is installed (a source checkout,
editable or not installed at all, or a package)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import recalld
from recalld.cli.mcp import checkout_of, missing_sdk_hint
from tests.support import ROOT

RECALLD = '[project]\nname = "recalld"\nversion = "0.1.0"\n'


@pytest.mark.parametrize(
    ("project_file", "is_checkout"),
    [
        (RECALLD, True),
        # site-packages: the package lies among others, no project file beside it
        (None, False),
        # a project that vendors a `daemon` package of its own
        ('[project]\nname = "someone-else"\n', False),
        ("[tool.black]\nline-length = 100\n", False),
        ("[project\nname = ", False),
        (b"\xff\xfe not text", False),
    ],
)
def test_a_checkout_is_told_from_an_installed_package(
    tmp_path: Path, project_file: str | bytes | None, is_checkout: bool
) -> None:
    package = tmp_path / "daemon"
    package.mkdir()
    if isinstance(project_file, str):
        (tmp_path / "pyproject.toml").write_text(project_file, encoding="utf-8")
    elif isinstance(project_file, bytes):
        (tmp_path / "pyproject.toml").write_bytes(project_file)
    assert checkout_of(package) == (tmp_path if is_checkout else None)


def test_the_code_that_runs_here_is_this_checkout() -> None:
    """The suite runs the checkout's own code (editable install or not): it is found as one."""
    assert checkout_of(Path(recalld.__file__).parent) == ROOT


def test_an_installed_package_is_told_to_install_the_extra_by_name() -> None:
    hint = missing_sdk_hint(None)
    assert hint.endswith("pip install 'recalld[mcp]'"), hint


def test_a_checkout_is_told_to_install_itself_editable_with_the_extra() -> None:
    hint = missing_sdk_hint(Path("/home/ana/recalld"))
    assert "pip install -e '.[mcp]' in the checkout (/home/ana/recalld)" in hint, hint
    assert "recalld[mcp]" not in hint, hint


def test_a_config_it_cannot_read_stops_it_before_serving(tmp_path: Path) -> None:
    """`recalld mcp` reads the daemon's config as `recalld serve` does (for recall.max_k): a file
    it cannot read is a usage error, said on stderr, with nothing served on stdout."""
    missing = tmp_path / "absent.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "mcp", "-n", "notes", "--config", str(missing)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stdout == "", done
    assert f"config file not found: {missing}" in done.stderr, done
