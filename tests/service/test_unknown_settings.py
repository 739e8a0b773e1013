"""A misspelled ``OCTR_`` variable is refused in one line naming the closest setting, not ignored
while the service starts with the default it was meant to change."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from online_ctr.config.settings import COMPOSE_VARIABLES, Settings, setting_variables
from tests.service.test_commands import ROOT, assert_one_line, run

pytestmark = pytest.mark.processes

#: The misspellings these tests (and the README) set on purpose.
MISSPELLED = {"OCTR_ALPAH", "OCTR_FOO", "OCTR_REDIS_URI"}


def test_a_misspelled_variable_is_refused_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OCTR_ALPAH", "0.5")
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert "unknown setting OCTR_ALPAH (did you mean OCTR_ALPHA?); unset it or fix its name" in str(
        raised.value
    )


def test_a_name_like_no_setting_gets_no_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCTR_FOO", "1")
    with pytest.raises(ValidationError, match=r"unknown setting OCTR_FOO; unset it"):
        Settings()


def test_names_are_case_insensitive_as_the_settings_read_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("octr_alpha", "0.5")  # a setting: pydantic-settings reads it
    assert Settings().alpha == 0.5
    monkeypatch.setenv("octr_log_levle", "debug")
    with pytest.raises(ValidationError, match=r"octr_log_levle \(did you mean OCTR_LOG_LEVEL\?\)"):
        Settings()


def test_docker_compose_variables_are_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in COMPOSE_VARIABLES:
        monkeypatch.setenv(name, "1")
    assert Settings().alpha is None


def test_every_octr_name_in_the_repository_is_a_setting_or_allowed() -> None:
    """Tests, compose files, examples and docs must not set a name the service would refuse."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    names: set[str] = set()
    for name in files:
        path = ROOT / name
        if path.suffix in {".png", ".gz", ".ico"} or not path.is_file():
            continue
        names.update(re.findall(r"\bOCTR_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="ignore")))
    assert names, "the scan should find the settings' names"
    assert names - setting_variables() - COMPOSE_VARIABLES - MISSPELLED == set()


@pytest.mark.parametrize("command", ["serve", "api", "worker", "status"])
def test_a_real_process_refuses_a_misspelled_variable(command: str, tmp_path: Path) -> None:
    result = run(command, tmp_path, OCTR_ALPAH="0.5", OCTR_REDIS_URL="redis://127.0.0.1:1/0")
    assert_one_line(result, "unknown setting OCTR_ALPAH (did you mean OCTR_ALPHA?)")


@pytest.mark.parametrize("argv", [["models", "list"], ["export", "default", "-"]])
def test_a_cli_command_refuses_a_misspelled_variable(argv: list[str], tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.update(
        PYTHONPATH=str(ROOT), OCTR_REDIS_URL="redis://127.0.0.1:1/0", OCTR_REDIS_URI="x"
    )
    done = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert_one_line((done.returncode, done.stderr), "OCTR_REDIS_URI (did you mean OCTR_REDIS_URL?)")
