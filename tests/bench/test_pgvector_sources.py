"""bench/pgvector.sh's deb-src entry for `apt-get source` comes from the machine's own Debian
archive: the URIs and components of the entries whose suites include the machine's release, with
the type set to deb-src and the suite to the one that carries the pinned pgvector; never an archive
named by the script. `--print-sources` prints what it would use and changes nothing; APT_ETC and
DEBIAN_CODENAME point it at a sample apt configuration of a bookworm machine here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support import ROOT

SCRIPT = ROOT / "bench/pgvector.sh"

DEB822 = """\
Types: deb
# a comment inside the stanza
URIs: http://archive.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/example.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://other.example/apt
Suites: nodistro
Components: main
"""

ONE_LINE = """\
# deb http://commented.example/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://line.example/debian bookworm main non-free
deb http://line.example/debian bookworm-backports main
deb-src http://already.example/debian bookworm main
deb http://other.example/apt cloud-sdk-bookworm main
"""


def printed(apt_etc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "--print-sources"],
        env={**os.environ, "APT_ETC": str(apt_etc), "DEBIAN_CODENAME": "bookworm"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_deb_src_entries_copy_the_machines_deb_entries(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/example.sources").write_text(DEB822)
    (tmp_path / "sources.list").write_text(ONE_LINE)

    done = printed(tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "# recalld-bench-src.list\n"
        "deb-src [arch=amd64 signed-by=/k.gpg] http://line.example/debian trixie main non-free\n"
        "# recalld-bench-src.sources\n"
        "Types: deb-src\n"
        "URIs: http://archive.example/debian\n"
        "Suites: trixie\n"
        "Components: main contrib\n"
        "Signed-By: /usr/share/keyrings/example.gpg\n"
        "\n"
    )
    assert sorted(p.name for p in (tmp_path / "sources.list.d").iterdir()) == ["example.sources"]


def test_no_deb_entry_is_an_error_that_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "deb-src http://already.example/debian bookworm main\ndeb http://security.example/debian bookworm-security main\n"
    )

    done = printed(tmp_path)

    assert done.returncode != 0
    assert "no deb entry" in done.stderr
    assert done.stdout == ""
    assert list((tmp_path / "sources.list.d").iterdir()) == []


def test_the_script_names_no_archive_of_its_own() -> None:
    """Every `URIs:` or `deb-src http...` the script could write comes from the machine's files."""
    text = SCRIPT.read_text()
    assert "http://" not in text and "https://" not in text
