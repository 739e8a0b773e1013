"""Conventional commands: flags that override ``OCTR_*``, a ``--help`` that lists them and every
other variable, ``--version``, a fixed embedded Redis port and ``online-ctr status``."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from online_ctr.cli.flags import add_parser, command_flags, settings_from_args
from online_ctr.cli.main import build_parser, main
from online_ctr.config.settings import Settings
from online_ctr.process import StartupError, variable
from testkit.ports import free_port

pytestmark = pytest.mark.processes

#: This checkout, first on the children's path (the virtualenv may hold another checkout).
ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["serve", "api", "worker"]


def parse(command: str, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="online-ctr")
    add_parser(parser.add_subparsers(dest="command"), command, "test")
    return parser.parse_args([command, *argv])


def cli(*argv: str, timeout_s: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    """``online-ctr ARGV`` in a clean environment (no OCTR_ variable unless given)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(PYTHONPATH=str(ROOT), OCTR_AUTH="off", **env)
    command = [sys.executable, "-m", "online_ctr.cli.main", *argv]
    return subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=timeout_s
    )


def assert_one_line(done: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert done.returncode != 0, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("online-ctr: ") and "Traceback" not in done.stderr
    for part in parts:
        assert part in done.stderr, done.stderr


def test_version_is_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"online-ctr {version('online-ctr')}\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_the_flags_their_variables_and_every_other_variable(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # unwrapped
    for flag, field in command_flags(command).items():
        assert f"{flag} {flag[2:].replace('-', '_').upper()}" in text
        assert f"overrides {variable(field)}" in text
    epilog = text.split("other settings, from the environment:")[1]
    for field, info in Settings.model_fields.items():
        if field not in command_flags(command).values():
            assert f"{variable(field)}=" in epilog
            assert " ".join((info.description or "").split()) in epilog
    assert ("OCTR_WORKER_METRICS_PORT=" in epilog) is (command != "worker")


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OCTR_PORT", "1234")
    monkeypatch.setenv("OCTR_HOST", "0.0.0.0")
    monkeypatch.setenv("OCTR_REDIS_URL", "redis://env:1/0")
    args = parse("serve", "--port", "9000", "--redis-url", "redis://flag:2/0",
                 "--data-dir", str(tmp_path), "--workers", "3", "--log-level", "DEBUG")  # fmt: skip
    settings = settings_from_args(args, "serve")
    assert (settings.port, settings.host, settings.redis_url) == (
        9000,
        "0.0.0.0",
        "redis://flag:2/0",
    )
    assert (settings.data_dir, settings.workers, settings.log_level) == (tmp_path, 3, "debug")
    worker = settings_from_args(parse("worker", "--host", "::1", "--port", "9200"), "worker")
    assert (worker.worker_metrics_host, worker.worker_metrics_port, worker.port) == (
        "::1",
        9200,
        1234,
    )


@pytest.mark.parametrize(
    ("command", "argv", "expected"),
    [
        ("serve", ["--port", "99999"], "--port (OCTR_PORT): input should be less than or equal"),
        ("worker", ["--port", "x"], "--port (OCTR_WORKER_METRICS_PORT): input should be a valid"),
        ("api", ["--redis-url", "localhost"], "--redis-url (OCTR_REDIS_URL): 'localhost' is not"),
        ("serve", ["--workers", "0"], "--workers (OCTR_WORKERS): input should be greater than"),
        ("serve", ["--log-level", "loud"], "--log-level (OCTR_LOG_LEVEL): input should be 'debug'"),
    ],
)
def test_invalid_flags_name_the_flag_and_the_variable(
    command: str, argv: list[str], expected: str
) -> None:
    with pytest.raises(StartupError) as refused:
        settings_from_args(parse(command, *argv), command)
    message = str(refused.value.code)
    assert message.startswith("online-ctr: invalid configuration: ") and "\n" not in message
    assert expected in message


@pytest.mark.parametrize("command", ["api", "worker"])
def test_one_process_commands_refuse_more_workers(command: str) -> None:
    done = cli(command, "--workers", "2", "--redis-url", "redis://127.0.0.1:1/0")
    assert_one_line(done, "--workers is 2", f"run more `online-ctr {command}`")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_busy_embedded_redis_port_names_its_variable(busy_port: int, tmp_path: Path) -> None:
    done = cli("serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "d"),
               OCTR_WORKER_METRICS_PORT="0", OCTR_EMBEDDED_REDIS_PORT=str(busy_port))  # fmt: skip
    assert_one_line(done, f"port {busy_port} on 127.0.0.1 (OCTR_EMBEDDED_REDIS_PORT) is already")


def test_status_of_a_directory_never_served(tmp_path: Path) -> None:
    done = cli("status", "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert "no `online-ctr serve` has run here" in done.stdout
