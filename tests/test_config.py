"""Configuration: TOML + environment, unknown keys and bad values refused with the field path."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from recalld.config import Config, ConfigError, build, load, to_toml_defaults
from tests.support import ROOT


def test_documented_default_file_matches_the_code_defaults() -> None:
    documented = tomllib.loads((ROOT / "config" / "recalld.toml").read_text())
    assert build(documented, {}) == Config()
    # every section and key of the code appears in the documented file, so it documents them all
    defaults = to_toml_defaults()
    for section, keys in defaults.items():
        assert section in documented, f"[{section}] missing from config/recalld.toml"
        assert set(keys) == set(documented[section]), f"[{section}] keys differ from the code"


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[embedding]\nprovider = "ollama"\ntimeout_s = 5\n[resolver]\nenabled = false\n')
    config = load(
        path,
        {
            "RECALLD_EMBEDDING_PROVIDER": "openai",
            "RECALLD_EMBEDDING_URL": "http://127.0.0.1:8080/v1",
            "RECALLD_RESOLVER_ENABLED": "true",
            "RECALLD_RESOLVER_URL": "http://127.0.0.1:8081/v1",  # an enabled resolver needs one
            "RECALLD_RESOLVER_INTERVAL_S": "1",
            "RECALLD_ACCESS_ADMINS": '["@wheel", "1000"]',
            "RECALLD_SOCKET": "/ignored/by/the/daemon.sock",
        },
    )
    assert config.embedding.provider == "openai"
    assert config.embedding.url == "http://127.0.0.1:8080/v1"
    assert config.embedding.timeout_s == 5.0
    assert config.resolver.enabled is True and config.resolver.interval_s == 1.0
    assert config.access.admins == ["@wheel", "1000"]


@pytest.mark.parametrize(
    ("document", "environ", "path_in_message"),
    [
        ("[store]\ndsnn = 'x'\n", {}, "dsnn"),
        ("[nonsense]\nx = 1\n", {}, "nonsense"),
        ("[store]\npool_min = 0\n", {}, "$.store.pool_min"),
        ("[embedding]\ntimeout_s = -1\n", {}, "$.embedding.timeout_s"),
        ("[embedding]\nprovider = 'magic'\n", {}, "$.embedding.provider"),
        ("[server]\nsocket_mode = 4096\n", {}, "$.server.socket_mode"),
        ("", {"RECALLD_EMBEDDING_TIMEOUT_S": "soon"}, "$.embedding.timeout_s"),
        ("", {"RECALLD_EMBEDDING_TIMOUT_S": "3"}, "RECALLD_EMBEDDING_TIMOUT_S"),
        ("", {"RECALLD_STOR_DSN": "postgresql://nowhere/none"}, "RECALLD_STOR_DSN"),
        ("", {"RECALLD_RESOLVER_ENABLED": "perhaps"}, "$.resolver.enabled"),
        ("[store]\npool_min = 20\npool_max = 5\n", {}, "pool_min"),
        ("[recall]\ndefault_k = 500\nmax_k = 100\n", {}, "default_k"),
        ("not toml at all", {}, "not valid TOML"),
        # values the types allow that broke the daemon once running
        ("[embedding]\ntemplate_version = 7\n", {}, "template_version 7 is unknown"),
        ("[embedding]\nprices = { m = inf }\n", {}, "$.embedding.prices"),
        ("[gc]\nsearch_retention_days = 1000000\n", {}, "$.gc.search_retention_days"),
    ],
)
def test_bad_configuration_is_refused_naming_the_field(
    tmp_path: Path, document: str, environ: dict[str, str], path_in_message: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(document)
    with pytest.raises(ConfigError) as caught:
        load(path, environ)
    assert path_in_message in str(caught.value)


def test_a_misspelled_environment_variable_names_what_would_be_understood() -> None:
    with pytest.raises(ConfigError) as caught:
        build({}, {"RECALLD_STOR_DSN": "postgresql://nowhere/none"})
    message = str(caught.value)
    assert "RECALLD_STOR_DSN" in message and "store" in message and "embedding" in message, message
    assert "RECALLD_SOCKET" in message, "the variables that are not config are named too"
    with pytest.raises(ConfigError) as caught:
        build({}, {"RECALLD_STORE_DNS": "postgresql://nowhere/none"})
    assert "RECALLD_STORE_DNS" in str(caught.value) and "dsn" in str(caught.value), str(caught.value)
    # the CLI's own variables are not config keys, and not errors either
    assert build({}, {"RECALLD_SOCKET": "/run/x.sock", "RECALLD_CONFIG": "/etc/recalld.toml"}) == Config()


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "absent.toml", {})


def test_a_config_path_that_is_no_readable_utf8_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load(tmp_path, {})  # a directory
    binary = tmp_path / "c.toml"
    binary.write_bytes(b"[store]\ndsn = '\xff'\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load(binary, {})


def test_serve_reports_a_start_failure_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    not_a_socket = tmp_path / "afile"
    not_a_socket.write_text("someone's file")
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "serve", "--data-dir", str(tmp_path / "data"), "--socket", str(not_a_socket)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "is not a socket" in done.stderr
    assert not_a_socket.read_text() == "someone's file"


def test_serve_refuses_bad_config_at_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "c.toml"
    path.write_text("[store]\npool_max = 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "$.store.pool_max" in done.stderr
    # the same file named by the environment instead of --config
    import os

    by_env = subprocess.run(
        [sys.executable, "-m", "recalld", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RECALLD_CONFIG": str(path)},
    )
    assert by_env.returncode == 2 and "$.store.pool_max" in by_env.stderr


def test_serve_refuses_a_misspelled_environment_variable(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    not_a_socket = tmp_path / "afile"  # a daemon that ignored the variable would stop here, with 1
    not_a_socket.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "serve", "--data-dir", str(tmp_path / "data"), "--socket", str(not_a_socket)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RECALLD_STOR_DSN": "postgresql://nowhere/none"},
    )
    assert done.returncode == 2 and "RECALLD_STOR_DSN" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "data").exists(), "refused before anything was started or written"
