"""What the distribution installs: one import package, `recalld` (the daemon/ folder, with the
actors/ folder as `recalld.actors`), every subpackage listed, and the console script."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.support import ROOT


def listed_packages() -> list[str]:
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_package_folder_is_listed() -> None:
    found = ["recalld", "recalld.actors"]
    for package, folder in (("recalld", ROOT / "daemon"), ("recalld.actors", ROOT / "actors")):
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            if parts and "__pycache__" not in parts and not (package == "recalld" and parts[0] == "actors"):
                found.append(".".join((package, *parts)))
    assert sorted(listed_packages()) == sorted(set(found))


def test_the_wheel_holds_one_top_level_package(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("recalld-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith((".dist-info", ".data"))} == {"recalld"}, sorted(tops)
    assert "recalld/actors/kernel/mailbox.py" in names and "recalld/store/migrations/0001_records.sql" in names
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    assert "recalld = recalld.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
